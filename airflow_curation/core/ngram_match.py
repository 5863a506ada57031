"""Word n-grams for decontamination: datatrove's text normalisation, 64-bit n-gram hashes, spans.

:func:`normalize` is datatrove's ``simplify_text`` with its default ``TextNormConfig`` (lowercase; numbers,
with an optional decimal part, to ``0``; datatrove's punctuation to spaces; whitespace collapsed; NFD with
the combining marks (``Mn``) removed), so that the same documents match the same evaluation n-grams.
Words are that text split on whitespace. (datatrove then splits words with spaCy's English tokenizer, whose
exceptions cut a few words further: ``cannot`` -> ``can not``, ``dont`` -> ``do nt``, a currency symbol
off its number; docs/decontaminate.md.)

:func:`ngram_hashes` hashes every window of ``n`` consecutive words of a batch of normalised texts in one
compiled pass over the batch's UTF-8 buffer: each word is hashed (FNV-1a, then a 64-bit finaliser) and a
window's hash is a polynomial of its words' hashes, finalised again. 64 bits: among 10^9 evaluation
n-grams and 10^13 document n-grams, the expected false matches are 10^22 / 2^64 ~ 500 n-grams spread over
a corpus, each one document (a flagged document carries its matched n-gram, which a reader can check).

:func:`word_spans` maps each word back to its code-point span in the original text (only for the
documents that matched: a Python loop over their characters).
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

import numpy as np
import pyarrow as pa

from airflow_curation.core.jit import numba

# datatrove.utils.text.PUNCTUATION (0.10.1): these characters become spaces.
PUNCTUATION = "!/—”:％１〈&(、━\\【#%「」，】；+^]~“《„';’{|∶´[=-`*．（–？！：$～«〉,><》)?）。…@_.\"}►»" + "".join(
    map(chr, (x for a, b in ((0, 9), (11, 13), (13, 32), (127, 160)) for x in range(a, b)))
)
_PUNCT_SET = frozenset(PUNCTUATION)
# \p{Nd}+ with an optional decimal part: for str patterns, re's \d is exactly the Unicode Nd category.
_NUMBERS = re.compile(r"\d+([.,،٫⎖⎗⎘]\d+)?")


_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
_PUNCT_CLASS = re.compile("[" + re.escape(PUNCTUATION) + "]")
_ASCII_PUNCT = bytes.maketrans(
    bytes(c for c in range(128) if chr(c) in _PUNCT_SET), b" " * sum(chr(c) in _PUNCT_SET for c in range(128))
)


@lru_cache(maxsize=1 << 16)
def _unmarked(run: str) -> str:
    """NFD of a run of non-ASCII characters without its non-spacing marks (``Mn``). Marks are non-ASCII and
    follow their base, so runs give what the whole text's NFD would; runs repeat (words), hence the cache."""
    return "".join(c for c in unicodedata.normalize("NFD", run) if unicodedata.category(c) != "Mn")


def _strip_marks(text: str) -> str:
    if text.isascii():
        return text  # NFD of ASCII is itself and has no marks
    return _NON_ASCII.sub(lambda m: _unmarked(m.group()), text)


def _depunct(text: str) -> str:
    if text.isascii():
        return text.encode("ascii").translate(_ASCII_PUNCT).decode("ascii")
    return _PUNCT_CLASS.sub(" ", text)


def normalize(text: str) -> str:
    """datatrove's ``simplify_text`` (default config), with words separated by single spaces."""
    text = _depunct(_NUMBERS.sub("0", text.lower()))
    return " ".join(_strip_marks(" ".join(text.split())).split())


def words(text: str) -> list[str]:
    return normalize(text).split()


def word_spans(text: str) -> list[tuple[int, int]]:
    """The code-point span ``[start, end)`` in ``text`` of each word of :func:`words` (same count, same order).

    Each step of :func:`normalize` is replayed on characters that remember the span of the original they
    came from: a lowered character its source character, a number's ``0`` the whole number."""
    chars: list[tuple[str, int, int]] = [(lc, i, i + 1) for i, c in enumerate(text) for lc in c.lower()]
    lowered = "".join(c for c, _, _ in chars)
    out: list[tuple[str, int, int]] = []
    pos = 0
    for m in _NUMBERS.finditer(lowered):
        out.extend(chars[pos : m.start()])
        out.append(("0", chars[m.start()][1], chars[m.end() - 1][2]))
        pos = m.end()
    out.extend(chars[pos:])
    spans: list[tuple[int, int]] = []
    start = end = -1
    for c, s, e in out:
        if c in _PUNCT_SET or c.isspace() or not _strip_marks(c):
            if c in _PUNCT_SET or c.isspace():  # a word ends (a lone mark is dropped without ending one)
                if start >= 0:
                    spans.append((start, end))
                start = -1
            continue
        if start < 0:
            start = s
        end = e
    if start >= 0:
        spans.append((start, end))
    return spans


# -- hashing ----------------------------------------------------------------------------------------------
_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_MUL = np.uint64(0x9E3779B97F4A7C15)


@numba.njit(inline="always")
def _fmix(h):
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    h ^= h >> np.uint64(33)
    return h


@numba.njit(cache=True, nogil=True)
def _ngram_kernel(data, offsets, n, out_hash, out_doc, out_pos, word_hash):
    """Every window of ``n`` words of each text (words separated by single spaces): its hash, text index and
    first word's index. Returns the number of windows written."""
    k = 0
    for d in range(offsets.shape[0] - 1):
        a, b = offsets[d], offsets[d + 1]
        nw = 0
        h = _FNV_OFFSET
        for i in range(a, b + 1):
            if i == b or data[i] == 32:
                if i > a and (i == b or data[i - 1] != 32):
                    word_hash[nw] = _fmix(h)
                    nw += 1
                h = _FNV_OFFSET
            else:
                h = (h ^ np.uint64(data[i])) * _FNV_PRIME
        for s in range(nw - n + 1):
            g = np.uint64(0)
            for j in range(n):
                g = g * _MUL + word_hash[s + j]
            out_hash[k] = _fmix(g ^ np.uint64(n))
            out_doc[k] = d
            out_pos[k] = s
            k += 1
    return k


def ngram_hashes(texts: list[str], n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(hash uint64, text index int64, first word index int32) of every ``n``-word window of the normalised
    ``texts`` (words separated by single spaces), in text then position order."""
    arr = pa.array(texts, pa.large_string())
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], np.int64)[arr.offset : arr.offset + len(arr) + 1]
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    nbytes = int(offsets[-1] - offsets[0]) if len(texts) else 0
    cap = nbytes // 2 + len(texts) + 1  # words <= (bytes + 1) / 2 per text
    out_hash = np.empty(cap, np.uint64)
    out_doc = np.empty(cap, np.int64)
    out_pos = np.empty(cap, np.int32)
    longest = max((len(t) for t in texts), default=0)
    k = _ngram_kernel(data, offsets, int(n), out_hash, out_doc, out_pos, np.empty(longest // 2 + 2, np.uint64))
    return out_hash[:k], out_doc[:k], out_pos[:k]
