"""Exact-content keys and MinHash signatures, computed over a whole batch of documents at once.

Why it is fast: ASCII documents (their own NFKC form) skip Unicode normalisation; tokenising, shingle
hashing and the permutations run in one compiled (numba) pass over the batch's UTF-8 buffer, with no
Python object per token or shingle. The permutations are the multiply-add-shift family
``h_k(x) = (a_k * x + b_k) >> 32`` over 64-bit shingle hashes (2-universal, like datasketch's
``(a x + b) mod p``), which vectorises to a few SIMD instructions per 8 or 16 permutations.

Definitions (all configurable through :class:`MinHashParams`):
- normalisation: Unicode NFKC then lowercase, as Python's ``unicodedata`` and ``str.lower`` do them
  (ASCII documents, already NFKC, are lowercased by Arrow or inside the kernel);
- tokens: ``word`` = runs of ``\\w`` characters exactly as Python's ``re`` defines ``\\w``;
  ``space`` = runs of non-whitespace; ``char`` = every non-whitespace character;
- shingles: ``ngram`` consecutive tokens; a document with fewer tokens than ``ngram`` (but at least one)
  has one shingle made of all its tokens; a document without tokens has none and an empty signature;
- exact key: 128-bit xxh3 of the NFKC + lowercase text with whitespace runs folded to one space and
  stripped at both ends.
"""

from __future__ import annotations

import functools
import math
import os
import re
import unicodedata
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from airflow_curation.core.jit import numba

_WORD, _SPACE = np.uint8(1), np.uint8(2)
TOKENIZERS = {"word": 0, "space": 1, "char": 2}
EMPTY = np.uint32(0xFFFFFFFF)  # signature value of a document without shingles

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_GOLD = np.uint64(0x9E3779B97F4A7C15)
_S33 = np.uint64(33)
_S32 = np.uint64(32)


_UNSAFE_NFKC, _UNSAFE_LOWER, _UNSAFE_WORD = np.uint8(4), np.uint8(8), np.uint8(16)


def _build_tables() -> tuple[np.ndarray, np.ndarray]:
    classes = np.zeros(0x110000, np.uint8)
    everything = "".join(map(chr, range(0x110000)))
    for m in re.finditer(r"\w+", everything):
        classes[m.start() : m.end()] |= _WORD
    for m in re.finditer(r"\s+", everything):
        classes[m.start() : m.end()] |= _SPACE
    lower = np.arange(0x110000, dtype=np.int32)
    nfkc, combining, decomposition = unicodedata.normalize, unicodedata.combining, unicodedata.decomposition
    composes = np.zeros(0x110000, bool)  # may merge with the character before it
    changed: dict[int, str] = {}
    for cp in range(0x80, 0x110000):
        c = everything[cp]
        n = nfkc("NFKC", c)
        if (n != c and not (c.isspace() and n.isspace())) or combining(c):
            classes[cp] |= _UNSAFE_NFKC
            changed[cp] = n
        low = c.lower()
        if len(low) != 1:
            classes[cp] |= _UNSAFE_LOWER | _UNSAFE_NFKC | _UNSAFE_WORD
        else:
            lower[cp] = ord(low)
        d = decomposition(c)
        if d and not d.startswith("<"):
            parts = d.split()
            if len(parts) == 2:
                composes[int(parts[1], 16)] = True
    composes[0x1161:0x1176] = composes[0x11A8:0x11C3] = True  # Hangul vowel/final jamo compose algorithmically
    classes[composes] |= _UNSAFE_NFKC | _UNSAFE_WORD
    # For \w+ tokens, a separator that NFKC turns into other separators (an ellipsis, an Arabic
    # vowel mark, a trademark sign's spacing...) changes nothing; anything else may.
    for cp, n in changed.items():
        if classes[cp] & _WORD or composes[cp] or any(classes[ord(x)] & _WORD or composes[ord(x)] for x in n):
            classes[cp] |= _UNSAFE_WORD
    classes[0xD800:0xE000] |= _UNSAFE_NFKC | _UNSAFE_LOWER | _UNSAFE_WORD
    classes[0x03A3] |= _UNSAFE_NFKC | _UNSAFE_LOWER | _UNSAFE_WORD  # str.lower's final-sigma rule needs context
    for ch in "ABCDEFGHIJKLMNOPQRSTUVWXYZ":
        lower[ord(ch)] = ord(ch.lower())
    return classes, lower


