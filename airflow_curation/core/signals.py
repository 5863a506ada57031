"""Per-document quality signals over a batch, as Arrow columns.

One compiled pass (numba) walks the UTF-8 buffer of an Arrow string array: it decodes code points,
classifies them through a Unicode table, cuts words (whitespace-delimited), lines and paragraphs, and
hashes each of them; small per-document hash tables then give duplicate lines/paragraphs and the
Gopher n-gram repetition signals. No per-character Python runs, which is what keeps peers at 24-32 MB/s.

Definitions (all deterministic; an empty text gives zeros, never a division error):

- ``n_chars`` code points; ``n_words`` whitespace-delimited words; ``n_tokens`` the default fast
  tokenizer's count (maximal runs of word characters ``[alnum_]`` plus every other non-space character,
  i.e. ``\\w+|[^\\w\\s]``); ``char_token_ratio`` = n_chars / n_tokens.
- ``alpha_frac``, ``alnum_frac``, ``digit_frac``, ``whitespace_frac``: fractions of code points
  (Python's ``str.isalpha`` / ``isalnum`` / ``isdigit`` / ``isspace`` per code point).
- ``mean_word_len`` (chars), ``alpha_word_frac`` (words with at least one alphabetic char),
  ``n_stop_words`` / ``stop_word_ratio`` (words whose ASCII-lowercased core, edge punctuation
  stripped, is in the stop list; Gopher's 8 English words by default), ``hash_word_ratio`` (``#``
  per word), ``ellipsis_word_ratio`` (``...`` or ``…`` per word).
- lines are the ``\\n``-separated pieces (a final newline opens no line): ``n_lines``,
  ``mean_line_len`` and ``max_line_len`` (chars, all lines). Ratios over non-blank lines:
  ``bullet_line_frac`` (first non-space char is a bullet), ``ellipsis_line_frac`` (ends with ``...``
  or ``…``), ``terminal_punct_line_frac`` (ends with ``. ! ? " '`` or their CJK/typographic forms),
  ``short_line_frac`` (<= 30 chars), ``dup_line_frac`` (lines equal to an earlier line / lines) and
  ``dup_line_char_frac`` (their chars / n_chars); ``newline_word_ratio`` = ``\\n`` count / n_words.
- paragraphs are runs of lines between empty lines (whitespace-only runs left out):
  ``dup_para_frac``, ``dup_para_char_frac``.
- n-gram repetition over words, as fractions of n_chars (n-gram chars exclude whitespace):
  ``top_{2,3,4}gram_char_frac`` = count x chars of the most frequent n-gram (ties: the longer);
  ``dup_{5..10}gram_char_frac`` = chars of the words covered by repeats of an n-gram (occurrences
  after its first; a word counts once).
- ``n_sentences`` (``. ! ?`` runs followed by whitespace or the end), ``has_curly_bracket``,
  ``has_lorem_ipsum`` (case-insensitive) for the C4 rules.
- structure (navigation/index pages), over the non-blank lines that are not code (a line of two words
  or more holding ``;``, ``{``, ``}`` or ``=``, a ``*`` after its first character, starting with ``#`` or ending with ``,``: API
  signatures and examples, whose short lines are not navigation): ``words_per_line``
  (their words / lines; over every line when all are code);
  ``short_item_line_frac`` / ``short_item_char_frac`` (lines of at most 3 words not ending in terminal
  punctuation, by count / by chars over those lines' chars); ``ident_line_frac`` (one word of
  alphanumerics and ``_.:/-()[]``); ``url_line_frac`` (one word starting ``http://``, ``https://`` or
  ``www.``, ASCII case-insensitive); ``list_line_frac`` (a bullet, or a first word like ``1.``, ``2)``,
  ``6.2.1.``); ``template_dup_line_frac`` (lines whose template, each run of word characters one
  symbol and each whitespace run one space, edges stripped, equals an earlier line's).

Code signals (``code=True``) live in :mod:`airflow_curation.core.code_signals`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_curation.core.arrays import from_numpy

log = logging.getLogger(__name__)

try:  # numba is the fast path; without it the pure-Python reference computes the same values
    from airflow_curation.core.jit import load_u64, numba, prefetch, trailing_zeros

    njit = numba.njit

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - exercised only where numba is absent
    HAVE_NUMBA = False

GOPHER_STOP_WORDS = ("the", "be", "to", "of", "and", "that", "have", "with")
BULLETS = "-*•‣◦⁃▪▫●○■□–➢➤►"
TERMINAL_PUNCT = ".!?\"'”’»…。！？"
SHORT_LINE_CHARS = 30
TOP_NGRAMS = (2, 3, 4)
DUP_NGRAMS = (5, 6, 7, 8, 9, 10)
SHORT_ITEM_WORDS = 3
IDENT_PUNCT = "_.:/-()[]"
URL_PREFIXES = ("http://", "https://", "www.")
# Line-structure signals for navigation/index pages (docs/preprocess.md, "Structure signals").
STRUCTURE_SIGNALS = (
    "words_per_line",
    "short_item_line_frac",
    "short_item_char_frac",
    "ident_line_frac",
    "url_line_frac",
    "list_line_frac",
    "template_dup_line_frac",
)

INT_SIGNALS = ("n_chars", "n_words", "n_tokens", "n_lines", "max_line_len", "n_stop_words", "n_sentences")
BOOL_SIGNALS = ("has_curly_bracket", "has_lorem_ipsum")
# Order of the kernel's output matrix.
_KERNEL_SIGNALS = (
    "n_chars",
    "n_words",
    "n_tokens",
    "char_token_ratio",
    "alpha_frac",
    "alnum_frac",
    "digit_frac",
    "whitespace_frac",
    "mean_word_len",
    "alpha_word_frac",
    "n_stop_words",
    "stop_word_ratio",
    "hash_word_ratio",
    "ellipsis_word_ratio",
    "n_lines",
    "mean_line_len",
    "max_line_len",
    "bullet_line_frac",
    "ellipsis_line_frac",
    "terminal_punct_line_frac",
    "short_line_frac",
    "dup_line_frac",
    "dup_line_char_frac",
    "newline_word_ratio",
    "dup_para_frac",
    "dup_para_char_frac",
    *(f"top_{n}gram_char_frac" for n in TOP_NGRAMS),
    *(f"dup_{n}gram_char_frac" for n in DUP_NGRAMS),
    "n_sentences",
    "has_curly_bracket",
    *STRUCTURE_SIGNALS,
    "has_lorem_ipsum",
)
SIGNALS = _KERNEL_SIGNALS


def signal_type(name: str) -> pa.DataType:
    if name in INT_SIGNALS:
        return pa.int64()
    if name in BOOL_SIGNALS:
        return pa.bool_()
    return pa.float64()


def signals_schema(names: Sequence[str] = SIGNALS) -> pa.Schema:
    return pa.schema([pa.field(n, signal_type(n)) for n in names])


# --------------------------------------------------------------------------------------------------
# Unicode classes per code point, built once per process from Python's own str predicates so that the
# kernel and the reference agree by construction.
_ALPHA, _ALNUM, _DIGIT, _SPACE, _BULLET, _TERM = 1, 2, 4, 8, 16, 32
_CLASS_TABLE: np.ndarray | None = None


def class_table() -> np.ndarray:
    global _CLASS_TABLE
    if _CLASS_TABLE is None:
        table = np.zeros(0x110000, dtype=np.uint8)
        # Python's predicates per code point, through numpy's string ufuncs (CPython's own Unicode
        # database calls, on one UTF-32 array): ~0.04 s once per process, where generators over
        # str methods cost ~0.45 CPU s of every worker's start (tests/preprocess/test_signals.py holds the two
        # equal). Only non-ASCII letters need it, but the table keeps the kernel branch-free.
        chars = np.arange(0x110000, dtype=np.uint32).view("<U1")  # every code point, one per element
        alpha = np.char.isalpha(chars)
        alnum = np.char.isalnum(chars)
        digit = np.char.isdigit(chars)
        space = np.char.isspace(chars)
        table |= alpha * np.uint8(_ALPHA)
        table |= alnum * np.uint8(_ALNUM)
        table |= digit * np.uint8(_DIGIT)
        table |= space * np.uint8(_SPACE)
        for c in BULLETS:
            table[ord(c)] |= _BULLET
        for c in TERMINAL_PUNCT:
            table[ord(c)] |= _TERM
        # the kernel counts each class in the branch that knows it: whitespace is never alnum, and
        # alpha and digit characters are alnum (Python's definitions; checked, not assumed)
        space, alnum = (table & _SPACE) != 0, (table & _ALNUM) != 0
        if (space & alnum).any() or (((table & (_ALPHA | _DIGIT)) != 0) & ~alnum).any():
            raise RuntimeError("class table: whitespace and alnum overlap, or alpha/digit outside alnum")
        _CLASS_TABLE = table
    return _CLASS_TABLE


# n-gram tables of at least this many slots (12 bytes each: ~384 KB, past a core's L2) prefetch the slots of
# the probes this many ahead; smaller ones stay in cache, where the extra pass over the hashes only costs.
PREFETCH_SLOTS = 1 << 15
PREFETCH_AHEAD = 12
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK64 = (1 << 64) - 1


_KEY_SYMBOLS = re.compile(rb"[0-9A-Za-z]+|[^0-9A-Za-z]")  # runs of ASCII letters and digits, every other byte


def stop_key_hash(key: bytes) -> int:
    """The kernel's hash of a stop-word key (:func:`stop_word_key`), never 0: FNV-1a 64 whose symbols are a run of
    ASCII letters and digits 8 bytes at a time (little-endian, lowercased; the run's last, shorter piece too, empty
    where the run's length is a multiple of 8) and every other byte alone, as the kernel's scan takes them; then the
    high half folded into the low (a table slot is the low bits)."""
    h = _FNV_OFFSET
    for symbol in _KEY_SYMBOLS.findall(key):
        if symbol.isalnum():  # bytes.isalnum: ASCII letters and digits only
            values = [int.from_bytes(symbol[k : k + 8].lower(), "little") for k in range(0, len(symbol) + 1, 8)]
        else:
            values = [symbol[0]]
        for v in values:
            h = ((h ^ v) * _FNV_PRIME) & _MASK64
    return (h ^ (h >> 32)) or 1


def stop_word_key(word: str) -> bytes:
    """The form a word is matched against the stop list in: edge ASCII punctuation stripped, ASCII lowercase."""
    raw = word.encode("utf-8")
    i, j = 0, len(raw)
    while i < j and raw[i] < 128 and not (chr(raw[i]).isalnum()):
        i += 1
    while j > i and raw[j - 1] < 128 and not (chr(raw[j - 1]).isalnum()):
        j -= 1
    return bytes(b + 32 if 65 <= b <= 90 else b for b in raw[i:j])


@dataclass(frozen=True)
class SignalConfig:
    """:param stop_words: the stop list (Gopher's 8 English words by default).
    :param tokenizer: ``"default"`` (the built-in ``\\w+|[^\\w\\s]`` count), or ``"hf:<tokenizer.json>"``
        for a Hugging Face ``tokenizers`` file, used for ``n_tokens`` and ``char_token_ratio`` only.
    """

    stop_words: tuple[str, ...] = GOPHER_STOP_WORDS
    tokenizer: str = "default"

    @classmethod
    def from_dict(cls, d: dict | None) -> SignalConfig:
        d = dict(d or {})
        unknown = set(d) - {"stop_words", "tokenizer"}
        if unknown:
            raise ValueError(f"unknown signal settings {sorted(unknown)}; known: stop_words, tokenizer")
        if "stop_words" in d:
            d["stop_words"] = tuple(d["stop_words"])
        cfg = cls(**d)
        if cfg.tokenizer != "default" and not cfg.tokenizer.startswith("hf:"):
            raise ValueError(f"tokenizer must be 'default' or 'hf:<path to tokenizer.json>', not {cfg.tokenizer!r}")
        return cfg

    def stop_hashes(self) -> np.ndarray:
        """The key hashes as an open-addressing table (a power of two >= 64x the keys, 0 = empty slot,
        slot = hash & (size - 1), linear probing), then 1 if some key sits past its home slot (else 0),
        then the longest key's length in bytes (the kernel skips longer words). The table is sparse so
        that a word's home slot is almost always empty or its key: the kernel tests that one slot without
        a branch, and probes further only where keys were displaced (a long list; the size stops growing
        at 2**16 slots).
        """
        keys = {stop_word_key(w) for w in self.stop_words}
        hashes = sorted({stop_key_hash(k) for k in keys if k})
        size = 16
        while size < 64 * len(hashes) or (size < 1 << 16 and len({h & (size - 1) for h in hashes}) < len(hashes)):
            size *= 2
        table = [0] * size
        displaced = 0
        for h in hashes:
            slot = h & (size - 1)
            while table[slot]:
                slot = (slot + 1) & (size - 1)
                displaced = 1
            table[slot] = h
        return np.array(table + [displaced, max((len(k) for k in keys), default=0)], dtype=np.uint64)


# --------------------------------------------------------------------------------------------------
# Compiled kernel

if HAVE_NUMBA:

    @njit(cache=True, inline="always")
    def _mix(h, x):
        # order-sensitive: h is scrambled before x joins, so (a, b) and (b, a) differ
        h = (h * numba.uint64(0x9E3779B97F4A7C15)) ^ x
        h *= numba.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> numba.uint64(31)
        if h == 0:
            h = numba.uint64(1)
        return h

    @njit(cache=True, inline="always")
    def _table_size(n):
        size = 16
        while size < 2 * n:
            size *= 2
        return size

    @njit(cache=True, inline="always")
    def _probe(keys, mask, h):
        # unsigned slots: indexing with them skips numba's negative-index fix-up
        umask = numba.uint64(mask)
        s = h & umask
        while keys[s] != 0 and keys[s] != h:
            s = (s + numba.uint64(1)) & umask
        return s

    @njit(cache=True)
    def _dup_counts(hashes, lens, n, keys):
        """Among ``n`` items: (items equal to an earlier one, their total length). Order-free."""
        if n < 2:
            return 0, 0
        size = _table_size(n)
        mask = size - 1
        keys[:size] = 0
        dup_items = 0
        dup_len = 0
        for i in range(n):
            h = hashes[i]
            s = _probe(keys, mask, h)
            if keys[s] == h:
                dup_items += 1
                dup_len += lens[i]
            else:
                keys[s] = h
        return dup_items, dup_len

    @njit(cache=True)
    def _longest(cum, m, n):
        best = 0
        for i in range(m):
            ln = cum[i + n] - cum[i]
            best = max(best, ln)
        return best

    @njit(cache=True)
    def _ngram_signals(whash, cum, nw, total, g, cand, keys, counts, slot, row, col):
        """top_{2,3,4}gram and dup_{5..10}gram char fractions into row[col:col+9].

        Every 2-gram is counted. For n >= 3 only candidates are: starts whose (n-1)-grams at i and i+1
        both repeat, since every repeated n-gram is one and every other n-gram occurs once. Candidates
        shrink as n grows, so n = 3..10 cost what repeats there are, not the document's length.
        ``g[i]`` is the hash of the n-gram at a candidate i, extended by one word per n. The most
        frequent n-gram is the best repeated one or, when none repeats, the longest of all.
        Candidates are in ascending order, so the words covered by repeats are a union of intervals
        [i, i + n) met left to right: each repeat adds the chars past the end of the last one (``cum``
        differences), with no per-word marks. ``slot``
        keeps each n-gram's table slot from the counting loop, so the second loop reads its count
        without probing again (on large documents each probe is a cache miss). A table of
        ``PREFETCH_SLOTS`` or more, past the cache, has its hashes computed in a pass of their own, so that
        the counting loop prefetches the slots of the probes ``PREFETCH_AHEAD`` ahead.
        """
        for k in range(9):
            row[col + k] = 0.0
        if total == 0 or nw < 2:
            return
        # n = 2: every position
        m = nw - 1
        size = _table_size(m)
        mask = size - 1
        keys[:size] = 0
        counts[:size] = 0
        # The most frequent 2-gram (ties: the longer) is tracked while counting: each n-gram's running
        # counts reach its final count at its last occurrence, so the best (count, length) seen is the
        # best over final counts, and with no repeat it is the longest 2-gram, as the definition says.
        best_c = 0
        best_l = 0
        far = size >= PREFETCH_SLOTS
        if far:  # the hashes first, so that the probe loop knows its slots PREFETCH_AHEAD probes ahead
            for i in range(m):
                g[i] = _mix(whash[i], whash[i + 1])
        for i in range(m):
            if far:
                if i + PREFETCH_AHEAD < m:
                    ahead = g[i + PREFETCH_AHEAD] & numba.uint64(mask)
                    prefetch(keys, ahead)
                    prefetch(counts, ahead)
                h = g[i]
            else:
                h = _mix(whash[i], whash[i + 1])
                g[i] = h
            s = _probe(keys, mask, h)
            keys[s] = h
            c = counts[s] + 1
            counts[s] = c
            slot[i] = s
            ln = cum[i + 2] - cum[i]
            if c > best_c or (c == best_c and ln > best_l):
                best_c = c
                best_l = ln
        row[col] = best_c * best_l / total
        # which 2-grams repeat, and the candidates for n = 3 (starts whose 2-grams at i and i + 1 repeat)
        # (branch-free: whether an n-gram repeats is a coin flip to the branch predictor)
        nc = 0
        prev = 0
        for i in range(m):
            rep = numba.int64(counts[slot[i]] > 1)
            cand[nc] = i - 1
            nc += rep & prev
            prev = rep
        for n in range(3, 11):
            m = nw - n + 1
            top = n <= 4
            if m <= 0:
                return
            if nc == 0:
                if top:
                    row[col + n - 2] = _longest(cum, m, n) / total
                    continue
                return
            size = _table_size(nc)
            mask = size - 1
            keys[:size] = 0
            counts[:size] = 0
            chars = 0
            cov_end = 0  # the words below it are covered for this n already
            far = size >= PREFETCH_SLOTS
            if far:
                for j in range(nc):
                    ui = numba.uint64(cand[j])
                    g[ui] = _mix(g[ui], whash[ui + numba.uint64(n - 1)])
            for j in range(nc):
                i = cand[j]
                ui = numba.uint64(i)
                if far:
                    if j + PREFETCH_AHEAD < nc:
                        ahead = g[numba.uint64(cand[j + PREFETCH_AHEAD])] & numba.uint64(mask)
                        prefetch(keys, ahead)
                        prefetch(counts, ahead)
                    h = g[ui]
                else:
                    h = _mix(g[ui], whash[ui + numba.uint64(n - 1)])
                    g[ui] = h
                s = _probe(keys, mask, h)
                keys[s] = h
                if not top and counts[s] > 0:
                    # a repeat (not the first occurrence): its words count as duplicated, once each
                    # (cand ascends, so cov_end <= the last i + n - 1 < i + n)
                    chars += cum[ui + numba.uint64(n)] - cum[numba.uint64(max(i, cov_end))]
                    cov_end = i + n
                counts[s] += 1
                slot[j] = s
            # The next candidates, in the same pass as the counts are read: i whose n-grams at i and i + 1
            # both repeat, where i + 1 repeats only as a candidate of this n (every repeated n-gram is one),
            # the next in ascending order. Written over the candidates already read (k2 < j), branch-free.
            best_c = 1  # only repeats compete: a count of 1 never beats it
            best_l = 1 << 62
            k2 = 0
            prev_i = -2
            prev_rep = 0
            for j in range(nc):
                i = cand[j]
                c = numba.int64(counts[slot[j]])
                rep = numba.int64(c > 1)
                if top:
                    ln = cum[numba.uint64(i + n)] - cum[numba.uint64(i)]
                    if c > best_c or (c == best_c and ln > best_l):
                        best_c = c
                        best_l = ln
                cand[k2] = prev_i
                k2 += prev_rep & rep & numba.int64(i == prev_i + 1)
                prev_i = i
                prev_rep = rep
            if top:
                row[col + n - 2] = (best_c * best_l if best_c > 1 else _longest(cum, m, n)) / total
            else:
                row[col + n - 2] = chars / total
            nc = k2

    @njit(cache=True)
    def _scratch_cap(data, offsets):
        """Scratch capacity for a batch: words, lines and paragraphs are each at most (separators + 1), and
        every separator is an ASCII control/space byte or starts a multi-byte character. Counting those is
        cheap and keeps a 50 MB document's scratch near its word count, not half its bytes. Documents
        under 64 KiB skip the count: their byte length bounds it, and the scratch stays a few MB."""
        max_sep = 0
        for d in range(offsets.shape[0] - 1):
            if offsets[d + 1] - offsets[d] <= 65536:
                max_sep = max(max_sep, numba.int64(offsets[d + 1] - offsets[d]))
                continue
            sep = 0
            for i in range(offsets[d], offsets[d + 1]):
                b = data[numba.uint64(i)]
                if b <= 32 or b >= 0xC0:
                    sep += 1
            max_sep = max(max_sep, sep)
        return max_sep + 2

    @njit(cache=True)
    def _signals_kernel(data, offsets, table, stop_hashes, short_line, short_item, out, u64, i64, keys, counts):
        """``u64``, ``i64`` (rows of at least cap + 1), ``keys`` and ``counts`` (at least ``_table_size(cap)``)
        are scratch (:meth:`SignalComputer._scratch_for`, cap from :func:`_scratch_cap`): every value is
        written before it is read, so a worker reuses them from batch to batch."""
        n_docs = offsets.shape[0] - 1
        whash = u64[0]
        lhash = u64[1]
        phash = u64[2]
        g = u64[3]
        slot = u64[4]
        thash = u64[5]
        cum = i64[0]  # cum[k]: chars of words 0..k-1, written as words end (no per-word length pass)
        llen = i64[1]
        plen = i64[2]
        cand = i64[3]
        stop_mask = numba.uint64(stop_hashes.shape[0] - 3)  # table size - 1 (the size is a power of two)
        stop_displaced = stop_hashes[stop_hashes.shape[0] - 2] != 0
        max_stop_len = numba.int64(stop_hashes[stop_hashes.shape[0] - 1])  # the longest key's byte length
        FNV0 = numba.uint64(0xCBF29CE484222325)
        FNVP = numba.uint64(0x100000001B3)
        ONE = numba.uint64(1)
        WORD_SYM = numba.uint64(0x110000)  # a template's symbol for a run of word characters
        HTTP = numba.uint64(0x2F2F3A70747468)  # "http://", little-endian
        HTTPS = numba.uint64(0x2F2F3A7370747468)  # "https://"
        WWW = numba.uint64(0x2E777777)  # "www."
        # SWAR constants, one byte each: high bits; the low 7 bits + these set a byte's high bit where it is
        # >= 0x30, >= 0x3A, >= 0x61 (after | 0x20: a letter of either case), >= 0x7B
        SW_L = numba.uint64(0x0101010101010101)
        SW_H = numba.uint64(0x8080808080808080)
        SW_20 = numba.uint64(0x2020202020202020)
        SW_30 = numba.uint64(0x5050505050505050)
        SW_3A = numba.uint64(0x4646464646464646)
        SW_61 = numba.uint64(0x1F1F1F1F1F1F1F1F)
        SW_7B = numba.uint64(0x0505050505050505)
        n_data = data.shape[0]

        for d in range(n_docs):
            s0 = offsets[d]
            s1 = offsets[d + 1]
            row = out[d]
            n_chars = 0
            n_alpha = 0
            n_alnum = 0
            n_digit = 0
            n_space = 0
            n_other = 0  # neither whitespace nor alnum
            line_start = s0  # byte offset where the current line starts
            last_ns = s0  # byte offset just after the line's last non-space character
            n_tokens = 0
            n_hash = 0
            n_ellipsis = 0
            n_sent = 0
            n_newlines = 0
            has_curly = 0
            has_lorem = 0
            nw = 0
            word_chars = 0
            cum[0] = 0
            in_word = False
            wh = FNV0
            wl = 0
            w_alpha = False
            n_alpha_words = 0
            n_stop = 0
            krun = FNV0
            kcore = FNV0
            krun_len = 0
            kcore_len = 0
            prev_wordchar = False
            nl = 0
            nl_text = 0
            line_chars = 0
            line_hash = FNV0
            line_blank = True
            line_first = 0
            line_last_cls = 0
            max_line = 0
            sum_line = 0
            n_bullet = 0
            n_ell_line = 0
            n_term_line = 0
            n_short = 0
            npara = 0
            para_hash = FNV0
            para_chars = 0
            para_lines = 0
            para_text = False
            dots = 0
            # structure: per line
            line_words = 0
            line_ident = True
            num_state = 0
            line_num = False
            fw_len = 0
            fw_pre = numba.uint64(0)
            t_hash = FNV0
            t_pend = False
            line_code = False
            # structure: per document, over the lines that are not code (_is_code_line)
            n_sl = 0
            sl_words = 0
            n_item = 0
            item_chars = 0
            text_line_chars = 0
            n_ident = 0
            n_url = 0
            n_list = 0

            i = s0
            while True:
                real = i < s1
                if real:
                    # every index here is >= 0: as uint64 it skips numba's negative-index fix-up
                    # (three instructions an access, and a register, in a loop short of registers)
                    b0 = data[numba.uint64(i)]
                    if b0 < 0x80:
                        cls = numba.int64(table[b0])
                        if cls & 2:
                            # Fast path: a run of ASCII letters and digits (most of any text), its first
                            # byte included. Per byte only the word hash and one count move: an ASCII
                            # letter or digit is alnum and exactly one of alpha/digit, so the rest is the
                            # run's length; the state a first character sets is set once here.
                            in_word = True
                            if t_pend:
                                t_hash = (t_hash ^ numba.uint64(32)) * FNVP
                                t_pend = False
                            if line_blank:
                                line_first = cls
                                line_blank = False
                            if not prev_wordchar:  # a token starts where a run of word characters starts
                                n_tokens += 1
                                t_hash = (t_hash ^ WORD_SYM) * FNVP
                            prev_wordchar = True
                            dots = 0
                            # The run 8 bytes at a time (SWAR): which bytes are ASCII letters or digits, from a
                            # few adds and masks on the 8-byte word; the run's bytes join the word hash and the
                            # stop-word key (ASCII-lowercased: | 0x20) as one value per 8 bytes, so a word costs
                            # no per-byte loop and no mispredicted loop exit (stop_key_hash: the same in Python)
                            ra = 0
                            j = i
                            while True:
                                if j + 8 <= n_data:
                                    x = load_u64(data, numba.uint64(j))
                                else:
                                    x = numba.uint64(0)
                                    for q in range(min(8, s1 - j)):
                                        x |= numba.uint64(data[numba.uint64(j + q)]) << numba.uint64(8 * q)
                                if s1 - j < 8:  # bytes past the document are not the run's
                                    x &= (ONE << numba.uint64(8 * (s1 - j))) - ONE
                                hi = x & SW_H
                                x7 = x ^ hi
                                digit = (x7 + SW_30) & ~(x7 + SW_3A)
                                y = x7 | SW_20
                                alpha = ((y + SW_61) & ~(y + SW_7B)) & ~hi & SW_H
                                alnum = (alpha | digit) & ~hi & SW_H
                                if alnum == SW_H:
                                    wh = (wh ^ x) * FNVP
                                    krun = (krun ^ (x | SW_20)) * FNVP
                                    ra += numba.int64(((alpha >> numba.uint64(7)) * SW_L) >> numba.uint64(56))
                                    j += 8
                                    continue
                                nb = numba.uint64(trailing_zeros(~alnum & SW_H)) >> numba.uint64(3)
                                keep = (ONE << (nb << numba.uint64(3))) - ONE
                                c = x & keep
                                wh = (wh ^ c) * FNVP
                                krun = (krun ^ (c | (SW_20 & keep))) * FNVP
                                ra += numba.int64((((alpha & keep) >> numba.uint64(7)) * SW_L) >> numba.uint64(56))
                                j += numba.int64(nb)
                                break
                            run = j - i
                            krun_len += run
                            kcore = krun
                            kcore_len = krun_len
                            n_alpha += ra
                            n_alnum += run
                            n_digit += run - ra
                            w_alpha = w_alpha or ra != 0
                            wl += run
                            line_chars += run
                            last_ns = j
                            line_last_cls = numba.int64(table[data[numba.uint64(j - 1)]])
                            if line_words == 0:  # the line's first word: URL prefix and list number
                                for q in range(i, j):
                                    bq = data[numba.uint64(q)]
                                    if fw_len < 8:
                                        pb = numba.uint64(bq + 32 if 65 <= bq <= 90 else bq)
                                        fw_pre |= pb << numba.uint64(8 * fw_len)
                                    fw_len += 1
                                    if 48 <= bq <= 57:
                                        num_state = 1 if 0 <= num_state <= 2 else -1
                                    else:
                                        num_state = -1
                            i = j
                            continue
                        cp = numba.int64(b0)
                        nbytes = 1
                    else:
                        if b0 < 0xE0:
                            cp = ((b0 & 0x1F) << 6) | (data[numba.uint64(i + 1)] & 0x3F) if i + 1 < s1 else 0xFFFD
                            nbytes = 2
                        elif b0 < 0xF0:
                            cp = (
                                ((b0 & 0x0F) << 12)
                                | ((data[numba.uint64(i + 1)] & 0x3F) << 6)
                                | (data[numba.uint64(i + 2)] & 0x3F)
                                if i + 2 < s1
                                else 0xFFFD
                            )
                            nbytes = 3
                        else:
                            cp = (
                                (
                                    ((b0 & 0x07) << 18)
                                    | ((data[numba.uint64(i + 1)] & 0x3F) << 12)
                                    | ((data[numba.uint64(i + 2)] & 0x3F) << 6)
                                    | (data[numba.uint64(i + 3)] & 0x3F)
                                )
                                if i + 3 < s1
                                else 0xFFFD
                            )
                            nbytes = 4
                        if cp >= 0x110000:
                            cp = 0xFFFD
                        cls = numba.int64(table[numba.uint64(cp)])
                else:
                    b0 = numba.uint8(10)
                    cp = 10  # a virtual newline closes the last word, line and paragraph
                    cls = 8
                    nbytes = 0

                # Class counts in registers (a memory histogram would chain every character on the last),
                # each in the branch that knows its class: whitespace is never alnum, and every alpha or
                # digit character is alnum. n_chars is their sum, after the loop.
                if cls & 8:  # whitespace
                    n_space += 1  # the virtual newline's is taken back after the loop
                    if in_word:
                        wh ^= wh >> numba.uint64(32)  # a run's upper bytes joined the hash's upper bits only
                        whash[numba.uint64(nw)] = wh if wh != 0 else ONE
                        word_chars += wl
                        cum[numba.uint64(nw + 1)] = word_chars
                        # a word joins the line hash as one value: the line is its whitespace bytes and
                        # words in order, so equal lines hash equal and no per-byte line chain runs
                        line_hash = _mix(line_hash, wh)
                        if w_alpha:
                            n_alpha_words += 1
                        # the stop-word test, branch-free: the key's home slot (no stop words: max_stop_len is 0)
                        k_ok = (wl <= 32) & (kcore_len > 0) & (kcore_len <= max_stop_len)
                        # folded as stop_key_hash folds it: a run's upper bytes reach the slot's bits
                        kh = kcore ^ (kcore >> numba.uint64(32))
                        kh = kh if kh != 0 else ONE
                        ks = kh & stop_mask
                        kv = stop_hashes[ks]
                        n_stop += numba.int64(k_ok & (kv == kh))
                        if stop_displaced and k_ok and kv != 0 and kv != kh:  # a long list: probe on
                            ks = (ks + numba.uint64(1)) & stop_mask
                            while stop_hashes[ks] != 0:
                                if stop_hashes[ks] == kh:
                                    n_stop += 1
                                    break
                                ks = (ks + numba.uint64(1)) & stop_mask
                        nw += 1
                        # the next word starts from these (so a word's first character sets nothing)
                        in_word = False
                        wh = FNV0
                        wl = 0
                        w_alpha = False
                        krun = FNV0
                        kcore = FNV0
                        krun_len = 0
                        kcore_len = 0
                        # "lorem ipsum", ASCII case-insensitive (what lower() gives these letters): the
                        # word ends in "lorem" and the one space is followed by "ipsum". Tested only
                        # where a word ending in m/M meets a space.
                        if cp == 32 and (data[numba.uint64(i - 1)] | 32) == 109 and i - 5 >= s0 and i + 5 < s1:
                            if (
                                (data[numba.uint64(i - 5)] | 32) == 108
                                and (data[numba.uint64(i - 4)] | 32) == 111
                                and (data[numba.uint64(i - 3)] | 32) == 114
                                and (data[numba.uint64(i - 2)] | 32) == 101
                                and (data[numba.uint64(i + 1)] | 32) == 105
                                and (data[numba.uint64(i + 2)] | 32) == 112
                                and (data[numba.uint64(i + 3)] | 32) == 115
                                and (data[numba.uint64(i + 4)] | 32) == 117
                                and (data[numba.uint64(i + 5)] | 32) == 109
                            ):
                                has_lorem = 1
                        if line_words == 0:
                            line_num = num_state == 2 or num_state == 3
                        line_words += 1
                    # ". ! ?" just before (an ASCII byte is a whole character; a continuation byte matches none)
                    if i > s0:
                        bp = data[numba.uint64(i - 1)]
                        if bp == 46 or bp == 33 or bp == 63:
                            n_sent += 1
                    prev_wordchar = False
                    dots = 0
                    if cp == 10:
                        if real:
                            n_newlines += 1
                        if real or line_chars > 0:  # a final newline opens no line
                            nl += 1
                            sum_line += line_chars
                            max_line = max(max_line, line_chars)
                            if not line_blank:
                                lh = line_hash if line_hash != 0 else ONE
                                lhash[numba.uint64(nl_text)] = lh
                                llen[numba.uint64(nl_text)] = line_chars
                                nl_text += 1
                                if line_first & 16:
                                    n_bullet += 1
                                # the line's last non-space characters are "..." or "…" (valid UTF-8: bytes suffice)
                                e = last_ns
                                if e - 3 >= line_start and (
                                    (
                                        data[numba.uint64(e - 1)] == 46
                                        and data[numba.uint64(e - 2)] == 46
                                        and data[numba.uint64(e - 3)] == 46
                                    )
                                    or (
                                        data[numba.uint64(e - 3)] == 0xE2
                                        and data[numba.uint64(e - 2)] == 0x80
                                        and data[numba.uint64(e - 1)] == 0xA6
                                    )
                                ):
                                    n_ell_line += 1
                                if line_last_cls & 32:
                                    n_term_line += 1
                                if line_chars <= short_line:
                                    n_short += 1
                                # a line of code (signatures, examples) is not navigation: the structure counts
                                # leave it out (_is_code_line); here the last test, a line ending with ','
                                if last_ns - 1 >= line_start and data[numba.uint64(last_ns - 1)] == 44:
                                    line_code = True
                                if line_words < 2 or not line_code:
                                    n_sl += 1
                                    sl_words += line_words
                                    text_line_chars += line_chars
                                    if line_words <= short_item and not (line_last_cls & 32):
                                        n_item += 1
                                        item_chars += line_chars
                                    if line_words == 1:
                                        if line_ident:
                                            n_ident += 1
                                        if (
                                            (fw_pre & numba.uint64(0xFFFFFFFFFFFFFF)) == HTTP
                                            or (fw_len >= 8 and fw_pre == HTTPS)
                                            or (fw_pre & numba.uint64(0xFFFFFFFF)) == WWW
                                        ):
                                            n_url += 1
                                    if (line_first & 16) or line_num:
                                        n_list += 1
                                    thash[numba.uint64(n_sl - 1)] = t_hash if t_hash != 0 else ONE
                            if line_chars == 0:
                                # an empty line ends the paragraph
                                if para_text:
                                    phash[numba.uint64(npara)] = para_hash
                                    plen[numba.uint64(npara)] = para_chars
                                    npara += 1
                                para_hash = FNV0
                                para_chars = 0
                                para_lines = 0
                                para_text = False
                            else:
                                para_hash = _mix(para_hash, line_hash)
                                para_chars += line_chars + (1 if para_lines > 0 else 0)
                                para_lines += 1
                                if not line_blank:
                                    para_text = True
                        line_chars = 0
                        line_hash = FNV0
                        line_blank = True
                        line_start = i + 1
                        line_words = 0
                        line_ident = True
                        num_state = 0
                        line_num = False
                        fw_len = 0
                        fw_pre = numba.uint64(0)
                        t_hash = FNV0
                        t_pend = False
                        line_first = 0
                        line_last_cls = 0
                        line_code = False
                        if not real:
                            if para_text:
                                phash[numba.uint64(npara)] = para_hash
                                plen[numba.uint64(npara)] = para_chars
                                npara += 1
                            break
                    else:
                        line_chars += 1
                        line_hash = (line_hash ^ numba.uint64(b0)) * FNVP
                        for q in range(i + 1, i + nbytes):
                            line_hash = (line_hash ^ numba.uint64(data[numba.uint64(q)])) * FNVP
                        if not line_blank:
                            t_pend = True  # one space in the template, written only if more follows on the line
                else:
                    # word
                    in_word = True
                    wh = (wh ^ numba.uint64(b0)) * FNVP
                    # stop-word key: edge ASCII punctuation stripped, ASCII lowercased. krun runs from the
                    # first kept byte; kcore is its value at the last byte that may end the key.
                    if nbytes == 1:  # ASCII punctuation (letters and digits take the fast path)
                        if krun_len > 0:  # inside the key, not edge punctuation
                            krun = (krun ^ numba.uint64(b0)) * FNVP
                            krun_len += 1
                    else:  # a multi-byte character is never edge punctuation
                        krun = (krun ^ numba.uint64(b0)) * FNVP
                        for q in range(i + 1, i + nbytes):
                            bq = numba.uint64(data[numba.uint64(q)])
                            krun = (krun ^ bq) * FNVP
                            wh = (wh ^ bq) * FNVP
                        krun_len += nbytes
                        kcore = krun
                        kcore_len = krun_len
                    wl += 1
                    line_chars += 1
                    if t_pend:
                        t_hash = (t_hash ^ numba.uint64(32)) * FNVP
                        t_pend = False
                    if line_words == 0:  # the line's first word: URL prefix and list number
                        if fw_len < 8:
                            pb = numba.uint64(b0 if nbytes == 1 else 0xFF)  # ASCII here is never a letter
                            fw_pre |= pb << numba.uint64(8 * fw_len)
                        fw_len += 1
                        if 48 <= cp <= 57:  # (a malformed multi-byte sequence can decode to an ASCII digit)
                            num_state = 1 if 0 <= num_state <= 2 else -1
                        elif num_state == 1 and (cp == 46 or cp == 41):
                            num_state = 2 if cp == 46 else 3
                        else:
                            num_state = -1
                    first_ns = line_blank
                    if line_blank:
                        line_first = cls
                        line_blank = False
                    last_ns = i + nbytes
                    line_last_cls = cls
                    if cls & 2:  # alnum (non-ASCII: ASCII takes the fast path above)
                        n_alnum += 1
                        n_alpha += cls & 1
                        n_digit += (cls >> 2) & 1
                        w_alpha = w_alpha or (cls & 1) != 0
                        if not prev_wordchar:
                            n_tokens += 1
                            t_hash = (t_hash ^ WORD_SYM) * FNVP
                        prev_wordchar = True
                        dots = 0
                    elif cp == 95:
                        n_other += 1
                        if not prev_wordchar:
                            n_tokens += 1
                            t_hash = (t_hash ^ WORD_SYM) * FNVP
                        prev_wordchar = True
                        dots = 0
                    else:
                        n_other += 1
                        n_tokens += 1
                        t_hash = (t_hash ^ numba.uint64(cp)) * FNVP
                        # code syntax (_is_code_line): ; { } =, a * after the line's first character, a leading #
                        if cp == 59 or cp == 123 or cp == 125 or cp == 61:
                            line_code = True
                        elif (cp == 42 and not first_ns) or (cp == 35 and first_ns):
                            line_code = True
                        if not (
                            cp == 46 or cp == 58 or cp == 47 or cp == 45 or cp == 40 or cp == 41 or cp == 91 or cp == 93
                        ):
                            line_ident = False
                        prev_wordchar = False
                        if cp == 46:
                            dots += 1
                            if dots == 3:
                                n_ellipsis += 1
                                dots = 0
                        else:
                            dots = 0
                            if cp == 35:
                                n_hash += 1
                            elif cp == 123:
                                has_curly = 1
                            elif cp == 0x2026:
                                n_ellipsis += 1
                i += nbytes

            # ---- per-document values
            n_space -= 1  # the virtual newline
            n_chars = n_space + n_alnum + n_other
            row[0] = n_chars
            row[1] = nw
            row[2] = n_tokens
            row[3] = n_chars / n_tokens if n_tokens else 0.0
            row[4] = n_alpha / n_chars if n_chars else 0.0
            row[5] = n_alnum / n_chars if n_chars else 0.0
            row[6] = n_digit / n_chars if n_chars else 0.0
            row[7] = n_space / n_chars if n_chars else 0.0
            row[8] = word_chars / nw if nw else 0.0
            row[9] = n_alpha_words / nw if nw else 0.0
            row[10] = n_stop
            row[11] = n_stop / nw if nw else 0.0
            row[12] = n_hash / nw if nw else 0.0
            row[13] = n_ellipsis / nw if nw else 0.0
            row[14] = nl
            row[15] = sum_line / nl if nl else 0.0
            row[16] = max_line
            row[17] = n_bullet / nl_text if nl_text else 0.0
            row[18] = n_ell_line / nl_text if nl_text else 0.0
            row[19] = n_term_line / nl_text if nl_text else 0.0
            row[20] = n_short / nl_text if nl_text else 0.0
            dl, dlc = _dup_counts(lhash, llen, nl_text, keys)
            row[21] = dl / nl_text if nl_text else 0.0
            row[22] = dlc / n_chars if n_chars else 0.0
            row[23] = n_newlines / nw if nw else 0.0
            dp, dpc = _dup_counts(phash, plen, npara, keys)
            row[24] = dp / npara if npara else 0.0
            row[25] = dpc / n_chars if n_chars else 0.0
            _ngram_signals(whash, cum, nw, n_chars, g, cand, keys, counts, slot, row, 26)
            row[35] = n_sent
            row[36] = has_curly
            # structure
            # over the lines that are not code; a text of code only: words_per_line over all its lines
            row[37] = sl_words / n_sl if n_sl else (nw / nl_text if nl_text else 0.0)
            row[38] = n_item / n_sl if n_sl else 0.0
            row[39] = item_chars / text_line_chars if text_line_chars else 0.0
            row[40] = n_ident / n_sl if n_sl else 0.0
            row[41] = n_url / n_sl if n_sl else 0.0
            row[42] = n_list / n_sl if n_sl else 0.0
            dt, _ = _dup_counts(thash, llen, n_sl, keys)
            row[43] = dt / n_sl if n_sl else 0.0
            row[44] = has_lorem


def _as_string_array(texts) -> pa.Array:
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks() if texts.num_chunks != 1 else texts.chunk(0)
    if not isinstance(texts, pa.Array):
        texts = pa.array(list(texts), type=pa.large_string())
    if not (pa.types.is_string(texts.type) or pa.types.is_large_string(texts.type)):
        raise TypeError(f"signals need a string array, got {texts.type}")
    if texts.null_count:
        texts = pc.fill_null(texts, "")
    return texts


def _buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A string or large_string array's UTF-8 data (a zero-copy view: what Parquet gives, ``string``, needs
    no cast, which would copy every byte) and its offsets (sliced) as int64. Only the offsets of a
    ``string`` array are widened (8 bytes a row): the kernel built for 32-bit offsets ran ~3% slower, and
    one build serves both types."""
    bufs = arr.buffers()
    width = np.int64 if pa.types.is_large_string(arr.type) else np.int32
    offsets = np.frombuffer(bufs[1], dtype=width)[arr.offset : arr.offset + len(arr) + 1].astype(np.int64, copy=False)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(1, np.uint8)
    if data.size == 0:
        data = np.zeros(1, np.uint8)
    return data, offsets


MIN_SCRATCH_ROWS = 65536 + 3  # what any batch of documents under 64 KiB needs (~8 MB): one allocation


def _table_size_py(n: int) -> int:
    """``_table_size``: the smallest power of two >= max(16, 2 n)."""
    return max(16, 1 << (2 * n - 1).bit_length())


class SignalComputer:
    """Computes :data:`SIGNALS` for batches of documents.

    :param config: a :class:`SignalConfig` or its dict form.
    """

    def __init__(self, config: SignalConfig | dict | None = None) -> None:
        self.config = config if isinstance(config, SignalConfig) else SignalConfig.from_dict(config)
        self._stop_hashes = self.config.stop_hashes()
        self._hf = None
        if self.config.tokenizer.startswith("hf:"):
            # an optional dependency, needed only for this setting
            from tokenizers import Tokenizer

            self._hf = Tokenizer.from_file(self.config.tokenizer[3:])
        self._scratch: tuple[np.ndarray, ...] = ()
        self._scratch_rows = 0

    def _scratch_for(self, cap: int) -> tuple[np.ndarray, ...]:
        """The kernel's scratch for ``cap``, kept from batch to batch, whatever its size: allocated afresh per
        batch, its pages were faulted in and zeroed by the OS every time. A batch with a multi-MB document
        needs hundreds of MB (~30 bytes per text byte), and zeroing fresh pages costs 1-3 ms of system time
        per MB here: on the scale corpus, whose multi-MB documents sit in 5 of 12 shards, ~1 CPU s per
        process went to re-faulting it. Kept, the process's peak RSS is what its largest batch needed anyway
        (it was allocated then too). It grows by at least 2x, so a run of ever larger documents faults in
        each page once; pages a batch does not touch are never faulted in."""
        if cap + 1 <= self._scratch_rows:
            return self._scratch
        rows = max(cap + 1, MIN_SCRATCH_ROWS, 2 * self._scratch_rows)
        size = _table_size_py(rows)
        self._scratch = ()  # the old scratch goes before the new one is touched
        self._scratch = (
            np.empty((6, rows), np.uint64),
            np.empty((4, rows), np.int64),
            np.empty(size, np.uint64),
            np.empty(size, np.int32),
        )
        self._scratch_rows = rows
        return self._scratch

    def compute(self, texts: pa.Array | pa.ChunkedArray | Iterable[str]) -> pa.Table:
        arr = _as_string_array(texts)
        if HAVE_NUMBA:
            data, offsets = _buffers(arr)
            out = np.zeros((len(arr), len(_KERNEL_SIGNALS)), dtype=np.float64)
            scratch = self._scratch_for(_scratch_cap(data, offsets))
            _signals_kernel(
                data, offsets, class_table(), self._stop_hashes, SHORT_LINE_CHARS, SHORT_ITEM_WORDS, out, *scratch
            )
            cols = {}
            for j, name in enumerate(_KERNEL_SIGNALS):
                v = out[:, j]
                if name in INT_SIGNALS:
                    cols[name] = from_numpy(v.astype(np.int64))
                elif name in BOOL_SIGNALS:
                    cols[name] = from_numpy(v != 0)
                else:
                    cols[name] = from_numpy(v)
            table = pa.table(cols, schema=signals_schema())
        else:  # pragma: no cover
            table = reference_signals(arr.to_pylist(), self.config)
        if self._hf is not None:
            table = self._with_hf_tokens(arr, table)
        return table

    def _with_hf_tokens(self, arr: pa.Array, table: pa.Table) -> pa.Table:
        texts = arr.to_pylist()
        n_tokens = np.array(
            [len(e.ids) for e in self._hf.encode_batch(texts, add_special_tokens=False)], dtype=np.int64
        )
        n_chars = table.column("n_chars").to_numpy()
        ratio = np.divide(n_chars, n_tokens, out=np.zeros(len(texts)), where=n_tokens > 0)
        table = table.set_column(table.schema.get_field_index("n_tokens"), "n_tokens", pa.array(n_tokens))
        return table.set_column(table.schema.get_field_index("char_token_ratio"), "char_token_ratio", pa.array(ratio))


def compute_signals(texts, config: SignalConfig | dict | None = None) -> pa.Table:
    """Signals of a batch (list of str or Arrow string array) as an Arrow table, one row per text."""
    return SignalComputer(config).compute(texts)


def warm_up() -> None:
    """Compile (or load from numba's cache) the kernel and build the class table: ~1 s once per process."""
    compute_signals(["warm up.\n\nwarm up"])  # one build: both string types reach the kernel as int64 offsets


# --------------------------------------------------------------------------------------------------
# Pure-Python reference: the same definitions written plainly, per document. The tests hold the kernel
# to it, and the benchmark reports it as the "pure Python" peer.


def _ref_doc(text: str, stop_keys: set[bytes], word_tokenize: Callable[[str], list[str]] | None) -> dict:
    n = len(text)
    words = word_tokenize(text) if word_tokenize else text.split()
    nw = len(words)
    tokens = 0
    prev_word = False
    for c in text:
        wc = c.isalnum() or c == "_"
        if wc:
            if not prev_word:
                tokens += 1
        elif not c.isspace():
            tokens += 1
        prev_word = wc
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    text_lines = [ln for ln in lines if ln.strip()]
    ntl = len(text_lines)
    word_chars = sum(len(w) for w in words)

    def frac(a, b):
        return a / b if b else 0.0

    def dups(items):
        seen, k, chars = set(), 0, 0
        for it in items:
            if it in seen:
                k += 1
                chars += len(it)
            else:
                seen.add(it)
        return k, chars

    dl, dlc = dups(text_lines)
    # paragraphs: runs of lines between empty lines, whitespace-only runs left out
    paras, cur = [], []
    for ln in lines + [""]:
        if ln == "":
            if any(x.strip() for x in cur):
                paras.append("\n".join(cur))
            cur = []
        else:
            cur.append(ln)
    dp, dpc = dups(paras)
    ellipsis = text.count("…") + sum(len(run) // 3 for run in _dot_runs(text))
    sentences = 0
    for k, c in enumerate(text):
        if c in ".!?" and (k + 1 == n or text[k + 1].isspace()):
            sentences += 1
    r = {
        "n_chars": n,
        "n_words": nw,
        "n_tokens": tokens,
        "char_token_ratio": frac(n, tokens),
        "alpha_frac": frac(sum(c.isalpha() for c in text), n),
        "alnum_frac": frac(sum(c.isalnum() for c in text), n),
        "digit_frac": frac(sum(c.isdigit() for c in text), n),
        "whitespace_frac": frac(sum(c.isspace() for c in text), n),
        "mean_word_len": frac(word_chars, nw),
        "alpha_word_frac": frac(sum(any(c.isalpha() for c in w) for w in words), nw),
    }
    n_stop = sum(1 for w in words if len(w) <= 32 and stop_word_key(w) in stop_keys)
    r.update(
        {
            "n_stop_words": n_stop,
            "stop_word_ratio": frac(n_stop, nw),
            "hash_word_ratio": frac(text.count("#"), nw),
            "ellipsis_word_ratio": frac(ellipsis, nw),
            "n_lines": len(lines),
            "mean_line_len": frac(sum(map(len, lines)), len(lines)),
            "max_line_len": max(map(len, lines), default=0),
            "bullet_line_frac": frac(sum(ln.lstrip()[0] in BULLETS for ln in text_lines), ntl),
            "ellipsis_line_frac": frac(sum(ln.rstrip().endswith(("...", "…")) for ln in text_lines), ntl),
            "terminal_punct_line_frac": frac(sum(ln.rstrip()[-1] in TERMINAL_PUNCT for ln in text_lines), ntl),
            "short_line_frac": frac(sum(len(ln) <= SHORT_LINE_CHARS for ln in text_lines), ntl),
            "dup_line_frac": frac(dl, ntl),
            "dup_line_char_frac": frac(dlc, n),
            "newline_word_ratio": frac(text.count("\n"), nw),
            "dup_para_frac": frac(dp, len(paras)),
            "dup_para_char_frac": frac(dpc, n),
        }
    )
    for k in TOP_NGRAMS:
        grams: dict[tuple, int] = {}
        for i in range(nw - k + 1):
            g = tuple(words[i : i + k])
            grams[g] = grams.get(g, 0) + 1
        best = max(((c, sum(map(len, g))) for g, c in grams.items()), default=(0, 0))
        r[f"top_{k}gram_char_frac"] = frac(best[0] * best[1], n)
    for k in DUP_NGRAMS:
        grams = {}
        for i in range(nw - k + 1):
            g = tuple(words[i : i + k])
            grams[g] = grams.get(g, 0) + 1
        covered = [False] * nw
        seen = set()
        for i in range(nw - k + 1):
            g = tuple(words[i : i + k])
            if g in seen:
                covered[i : i + k] = [True] * k
            seen.add(g)
        r[f"dup_{k}gram_char_frac"] = frac(sum(len(w) for w, c in zip(words, covered) if c), n)
    r.update(
        {"n_sentences": sentences, "has_curly_bracket": "{" in text, "has_lorem_ipsum": "lorem ipsum" in text.lower()}
    )
    r.update(_ref_structure(text_lines, nw))
    return r


_ASCII_LOWER = {c: c + 32 for c in range(65, 91)}
_LIST_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)*[.)]")


def _template(line: str) -> str:
    """A line's shape: each run of word characters one symbol, each whitespace run one space, edges stripped."""
    out, prev_word = [], False
    for c in line.strip():
        if c.isalnum() or c == "_":
            if not prev_word:
                out.append("\x00")
            prev_word = True
        else:
            out.append(" " if c.isspace() else c)
            prev_word = False
    return re.sub(r" +", " ", "".join(out))


def _is_code_line(line: str) -> bool:
    """A line of code (a signature, an example) rather than of words: of two words or more, it holds ``;``,
    ``{``, ``}`` or ``=``, a ``*`` after its first character, starts with ``#`` or ends with ``,`` (a wrapped
    argument list)."""
    s = line.strip()
    if len(s.split()) < 2:  # one word (an identifier, a URL with a query) is an item, not code
        return False
    return any(c in s for c in ";{}=") or "*" in s[1:] or s.startswith("#") or s.endswith(",")


def _ref_structure(all_lines: list[str], nw_all: int) -> dict:
    text_lines = [ln for ln in all_lines if not _is_code_line(ln)]
    ntl = len(text_lines)
    nw = sum(len(ln.split()) for ln in text_lines) if ntl else nw_all
    wpl_lines = ntl if ntl else len(all_lines)
    n_item = item_chars = n_ident = n_url = n_list = 0
    for ln in text_lines:
        words = ln.split()
        if len(words) <= SHORT_ITEM_WORDS and ln.rstrip()[-1] not in TERMINAL_PUNCT:
            n_item += 1
            item_chars += len(ln)
        if len(words) == 1:
            w = words[0]
            n_ident += all(c.isalnum() or c in IDENT_PUNCT for c in w)
            n_url += w[:8].translate(_ASCII_LOWER).startswith(URL_PREFIXES)
        n_list += ln.lstrip()[0] in BULLETS or bool(_LIST_NUMBER.fullmatch(words[0]))
    seen: set[str] = set()
    dup_templates = 0
    for ln in text_lines:
        t = _template(ln)
        dup_templates += t in seen
        seen.add(t)
    text_chars = sum(map(len, text_lines))
    return {
        "words_per_line": nw / wpl_lines if wpl_lines else 0.0,
        "short_item_line_frac": n_item / ntl if ntl else 0.0,
        "short_item_char_frac": item_chars / text_chars if text_chars else 0.0,
        "ident_line_frac": n_ident / ntl if ntl else 0.0,
        "url_line_frac": n_url / ntl if ntl else 0.0,
        "list_line_frac": n_list / ntl if ntl else 0.0,
        "template_dup_line_frac": dup_templates / ntl if ntl else 0.0,
    }


def _dot_runs(text: str) -> list[str]:
    return re.findall(r"\.{3,}", text)


def reference_signals(
    texts: Iterable[str],
    config: SignalConfig | dict | None = None,
    word_tokenize: Callable[[str], list[str]] | None = None,
) -> pa.Table:
    """Pure-Python signals with the same definitions (slow; for tests, benchmarks and other tokenizers).

    :param word_tokenize: words for the word-level signals; default ``str.split`` (what the kernel does).
    """
    cfg = config if isinstance(config, SignalConfig) else SignalConfig.from_dict(config)
    # a word that strips to nothing (all punctuation) matches no word, as in the kernel's table
    stop_keys = {stop_word_key(w) for w in cfg.stop_words} - {b""}
    rows = [_ref_doc(t or "", stop_keys, word_tokenize) for t in texts]
    return pa.table(
        {name: pa.array([r[name] for r in rows], type=signal_type(name)) for name in SIGNALS}, schema=signals_schema()
    )
