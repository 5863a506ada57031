"""The process's tables of whitespace pieces and datatrove words, kept and searched in compiled code.

:mod:`airflow_curation.core.compat_batch` keeps them across batches (a piece is split into words once per
process). :func:`scan` cuts each document into whitespace pieces (``str.split()``: every ``str.isspace``
character separates) and looks each one up in an open-addressing table of the pieces seen so far, giving a new
one the next id; :func:`add_pieces` stores the words of the new ones: ids into a word table (looked up the
same way) that holds, per word, what the compat kernel reads: its length, whether it is all punctuation, has a
letter, is a stop word, a sentence terminal, spaCy punctuation, and its polynomial hashes for joined n-grams
(modulo 2^61-1 for the exact keys, modulo 2^64 for the counting pass).

Equality is exact: a table hit compares the stored characters, not only the hash. Every table is a numpy
array that only grows (a kernel returns the grown array; the used prefix never changes), so a snapshot the
compat kernel reads stays valid while a later batch adds.
"""

from __future__ import annotations

import numpy as np

from airflow_curation.core.compat_chars import A_ALPHA, A_CATP, A_PUNCTSET, A_TERM
from airflow_curation.core.compat_kernel import (
    BASE,
    BASE64,
    MERSENNE,
    SPACE,
    T_ALPHA,
    T_PUNCT,
    _mulmod,
    span_hash,
    spans_equal,
)
from airflow_curation.core.jit import numba

njit = numba.njit

# the counters of the tables (an int64 array the kernels update in place)
N_PIECES, N_PCHARS, N_PTOK, N_WORDS, N_WCHARS = range(5)


@njit(cache=True)
def _grow(a, need):
    """``a``, or a copy at least twice as long when it holds fewer than ``need`` items (its prefix kept)."""
    while a.shape[0] < need:
        a = np.concatenate((a, np.empty_like(a)))
    return a


@njit(cache=True)
def _find(tab, chars, coff, h, arr, s, e):
    """The slot of the item ``arr[s:e]`` (hash ``h``) in ``tab`` (a row per slot: the item's id + 1, 0 empty, and
    its hash, so a probe reads one cache line), or the empty slot where it goes."""
    mask = np.uint64(tab.shape[0] - 1)
    slot = h & mask
    while tab[slot, 0]:
        if tab[slot, 1] == h:
            i = np.int64(tab[slot, 0]) - 1
            if coff[i + 1] - coff[i] == e - s and spans_equal(chars, coff[i], arr, s, e - s):
                return slot
        slot = (slot + np.uint64(1)) & mask
    return slot


@njit(cache=True)
def _rehash(tab, n, room):
    """``tab`` with room for ``room`` more items at a load of at most one half (a new, larger table if needed)."""
    size = tab.shape[0]
    if 2 * (n + room) <= size:
        return tab
    while 2 * (n + room) > size:
        size *= 2
    new = np.zeros((size, 2), dtype=np.uint64)
    mask = np.uint64(size - 1)
    for old in range(tab.shape[0]):
        if tab[old, 0]:
            slot = tab[old, 1] & mask
            while new[slot, 0]:
                slot = (slot + np.uint64(1)) & mask
            new[slot, 0] = tab[old, 0]
            new[slot, 1] = tab[old, 1]
    return new