@functools.lru_cache(maxsize=1)
def unicode_tables() -> tuple[np.ndarray, np.ndarray]:
    """Per code point: class bits (``\\w`` and ``\\s`` exactly as Python's ``re``; whether NFKC or
    ``str.lower`` may change it in context) and its lowercase code point. Built from Python's
    ``unicodedata`` (about a second) and cached on disk per Unicode version."""
    cache_dir = os.environ.get("CURATION_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "airflow-curation"
    )
    path = os.path.join(cache_dir, f"unicode-tables-v4-{unicodedata.unidata_version}.npz")
    try:
        with np.load(path) as z:
            return z["classes"], z["lower"]
    except (OSError, KeyError, ValueError):
        pass
    classes, lower = _build_tables()
    try:
        os.makedirs(cache_dir, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp.npz"
        np.savez(tmp, classes=classes, lower=lower)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home only costs the rebuild
    return classes, lower


def char_classes() -> np.ndarray:
    return unicode_tables()[0]


@dataclass(frozen=True)
class MinHashParams:
    """:param num_perm: permutations (signature length).
    :param ngram: tokens per shingle.
    :param tokenizer: ``word`` (``\\w+``), ``space`` (non-whitespace runs) or ``char``.
    :param normalization: Unicode normal form applied first (``NFKC``, ``NFC``...) or None.
    :param lowercase: lowercase after normalising.
    :param seed: seeds the permutations; signatures compare only under equal params.
    """

    num_perm: int = 128
    ngram: int = 5
    tokenizer: str = "word"
    normalization: str | None = "NFKC"
    lowercase: bool = True
    seed: int = 1

    def __post_init__(self) -> None:
        if self.num_perm < 1 or self.ngram < 1:
            raise ValueError(f"num_perm and ngram must be >= 1, got {self.num_perm}, {self.ngram}")
        if self.tokenizer not in TOKENIZERS:
            raise ValueError(f"tokenizer {self.tokenizer!r} not in {sorted(TOKENIZERS)}")
        if self.normalization not in (None, "NFC", "NFD", "NFKC", "NFKD"):
            raise ValueError(f"normalization {self.normalization!r} not in NFC, NFD, NFKC, NFKD or None")

    def to_dict(self) -> dict:
        return asdict(self)


# ----------------------------------------------------------------------------------------------
# Arrow helpers: a batch of texts as (UTF-8 bytes, int64 offsets) without copying the characters.


def _as_array(texts) -> pa.Array:
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks() if texts.num_chunks != 1 else texts.chunk(0)
    elif not isinstance(texts, pa.Array):
        texts = pa.array(list(texts), pa.large_string())
    if not (pa.types.is_string(texts.type) or pa.types.is_large_string(texts.type)):
        raise TypeError(f"texts must be strings, got {texts.type}")
    return texts


def normalize(texts, normalization: str | None = "NFKC", lowercase: bool = True, lower_ascii: bool = True) -> pa.Array:
    """The batch, Unicode-normalised and lowercased (nulls become empty strings).

    ASCII documents are their own NFKC form, so only the others go through the Unicode kernels.
    ``lower_ascii=False`` leaves ASCII documents' case alone for callers that fold it themselves.
    """
    arr = _as_array(texts)
    if arr.null_count:
        arr = pc.fill_null(arr, "")
    if not normalization and not lowercase:
        return arr
    ascii_mask = pc.string_is_ascii(arr)
    n_ascii = pc.sum(ascii_mask).as_py() or 0
    out = pc.ascii_lower(arr) if lowercase and lower_ascii else arr
    if n_ascii == len(arr):
        return out
    # Python's unicodedata, not Arrow's utf8_normalize: Arrow 25's NFKC leaves some canonical pairs
    # decomposed (Arabic alef + hamza), which would split words that Python's NFKC keeps whole.
    other_py = pc.filter(arr, pc.invert(ascii_mask)).to_pylist()
    if normalization:
        other_py = [unicodedata.normalize(normalization, t) for t in other_py]
    if lowercase:
        other_py = [t.lower() for t in other_py]
    other = pa.array(other_py, pa.large_string())
    if n_ascii == 0:
        return other
    return pc.replace_with_mask(out.cast(other.type), pc.invert(ascii_mask), other)


def _buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    arr = arr.cast(pa.large_string()) if pa.types.is_string(arr.type) else arr
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], np.int64, count=len(arr) + 1, offset=arr.offset * 8)
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None and offsets[-1] > 0 else np.zeros(1, np.uint8)
    return data, offsets


