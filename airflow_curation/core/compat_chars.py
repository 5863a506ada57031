"""Per code point attributes that the compat splitter and word tables read, set as characters are first seen.

One table of 0x110000 16-bit flags (2.2 MB) per process: the ASCII rows are set up front, any other row the first
time a batch holds that character (:func:`cover`), so a process asks Python's ``unicodedata`` once per distinct
character, never per word or piece (a cold pass over text past ASCII asked it for every character of every new
word). :mod:`~airflow_curation.core.compat_vocab` reads the word attributes from it, and
:mod:`~airflow_curation.core.compat_split` the letters of a piece past ASCII.
"""

from __future__ import annotations

import threading
import unicodedata

import numpy as np

from airflow_curation.core.jit import numba

# in datatrove's punctuation set; a letter (``str.isalpha``); Unicode category P; a sentence terminal; its lower
# case holds a character past ASCII (no special case of the splitter can hold it: their lower cases are ASCII);
# the row is set
A_PUNCTSET, A_ALPHA, A_CATP, A_TERM, A_LOWER_WIDE, A_KNOWN = 1, 2, 4, 8, 16, 128
# For the splitter's pieces past ASCII (:func:`compat_words.wide_piece_tokens` states what they decide): a letter
# or mark that no rule reads; a mark the prefix and suffix rules take off an edge; such a mark that no rule reads
# inside a word; a lower-case and an upper-case letter of spaCy's classes (the period's suffix rule reads them)
A_CORE, A_EDGE, A_INNER, A_SP_LOWER, A_SP_UPPER = 32, 64, 256, 512, 1024
SIZE = 0x110000

_TABLE: np.ndarray | None = None
_LOCK = threading.Lock()


def _flags(ch: str, punctuation: frozenset[str], terminals: frozenset[str]) -> int:
    from airflow_curation.core import compat_words as cw

    return (
        (A_PUNCTSET if ch in punctuation else 0)
        | (A_ALPHA if ch.isalpha() else 0)
        | (A_CATP if unicodedata.category(ch)[0] == "P" else 0)
        | (A_TERM if ch in terminals else 0)
        | (0 if ch.lower().isascii() else A_LOWER_WIDE)
        | (A_CORE if cw.is_core(ch) else 0)
        | (A_EDGE if cw.is_edge(ch) else 0)
        | (A_INNER if cw.is_inner(ch) else 0)
        | (A_SP_LOWER if cw.is_spacy_lower(ch) else 0)
        | (A_SP_UPPER if cw.is_spacy_upper(ch) else 0)
        | A_KNOWN
    )


def _sets() -> tuple[frozenset[str], frozenset[str]]:
    from airflow_curation.core.compat import PUNCTUATION
    from airflow_curation.core.compat_words import SENTENCE_TERMINALS

    return PUNCTUATION, SENTENCE_TERMINALS


def table() -> np.ndarray:
    """The process's table (ASCII rows set; others by :func:`cover`)."""
    global _TABLE
    with _LOCK:
        if _TABLE is None:
            punctuation, terminals = _sets()
            t = np.zeros(SIZE, dtype=np.uint16)
            for c in range(128):
                t[c] = _flags(chr(c), punctuation, terminals)
            _TABLE = t
        return _TABLE


@numba.njit(cache=True)
def _unknown(cps, starts, stops, t):
    """The distinct code points of ``cps[starts[p]:stops[p]]`` whose rows are not set, each marked set (the caller
    writes their flags before anything reads them)."""
    out = np.empty(64, dtype=np.int64)
    n = 0
    for p in range(starts.shape[0]):
        for i in range(starts[p], stops[p]):
            c = cps[i]
            if t[c] & A_KNOWN:
                continue
            t[c] = A_KNOWN
            if n == out.shape[0]:
                out = np.concatenate((out, np.empty_like(out)))
            out[n] = c
            n += 1
    return out[:n]


def cover(cps: np.ndarray, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """The table, with a row set for every code point of the ranges ``cps[starts[p]:stops[p]]``."""
    t = table()
    with _LOCK:
        new = _unknown(cps, starts, stops, t)
        if new.size:
            punctuation, terminals = _sets()
            for c in new.tolist():
                t[c] = _flags(chr(c), punctuation, terminals)
    return t


__all__ = [
    "A_ALPHA",
    "A_CATP",
    "A_CORE",
    "A_EDGE",
    "A_INNER",
    "A_KNOWN",
    "A_LOWER_WIDE",
    "A_PUNCTSET",
    "A_SP_LOWER",
    "A_SP_UPPER",
    "A_TERM",
    "cover",
    "table",
]