@njit(cache=True)
def scan(cps, doff, cls, ptab, pchars, pcoff, counts):
    """Each document's whitespace pieces as piece ids (a piece not in the table is added with the next id).

    :param cps: the documents' code points, one after another; document ``d`` is ``cps[doff[d]:doff[d + 1]]``.
    :param cls: per code point flags (:func:`compat_kernel.class_table`; ``SPACE``: ``str.isspace``).
    :returns: piece ids in order, the first piece per document (one past the last), the new pieces' starts
        and ends in ``cps`` (in id order), and the piece table's arrays (grown where they had to).
    """
    nd = doff.shape[0] - 1
    bound = cps.shape[0] // 2 + nd + 1  # a piece and the space after it
    pids = np.empty(bound, dtype=np.int64)
    poff = np.zeros(nd + 1, dtype=np.int64)
    new_s = np.empty(bound, dtype=np.int64)
    new_e = np.empty(bound, dtype=np.int64)
    n = 0
    n_new = 0
    for d in range(nd):
        c = doff[d]
        end = doff[d + 1]
        while c < end:
            while c < end and cls[cps[c]] & SPACE:
                c += 1
            if c == end:
                break
            s = c
            while c < end and not (cls[cps[c]] & SPACE):
                c += 1
            h = span_hash(cps, s, c)
            slot = _find(ptab, pchars, pcoff, h, cps, s, c)
            if ptab[slot, 0]:
                pid = np.int64(ptab[slot, 0]) - 1
            else:
                pid = counts[N_PIECES]
                if 2 * (pid + 1) > ptab.shape[0]:
                    ptab = _rehash(ptab, pid, 1)
                    slot = _find(ptab, pchars, pcoff, h, cps, s, c)
                used = counts[N_PCHARS]
                pcoff = _grow(pcoff, pid + 2)
                pchars = _grow(pchars, used + c - s)
                pchars[used : used + c - s] = cps[s:c]
                pcoff[pid + 1] = used + c - s
                ptab[slot, 0] = pid + 1
                ptab[slot, 1] = h
                counts[N_PIECES] = pid + 1
                counts[N_PCHARS] = used + c - s
                new_s[n_new] = s
                new_e[n_new] = c
                n_new += 1
            pids[n] = pid
            n += 1
        poff[d + 1] = n
    return pids[:n], poff, new_s[:n_new], new_e[:n_new], ptab, pchars, pcoff


@njit(cache=True)
def _stop_index(arr, s, e, stops, stop_len):
    for w in range(stops.shape[0]):
        if stop_len[w] != e - s:
            continue
        same = True
        for k in range(e - s):
            if arr[s + k] != stops[w, k]:
                same = False
                break
        if same:
            return w
    return -1


@njit(cache=True)
def _word_id(arr, s, e, attr, wtab, wchars, wcoff, cols, counts):
    """The id of the word ``arr[s:e]``, added with ``attr`` (flag, stop, terminal, punctuation) when new; the
    word tables (``wtab``: the slot table; ``cols``: per word, length, flags, stop index, terminal,
    punctuation and the two polynomial hashes with their powers) have room (:func:`add_pieces` grew them)."""
    wlen, wflag, wstop, wterm, wpunct, th, tpw, th64, tpw64 = cols
    h = span_hash(arr, s, e)
    slot = _find(wtab, wchars, wcoff, h, arr, s, e)
    if wtab[slot, 0]:
        return np.int64(wtab[slot, 0]) - 1
    i = counts[N_WORDS]
    used = counts[N_WCHARS]
    wchars[used : used + e - s] = arr[s:e]
    wcoff[i + 1] = used + e - s
    wtab[slot, 0] = i + 1
    wtab[slot, 1] = h
    counts[N_WORDS] = i + 1
    counts[N_WCHARS] = used + e - s
    wlen[i] = e - s
    wflag[i] = attr[0]
    wstop[i] = attr[1]
    wterm[i] = attr[2]
    wpunct[i] = attr[3]
    # the polynomial hash mod 2^61-1 of its characters and BASE^length (the joined n-grams' keys), and the
    # same modulo 2^64 with BASE64 (one multiply a step: the duplicated n-grams' counting pass)
    p = np.uint64(MERSENNE)
    x = np.uint64(0)
    q = np.uint64(1)
    x64 = np.uint64(0)
    q64 = np.uint64(1)
    for k in range(s, e):
        x = _mulmod(x, np.uint64(BASE)) + np.uint64(arr[k])
        if x >= p:
            x -= p
        q = _mulmod(q, np.uint64(BASE))
        x64 = x64 * np.uint64(BASE64) + np.uint64(arr[k])
        q64 *= np.uint64(BASE64)
    th[i] = x
    tpw[i] = q
    th64[i] = x64
    tpw64[i] = q64
    return i


@njit(cache=True)
def _word_attr(arr, a, b, achr, stops, stop_len, attr):
    """The word ``arr[a:b]``'s (flags, stop index, is a terminal, is spaCy punctuation) into ``attr``."""
    punctset, alpha, catp = True, False, True
    for x in range(a, b):
        f = achr[arr[x]]
        punctset = punctset and (f & A_PUNCTSET) != 0
        alpha = alpha or (f & A_ALPHA) != 0
        catp = catp and (f & A_CATP) != 0
    attr[0] = (T_PUNCT if punctset else 0) | (T_ALPHA if alpha else 0)
    attr[1] = _stop_index(arr, a, b, stops, stop_len)
    attr[2] = 1 if b - a == 1 and achr[arr[a]] & A_TERM else 0
    attr[3] = 1 if catp and not alpha else 0