# ----------------------------------------------------------------------------------------------
# Compiled kernels.


@numba.njit(inline="always")
def _fmix(h):
    h ^= h >> _S33
    h *= _M1
    h ^= h >> _S33
    h *= _M2
    h ^= h >> _S33
    return h


@numba.njit(inline="always")
def _decode(data, i, end):
    """Code point at ``data[i]`` and its width; a malformed tail counts as one byte."""
    b0 = np.int64(data[i])
    if b0 < 0x80:
        return b0, 1
    if b0 >= 0xF0 and i + 3 < end:
        return (
            ((b0 & 0x07) << 18)
            | ((np.int64(data[i + 1]) & 0x3F) << 12)
            | ((np.int64(data[i + 2]) & 0x3F) << 6)
            | (np.int64(data[i + 3]) & 0x3F)
        ), 4
    if b0 >= 0xE0 and i + 2 < end:
        return (((b0 & 0x0F) << 12) | ((np.int64(data[i + 1]) & 0x3F) << 6) | (np.int64(data[i + 2]) & 0x3F)), 3
    if b0 >= 0xC0 and i + 1 < end:
        return ((b0 & 0x1F) << 6) | (np.int64(data[i + 1]) & 0x3F), 2
    return b0, 1


@numba.njit(inline="always")
def _ascii8(data, i):
    """Whether the 8 bytes at ``data[i]`` are all ASCII."""
    return (
        (data[i] | data[i + 1] | data[i + 2] | data[i + 3] | data[i + 4] | data[i + 5] | data[i + 6] | data[i + 7])
        & 0x80
    ) == 0


@numba.njit(inline="always")
def _line_start(data, known, i, line_start):
    """Start of the line holding ``data[i]``: after the last line feed in ``data[known:i]`` (plain ASCII
    bytes), else ``line_start`` (the line's start as of ``known``)."""
    j = i - 1
    while j >= known and data[j] != 10:
        j -= 1
    return j + 1 if j >= known else line_start


@numba.njit(cache=True, nogil=True)
def _unsafe_lines_kernel(data, offsets, classes, bits):
    """``(docs, starts, ends)``: byte spans of the lines (between line feeds) that hold a code point with
    one of ``bits``. The arrays grow by doubling (few documents have such a line).

    Runs of ASCII bytes (most of the text) are skipped eight at a time without looking for line feeds;
    a line's start is found by looking back from the first flagged character, and its end by looking
    forward to the next line feed. Every byte is read at most twice, and the spans are those of a
    byte-by-byte walk (bytes inside a decoded character are never taken for a line feed)."""
    cap = offsets.size + 16
    docs, starts, ends = np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(cap, np.int64)
    n = 0
    for d in range(offsets.size - 1):
        i, end = offsets[d], offsets[d + 1]
        line_start = i  # the current line's start, as of position ``known``
        known = i
        while i < end:
            while i + 8 <= end and _ascii8(data, i):
                i += 8
            if i >= end:
                break
            if data[i] < 0x80:
                i += 1
                continue
            cp, w = _decode(data, i, end)
            line_start = _line_start(data, known, i, line_start)
            if cp >= classes.size or (classes[cp] & bits) != 0:
                k = i + w
                while k < end and data[k] != 10:
                    k += 1
                if n >= cap:
                    cap *= 2
                    docs, starts, ends = _grown(docs, n, cap), _grown(starts, n, cap), _grown(ends, n, cap)
                docs[n], starts[n], ends[n] = d, line_start, k
                n += 1
                i = k + 1
                line_start = i
            else:
                i += w
            known = i
    return docs[:n], starts[:n], ends[:n]


@numba.njit(inline="always")
def _grown(a, n, cap):
    out = np.empty(cap, a.dtype)
    out[:n] = a[:n]
    return out


@numba.njit(inline="always")
def _utf8_len(cp):
    if cp < 0x80:
        return 1
    if cp < 0x800:
        return 2
    if cp < 0x10000:
        return 3
    return 4


@numba.njit(inline="always")
def _utf8_byte(cp, n, j):
    """Byte ``j`` of the ``n``-byte UTF-8 encoding of ``cp``."""
    if n == 1:
        return cp
    if j == 0:
        lead = 0xC0 if n == 2 else (0xE0 if n == 3 else 0xF0)
        return lead | (cp >> (6 * (n - 1)))
    return 0x80 | ((cp >> (6 * (n - 1 - j))) & 0x3F)


@numba.njit(inline="always")
def _shingle(ring, n, ngram, mul):
    """Hash of the last ``n`` tokens (``ring[ngram - n:]``, oldest first; order matters): a
    position-weighted sum of well-mixed token hashes, mixed once."""
    h = np.uint64(n) * _GOLD
    for j in range(n):
        h += ring[ngram - n + j] * mul[j]
    return _fmix(h)


@numba.njit(inline="always")
def _permute_min(sig, a, b, x):
    for k in range(a.size):
        v = np.uint32((a[k] * x + b[k]) >> _S32)
        sig[k] = min(sig[k], v)


@numba.njit(inline="always")
def _push(ring, ngram, t):
    for j in range(ngram - 1):
        ring[j] = ring[j + 1]
    ring[ngram - 1] = t


@numba.njit(inline="always")
def _emit(ring, ntok, ngram, mul, a, b, sig, out, nsh, collect):
    if ntok >= ngram:
        x = _shingle(ring, ngram, ngram, mul)
        if collect:
            out[nsh] = x
        else:
            _permute_min(sig, a, b, x)
        return nsh + 1
    return nsh


@numba.njit(inline="always")
def _append_byte(th, word, nb, c):
    """A token's next byte ``c``: packed into ``word``, which joins the hash ``th`` every 8 bytes.
    Returns the new ``(th, word, nb)``."""
    word = (word << np.uint64(8)) | np.uint64(c)
    nb += 1
    if (nb & 7) == 0:
        th = (th ^ word) * _FNV_PRIME
        word = np.uint64(0)
    return th, word, nb


@numba.njit(inline="always")
def _ascii_lower(b, lower):
    """ASCII byte ``b``, lowercased when ``lower`` (A-Z only; the kernel's other bytes never change)."""
    c = np.uint64(b)
    if lower:
        c |= np.uint64((c - np.uint64(65)) < np.uint64(26)) << np.uint64(5)
    return c


@numba.njit(inline="always")
def _end_token(ring, ngram, th, word, nb, ntok, mul, a, b, sig, out, nsh, collect):
    """The token of ``nb`` bytes hashed so far ends: it joins the ring and the shingle ending with it
    is emitted. Returns ``(ntok, nsh)`` after it and the next token's empty ``(th, word, nb)``."""
    _push(ring, ngram, _fmix((th ^ word) * _FNV_PRIME + np.uint64(nb)))
    ntok += 1
    nsh = _emit(ring, ntok, ngram, mul, a, b, sig, out, nsh, collect)
    return ntok, nsh, _FNV_OFFSET, np.uint64(0), 0