@njit(cache=True)
def add_pieces(
    cps,
    new_s,
    new_e,
    tok_ends,
    tok_off,
    python,
    py_chars,
    py_coff,
    py_count,
    achr,
    stops,
    stop_len,
    words,
    pieces,
    counts,
):
    """The words of the new pieces (``scan``'s, in id order), into the piece and word tables.

    A piece the compiled splitter decided (``python`` false) has its words' ends in ``tok_ends[tok_off[j]:
    tok_off[j + 1]]``; the others, in order, have ``py_count`` words each (Python's), whose characters are
    ``py_chars[py_coff[q]:py_coff[q + 1]]``. ``words`` and ``pieces`` are the tables' arrays
    (:class:`compat_batch.Vocab`); returns them, grown.

    :param achr: per code point, ``compat_chars.A_*`` flags, set for every character of the new pieces.
    :param stops: the stop words' code points, one per row (``stop_len`` long).
    """
    wtab, wchars, wcoff, wlen, wflag, wstop, wterm, wpunct, th, tpw, th64, tpw64 = words
    pt_off, pt_tok, p_sent = pieces
    m = new_s.shape[0]
    n_tok = tok_off[m] + py_coff.shape[0] - 1
    n_chars = 0
    for j in range(m):
        n_chars += new_e[j] - new_s[j]
    n_chars += py_chars.shape[0]
    nw = counts[N_WORDS]
    wtab = _rehash(wtab, nw, n_tok)
    wcoff = _grow(wcoff, nw + n_tok + 1)
    wchars = _grow(wchars, counts[N_WCHARS] + n_chars)
    wlen = _grow(wlen, nw + n_tok)
    wflag = _grow(wflag, nw + n_tok)
    wstop = _grow(wstop, nw + n_tok)
    wterm = _grow(wterm, nw + n_tok)
    wpunct = _grow(wpunct, nw + n_tok)
    th = _grow(th, nw + n_tok)
    tpw = _grow(tpw, nw + n_tok)
    th64 = _grow(th64, nw + n_tok)
    tpw64 = _grow(tpw64, nw + n_tok)
    cols = (wlen, wflag, wstop, wterm, wpunct, th, tpw, th64, tpw64)
    first = counts[N_PIECES] - m  # the first new piece's id
    pt_off = _grow(pt_off, first + m + 1)
    pt_tok = _grow(pt_tok, counts[N_PTOK] + n_tok)
    while p_sent.shape[0] < first + m:
        p_sent = np.concatenate((p_sent, np.empty_like(p_sent)))
    ids = np.empty(max(n_tok, 1), dtype=np.int64)
    attr = np.empty(4, dtype=np.int64)
    q = 0  # the next word from Python
    qp = 0  # the next piece from Python
    for j in range(m):
        k = 0
        if python[j]:
            for _ in range(py_count[qp]):
                a, b = py_coff[q], py_coff[q + 1]
                _word_attr(py_chars, a, b, achr, stops, stop_len, attr)
                ids[k] = _word_id(py_chars, a, b, attr, wtab, wchars, wcoff, cols, counts)
                k += 1
                q += 1
            qp += 1
        else:
            a = new_s[j]
            for r in range(tok_off[j], tok_off[j + 1]):
                b = tok_ends[r]
                _word_attr(cps, a, b, achr, stops, stop_len, attr)
                ids[k] = _word_id(cps, a, b, attr, wtab, wchars, wcoff, cols, counts)
                k += 1
                a = b
        pid = first + j
        used = counts[N_PTOK]
        pt_tok[used : used + k] = ids[:k]
        pt_off[pid + 1] = used + k
        counts[N_PTOK] = used + k
        # spaCy's sentencizer: after a terminal, the next word that is not punctuation opens a sentence
        for state0 in range(2):
            state = state0
            add = 0
            for r in range(k):
                t = ids[r]
                if state and not wterm[t] and not wpunct[t]:
                    add += 1
                    state = 0
                elif wterm[t]:
                    state = 1
            p_sent[pid, 2 * state0] = add
            p_sent[pid, 2 * state0 + 1] = state
    words = (wtab, wchars, wcoff, wlen, wflag, wstop, wterm, wpunct, th, tpw, th64, tpw64)
    return words, (pt_off, pt_tok, p_sent)


__all__ = ["SPACE", "add_pieces", "scan"]