@numba.njit(cache=True, nogil=True)
def _tokens_to_shingles(data, start, end, table, lowtab, mode, lower, ngram, mul, a, b, sig, out, collect):
    """One document: tokenize, shingle, and either fold into ``sig`` (MinHash) or, when ``collect``,
    write the shingle hashes to ``out``. When ``lower``, every character is lowercased here through
    ``lowtab`` (documents whose lowercasing needs context went through Python first; lowercasing is
    idempotent). Returns the number of shingles.

    A token's bytes are packed 8 at a time into a word (a shift and an or per byte) and each word is
    mixed in with one multiply: a per-byte multiply chain (FNV) was the bottleneck."""
    ring = np.zeros(ngram, np.uint64)
    ntok = 0
    nsh = 0
    th = _FNV_OFFSET
    word = np.uint64(0)
    nb = 0
    i = start
    while i < end:
        b0 = data[i]
        if mode == 0 and b0 < 0x80:
            # Word tokens, an ASCII byte: the same steps as the general path below, without decoding
            # and class checks per byte. A run of ASCII word characters extends the token; a run of other
            # ASCII bytes ends it once and is skipped.
            if (table[b0] & _WORD) != 0:
                while True:
                    th, word, nb = _append_byte(th, word, nb, _ascii_lower(b0, lower))
                    i += 1
                    if i >= end:
                        break
                    b0 = data[i]
                    if b0 >= 0x80 or (table[b0] & _WORD) == 0:
                        break
                continue
            if nb > 0:
                ntok, nsh, th, word, nb = _end_token(ring, ngram, th, word, nb, ntok, mul, a, b, sig, out, nsh, collect)
            i += 1
            while i < end and data[i] < 0x80 and (table[data[i]] & _WORD) == 0:
                i += 1
            continue
        if b0 < 0x80:
            cp = np.int64(b0)
            w = 1
        else:
            cp, w = _decode(data, i, end)
        cls = table[cp] if cp < table.size else np.uint8(0)
        if mode == 0:
            is_tok = (cls & _WORD) != 0
        else:
            is_tok = (cls & _SPACE) == 0
        if nb > 0 and (not is_tok or mode == 2):
            # a token ends here (char tokens: every character ends the previous one)
            ntok, nsh, th, word, nb = _end_token(ring, ngram, th, word, nb, ntok, mul, a, b, sig, out, nsh, collect)
        if is_tok:
            if w == 1:
                th, word, nb = _append_byte(th, word, nb, _ascii_lower(b0, lower))
            else:
                lc = np.int64(lowtab[cp]) if lower else cp
                n = _utf8_len(lc)
                for j in range(n):
                    th, word, nb = _append_byte(th, word, nb, _utf8_byte(lc, n, j))
        i += w
    if nb > 0:
        ntok, nsh, th, word, nb = _end_token(ring, ngram, th, word, nb, ntok, mul, a, b, sig, out, nsh, collect)
    if 0 < ntok < ngram:
        x = _shingle(ring, ntok, ngram, mul)
        if collect:
            out[nsh] = x
        else:
            _permute_min(sig, a, b, x)
        nsh += 1
    return nsh


@numba.njit(cache=True, nogil=True)
def _min_hashes(x, n, a, b, row):
    """``row[k] = min over the n shingles x[:n] of permutation k``. Four shingles per pass over the
    permutations, each folded into one 64-bit accumulator per permutation: LLVM vectorises the
    permutation loop (8 lanes with AVX-512) and the four independent products keep the multiplier
    busy; 1.5-2x folding one shingle at a time."""
    acc = np.empty(a.size, np.uint64)
    for k in range(a.size):
        acc[k] = np.uint64(0xFFFFFFFF)
    i = 0
    while i + 3 < n:
        x0, x1, x2, x3 = x[i], x[i + 1], x[i + 2], x[i + 3]
        for k in range(a.size):
            ak, bk = a[k], b[k]
            m01 = min((ak * x0 + bk) >> _S32, (ak * x1 + bk) >> _S32)
            m23 = min((ak * x2 + bk) >> _S32, (ak * x3 + bk) >> _S32)
            acc[k] = min(acc[k], min(m01, m23))
        i += 4
    while i < n:
        for k in range(a.size):
            acc[k] = min(acc[k], (a[k] * x[i] + b[k]) >> _S32)
        i += 1
    for k in range(a.size):
        row[k] = np.uint32(acc[k])


@numba.njit(cache=True, nogil=True)
def _signatures_kernel(data, starts, ends, rows, table, lowtab, mode, lower, ngram, mul, a, b, sig, counts):
    # Two passes per document, shingle hashes into a buffer then the permutations over them: the same
    # values as folding each shingle in as it comes (min is order-free), about twice as fast, because
    # the permutation loop no longer competes with the tokenizer's state for registers.
    longest = 0
    for d in range(starts.size):
        longest = max(longest, ends[d] - starts[d])
    buf = np.empty(longest + 1, np.uint64)  # a document has at most one shingle per byte, plus one
    dummy = np.empty(0, np.uint32)
    for d in range(starts.size):
        n = _tokens_to_shingles(
            data, starts[d], ends[d], table, lowtab, mode, lower, ngram, mul, a, b, dummy, buf, True
        )
        _min_hashes(buf, n, a, b, sig[rows[d]])
        counts[rows[d]] = n


@numba.njit(cache=True, nogil=True)
def _shingles_kernel(data, start, end, table, lowtab, mode, lower, ngram, mul, out):
    a = np.empty(0, np.uint64)
    sig = np.empty(0, np.uint32)
    return _tokens_to_shingles(data, start, end, table, lowtab, mode, lower, ngram, mul, a, a, sig, out, True)


@numba.njit(cache=True, nogil=True)
def _fold_whitespace_kernel(data, offsets, table, lowtab, lower, out, out_offsets):
    """Whitespace runs become one space, ends stripped; every character lowercased when ``lower``."""
    pos = 0
    for d in range(offsets.size - 1):
        out_offsets[d] = pos
        i, end = offsets[d], offsets[d + 1]
        wrote = False
        pending = False
        while i < end:
            cp, w = _decode(data, i, end)
            if cp < table.size and (table[cp] & _SPACE) != 0:
                pending = wrote
            else:
                if pending:
                    out[pos] = 32
                    pos += 1
                    pending = False
                lc = np.int64(lowtab[cp]) if lower and cp < lowtab.size else cp
                n = _utf8_len(lc)
                for j in range(n):
                    out[pos + j] = _utf8_byte(lc, n, j)
                pos += n
                wrote = True
            i += w
    out_offsets[offsets.size - 1] = pos


@numba.njit(cache=True, nogil=True)
def _band_kernel(sig, bands, rows, out):
    for d in range(sig.shape[0]):
        for bi in range(bands):
            h = _fmix(np.uint64(bi + 1) * _GOLD)
            for j in range(rows):
                h = _fmix((h ^ np.uint64(sig[d, bi * rows + j])) * _FNV_PRIME + _GOLD)
            out[d, bi] = h


# ----------------------------------------------------------------------------------------------
# Public API.


def _prepare(texts, normalization: str | None, lowercase: bool, word_tokens: bool = False) -> pa.Array:
    """The batch as the kernels want it. Documents whose NFKC form or lowercase may differ from a
    per-character mapping (a code point that NFKC changes or that may compose with its neighbour, or
    whose lowercase is several characters) go through Python's ``unicodedata.normalize`` and
    ``str.lower``; all others stay as they are, and the kernels lowercase them character by character
    through the table. Both give the same text: NFKC leaves such documents alone (whitespace that NFKC
    maps to a space is whitespace either way)."""
    arr = _as_array(texts)
    if arr.null_count:
        arr = pc.fill_null(arr, "")
    if not normalization and not lowercase:
        return arr
    if normalization in ("NFKC", None):
        bits = (_UNSAFE_WORD if word_tokens else _UNSAFE_NFKC) if normalization else _UNSAFE_LOWER
        return _normalize_lines(arr, bits, normalization, lowercase)
    need = ~pc.string_is_ascii(arr).to_numpy(zero_copy_only=False)
    if not need.any():
        return arr
    other = pc.filter(arr, pa.array(need)).to_pylist()
    if normalization:
        other = [unicodedata.normalize(normalization, t) for t in other]
    if lowercase:
        other = [t.lower() for t in other]
    return pc.replace_with_mask(arr.cast(pa.large_string()), pa.array(need), pa.array(other, pa.large_string()))


def _fix_lines(lines: list[bytes], normalization: str | None, lowercase: bool) -> list[bytes]:
    """NFKC + lower of each line, in one call over all of them joined by line feeds (per-call overhead
    was most of the cost): neither looks across a line feed, and neither makes or removes one, which
    the count check confirms (else line by line)."""

    def fix(raw: bytes) -> str:
        text = raw.decode("utf-8", "replace")
        if normalization:
            text = unicodedata.normalize(normalization, text)
        return text.lower() if lowercase else text

    out = fix(b"\n".join(lines)).encode().split(b"\n")
    return out if len(out) == len(lines) else [fix(line).encode() for line in lines]


def _normalize_lines(arr: pa.Array, bits, normalization: str | None, lowercase: bool) -> pa.Array:
    """Python's NFKC + lower on just the lines that hold a character with ``bits``: NFKC and
    ``str.lower`` never look across a line feed (a starter that composes with nothing and is not
    case-ignorable), and the kernels lowercase every other line character by character."""
    if pa.types.is_string(arr.type):
        arr = arr.cast(pa.large_string())  # once here, not again in every caller's _buffers
    data, offsets = _buffers(arr)
    docs, starts, ends = _unsafe_lines_kernel(data, offsets, char_classes(), np.uint8(bits))
    n = docs.size
    if n == 0:
        return arr
    raw = memoryview(data)
    fixed = _fix_lines([bytes(raw[int(s) : int(e)]) for s, e in zip(starts, ends)], normalization, lowercase)
    # The new buffer: unchanged bytes copied in runs, each fixed line in place of its original.
    pieces, lengths = [], np.diff(offsets)
    pos = int(offsets[0])
    for k in range(n):
        s, e = int(starts[k]), int(ends[k])
        pieces.append(data[pos:s])
        pieces.append(np.frombuffer(fixed[k], np.uint8))
        lengths[docs[k]] += len(fixed[k]) - (e - s)
        pos = e
    pieces.append(data[pos : int(offsets[-1])])
    new_offsets = np.zeros(len(arr) + 1, np.int64)
    np.cumsum(lengths, out=new_offsets[1:])
    return pa.LargeStringArray.from_buffers(len(arr), pa.py_buffer(new_offsets), pa.py_buffer(np.concatenate(pieces)))


def fold_whitespace(texts, lower: bool = False) -> pa.Array:
    """Runs of whitespace become one space; leading and trailing whitespace goes; with ``lower``,
    characters are lowercased one by one (see :func:`_prepare` for when that equals ``str.lower``)."""
    arr = _as_array(texts)
    if arr.null_count:
        arr = pc.fill_null(arr, "")
    data, offsets = _buffers(arr)
    # lowercasing may turn a 2-byte character into a 3-byte one
    out = np.empty(int(offsets[-1] - offsets[0]) * 3 // 2 + 8, np.uint8)
    out_offsets = np.empty(len(offsets), np.int64)
    _fold_whitespace_kernel(data, offsets, char_classes(), unicode_tables()[1], lower, out, out_offsets)
    return pa.LargeStringArray.from_buffers(len(arr), pa.py_buffer(out_offsets), pa.py_buffer(out))


def prepare(texts, normalization: str | None = "NFKC", lowercase: bool = True) -> pa.Array:
    """The batch ready for both :func:`exact_keys` and :meth:`MinHasher.signatures` with
    ``prepared=True``: one normalisation pass shared by the two."""
    return _prepare(texts, normalization, lowercase)


def exact_keys(texts, normalization: str | None = "NFKC", lowercase: bool = True, prepared: bool = False) -> np.ndarray:
    """128-bit content keys, shape (n, 2) uint64: equal exactly when the normalised texts are equal.
    ``prepared``: ``texts`` came from :func:`prepare` with the same settings."""
    if not prepared:
        texts = _prepare(texts, normalization, lowercase)
    folded = fold_whitespace(_as_array(texts), lower=lowercase)
    data, offsets = _buffers(folded)
    mv = memoryview(data)
    keys = np.empty((len(folded), 2), np.uint64)
    digest = xxhash.xxh3_128_intdigest
    mask = (1 << 64) - 1
    for d in range(len(folded)):
        h = digest(mv[offsets[d] : offsets[d + 1]])
        keys[d, 0] = h >> 64
        keys[d, 1] = h & mask
    return keys


class MinHasher:
    """MinHash signatures of a batch of texts.

    :param params: shingling and permutation settings.
    """

    def __init__(self, params: MinHashParams | None = None) -> None:
        self.params = params or MinHashParams()
        rng = np.random.default_rng(self.params.seed)
        self.a = rng.integers(1, 2**63, size=self.params.num_perm, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        self.b = rng.integers(0, 2**63, size=self.params.num_perm, dtype=np.uint64)
        # position weights of the tokens inside a shingle (odd, so every position counts)
        self.mul = rng.integers(1, 2**63, size=self.params.ngram, dtype=np.uint64) * np.uint64(2) + np.uint64(1)

    def _prepared(self, texts, prepared: bool = False) -> tuple[np.ndarray, np.ndarray, int]:
        p = self.params
        arr = _as_array(texts) if prepared else _prepare(texts, p.normalization, p.lowercase, p.tokenizer == "word")
        data, offsets = _buffers(arr)
        return data, offsets, len(arr)

    def _args(self) -> tuple:
        p = self.params
        classes, lower = unicode_tables()
        return classes, lower, TOKENIZERS[p.tokenizer], p.lowercase, p.ngram, self.mul

    def signatures(self, texts, prepared: bool = False, perms: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(signatures (n, num_perm) uint32, shingle counts (n,) int64)``. A document without tokens
        has count 0 and every signature value :data:`EMPTY`. ``prepared``: ``texts`` came from
        :func:`prepare` with this hasher's normalisation settings. ``perms``: only the first ``perms``
        permutations (the same values as the full signature's first columns), e.g. the ``bands x rows``
        that LSH reads when nothing else needs the signature."""
        k = self.params.num_perm if perms is None else min(int(perms), self.params.num_perm)
        data, offsets, n = self._prepared(texts, prepared)
        sig = np.empty((n, k), np.uint32)
        counts = np.empty(n, np.int64)
        _signatures_kernel(
            data,
            offsets[:-1],
            offsets[1:],
            np.arange(n, dtype=np.int64),
            *self._args(),
            self.a[:k],
            self.b[:k],
            sig,
            counts,
        )
        return sig, counts

    def shingles(self, text: str) -> np.ndarray:
        """The distinct shingle hashes of one text, sorted (what exact Jaccard is computed on)."""
        data, offsets, _ = self._prepared([text])
        out = np.empty(max(1, int(offsets[1] - offsets[0]) + 1), np.uint64)
        n = _shingles_kernel(data, offsets[0], offsets[1], *self._args(), out)
        return np.unique(out[:n])


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard of two sorted distinct hash arrays (two empty sets: 0)."""
    if a.size == 0 and b.size == 0:
        return 0.0
    inter = np.intersect1d(a, b, assume_unique=True).size
    return inter / (a.size + b.size - inter)


def estimate_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> float:
    """Fraction of equal signature values (the MinHash estimator)."""
    return float(np.mean(sig_a == sig_b))


def band_hashes(sig: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """(n, bands) uint64: one hash per band of ``rows`` signature values; band index is mixed in so
    that equal values in different bands never share a bucket."""
    if bands * rows > sig.shape[1]:
        raise ValueError(f"{bands} bands x {rows} rows exceed {sig.shape[1]} permutations")
    out = np.empty((sig.shape[0], bands), np.uint64)
    _band_kernel(np.ascontiguousarray(sig), bands, rows, out)
    return out


_trapezoid = getattr(np, "trapezoid", None) or np.trapz  # numpy < 2 has only trapz


def _collision(s: np.ndarray, bands: int, rows: int) -> np.ndarray:
    return 1.0 - (1.0 - s**rows) ** bands


@functools.lru_cache(maxsize=256)
def lsh_params(threshold: float, num_perm: int, fp_weight: float = 0.5, fn_weight: float = 0.5) -> tuple[int, int]:
    """``(bands, rows)`` with ``bands * rows <= num_perm`` minimising the weighted area of false
    positives (below ``threshold``) and false negatives (above it) under the S-curve."""
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must be in (0, 1), got {threshold}")
    if not math.isclose(fp_weight + fn_weight, 1.0):
        raise ValueError("fp_weight + fn_weight must be 1")
    lo = np.linspace(0.0, threshold, 513)
    hi = np.linspace(threshold, 1.0, 513)
    best, best_err = (1, 1), math.inf
    for bands in range(1, num_perm + 1):
        for rows in range(1, num_perm // bands + 1):
            fp = _trapezoid(_collision(lo, bands, rows), lo)
            fn = _trapezoid(1.0 - _collision(hi, bands, rows), hi)
            err = fp_weight * fp + fn_weight * fn
            if err < best_err - 1e-15:
                best, best_err = (bands, rows), err
    return best
