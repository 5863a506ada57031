"""datatrove's words of ASCII whitespace pieces, compiled: :func:`compat_words._split` for a batch at once.

:func:`split_pieces` runs the prefix, suffix, infix and URL rules of :mod:`airflow_curation.core.compat_words`
(their ASCII form, :data:`compat_words._ASCII`) and its special cases (contractions, abbreviations, emoticons)
in one numba pass over many distinct pieces. The special cases are a finite set of ASCII strings
(:func:`_special_table` lists every one with the Python splitter's own answer), looked up exactly where the
Python splitter asks. A piece with a character past ASCII is split here where its shape decides its words
(:func:`compat_words.wide_piece_tokens`: letters and marks that no rule reads, with an edge mark or a period on
either side: most words of most languages, CJK runs with their punctuation) and goes to the Python splitter
otherwise. ``tests/preprocess/test_compat_split.py`` holds the two to the same words.
"""

from __future__ import annotations

import numpy as np

from airflow_curation.core import compat_chars as cc
from airflow_curation.core import compat_words as cw
from airflow_curation.core.jit import numba

njit = numba.njit

# per ASCII character: what the patterns test it for
_PU, _QU, _LO, _UP, _DI, _HOST = 1, 2, 4, 8, 16, 32


def _class_table() -> np.ndarray:
    t = np.zeros(128, dtype=np.uint8)
    for c in range(128):
        ch = chr(c)
        t[c] = (
            (_PU if ch in cw._PUNCT else 0)
            | (_QU if ch in cw._QUOTES else 0)
            | (_LO if "a" <= ch <= "z" else 0)
            | (_UP if "A" <= ch <= "Z" else 0)
            | (_DI if "0" <= ch <= "9" else 0)
            | (_HOST if ch.isalnum() or ch in "_-." else 0)
        )
    return t


CLASSES = _class_table()
_UNITS_ASCII = [u for u in cw._UNITS if u.isascii()]
UNITS = np.frombuffer("".join(_UNITS_ASCII).encode(), dtype=np.uint8).copy()
UNIT_OFF = np.cumsum([0] + [len(u) for u in _UNITS_ASCII]).astype(np.int64)


_FNV_OFFSET, _FNV_PRIME, _U64 = 14695981039346656037, 1099511628211, (1 << 64) - 1


def _fnv(codes: list[int]) -> int:
    h = _FNV_OFFSET
    for c in codes:
        h = ((h ^ c) * _FNV_PRIME) & _U64
    return h


def _hash_slots(keys: list[str]) -> np.ndarray:
    """An open-addressing FNV-1a table over ``keys`` (slot -> key index + 1, 0 empty), at most a quarter full,
    probed linearly as :func:`_special` probes it."""
    slots = np.zeros(1 << max(10, (4 * len(keys)).bit_length()), dtype=np.int64)
    mask = len(slots) - 1
    for i, key in enumerate(keys):
        slot = _fnv(list(key.encode())) & mask
        while slots[slot]:
            slot = (slot + 1) & mask
        slots[slot] = i + 1
    return slots


def _word_ends(splits: list[tuple[str, ...]], most: int) -> tuple[np.ndarray, np.ndarray]:
    """Per split, its words' count and their ends in the joined string (``[len(splits), most]``)."""
    counts = np.array([len(words) for words in splits], dtype=np.int64)
    ends = np.zeros((len(splits), most), dtype=np.int64)
    for i, words in enumerate(splits):
        ends[i, : len(words)] = np.cumsum([len(t) for t in words])
    return counts, ends


def _special_table() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every ASCII string :func:`compat_words._special` answers, with its answer, in a hash table.

    The answers are finite: a string of ``_WHOLE`` or ``_SPLIT_WHOLE`` (chains of three words included), or a
    contraction (a negation base with ``n't`` or ``nt``, a pronoun with its clitic, with or without the
    apostrophe) in lower, upper or title case, of which ``_special`` accepts lower and title case. Each
    candidate is asked of ``_special`` itself and kept with what it returned, so the table cannot disagree with
    it on any string it holds; a string it does not hold is none of these forms, so ``_special`` answers None.

    :returns: the strings' bytes, their offsets, per string its words' count and ends (``[E, 3]``, as
        :func:`_pattern_table` gives a special case's), and the FNV-1a hash table (slot -> string index + 1,
        0 empty).
    """
    entries = []
    for w in sorted(w for w in cw.special_strings() if w.isascii()):
        got = cw._special(w)
        if got is None:
            continue
        assert "".join(got) == w and len(got) <= 3, (w, got)
        entries.append((w, got))
    data = np.frombuffer("".join(w for w, _ in entries).encode(), dtype=np.uint8).copy()
    off = np.cumsum([0] + [len(w) for w, _ in entries]).astype(np.int64)
    n_words, word_end = _word_ends([got for _, got in entries], 3)
    return data, off, n_words, word_end, _hash_slots([w for w, _ in entries])


def _pattern_table() -> tuple[np.ndarray, ...]:
    """The ASCII runs of :func:`compat_words.special_patterns` (a special case as its affix rules split it) in a
    hash table keyed by the run's text: the strings' bytes, their offsets, per string its words' count and ends
    in the run (``[E, longest]``), the special case's words' count and ends (``[E, 3]``), and the slots."""
    entries = [(run, sp) for run, sp in cw.special_patterns().items() if "".join(run).isascii()]
    k = max(len(run) for run, _ in entries)
    data = np.frombuffer("".join("".join(run) for run, _ in entries).encode(), dtype=np.uint8).copy()
    off = np.cumsum([0] + [len("".join(run)) for run, _ in entries]).astype(np.int64)
    n_run, run_end = _word_ends([run for run, _ in entries], k)
    n_sp, sp_end = _word_ends([sp for _, sp in entries], 3)
    return data, off, n_run, run_end, n_sp, sp_end, _hash_slots(["".join(run) for run, _ in entries])


SPECIALS = (*_special_table(), *_pattern_table())


@njit(cache=True, inline="always")
def _is(cls: np.ndarray, s: np.ndarray, i: int, flag: int) -> bool:
    return (cls[s[i]] & flag) != 0


@njit(cache=True)
def _prefix(s: np.ndarray, a: int, b: int, cls: np.ndarray) -> int:
    """Length of the prefix match at ``a`` in ``s[a:b]``: the first alternative of ``_ASCII.prefix`` that matches."""
    c = s[a]
    if c == 37 or c == 61:  # % =
        return 1
    if c == 43:  # + not before a digit
        return 1 if a + 1 >= b or not _is(cls, s, a + 1, _DI) else 0
    if _is(cls, s, a, _PU):
        return 1
    if c == 46:  # .. and more
        j = a
        while j < b and s[j] == 46:
            j += 1
        if j - a >= 2:
            return j - a
    if _is(cls, s, a, _QU):
        return 1
    if c == 85 and a + 2 < b and s[a + 1] == 83 and s[a + 2] == 36:  # US$
        return 3
    if (c == 67 or c == 65) and a + 1 < b and s[a + 1] == 36:  # C$ A$
        return 2
    if c == 36:  # $
        return 1
    return 0


@njit(cache=True)
def _suffix(s: np.ndarray, a: int, b: int, cls: np.ndarray, units: np.ndarray, unit_off: np.ndarray) -> int:
    """Length of ``_ASCII.suffix``'s leftmost match in ``s[a:b]`` (all its alternatives end at the end: the longest).

    Lookbehinds see ``s[a:b]`` only, as on the slice the Python splitter searches.
    """
    best = 0
    last = s[b - 1]
    if _is(cls, s, b - 1, _PU) or _is(cls, s, b - 1, _QU):
        best = 1
    if last == 46:
        j = b
        while j > a and s[j - 1] == 46:
            j -= 1
        if b - j >= 2:
            best = max(best, b - j)
        elif b - 1 > a:
            p = b - 2
            if cls[s[p]] & (_DI | _LO | _PU | _QU) or s[p] == 37 or s[p] == 45 or s[p] == 43 or s[p] == 124:
                best = max(best, 1)
            elif p - 1 >= a and _is(cls, s, p, _UP) and _is(cls, s, p - 1, _UP):
                best = max(best, 1)
    if b - a >= 2 and s[b - 2] == 39 and (last == 115 or last == 83):  # 's 'S
        best = max(best, 2)
    if last == 43 and b - 1 > a and _is(cls, s, b - 2, _DI):  # digit +
        best = max(best, 1)
    # after a digit: currency, units
    for tail in range(1, 5):
        p = b - tail
        if p - 1 < a:
            break
        if not _is(cls, s, p - 1, _DI):
            continue
        if tail == 1 and last == 36:
            best = max(best, 1)
        if tail == 2 and (s[p] == 67 or s[p] == 65) and last == 36:
            best = max(best, 2)
        if tail == 3 and s[p] == 85 and s[p + 1] == 83 and last == 36:
            best = max(best, 3)
        for u in range(len(unit_off) - 1):
            if unit_off[u + 1] - unit_off[u] != tail:
                continue
            same = True
            for k in range(tail):
                if s[p + k] != units[unit_off[u] + k]:
                    same = False
                    break
            if same:
                best = max(best, tail)
    return best


@njit(cache=True)
def _octet(s: np.ndarray, a: int, b: int, lead_zero: bool, hi: int) -> bool:
    """``s[a:b]`` (1-3 digits) is one of ``_IPV4``'s numbers: one or two digits (a leading zero only where
    ``lead_zero``: the middle numbers), or three from 100 up to ``hi``."""
    if b - a < 3:
        return lead_zero or s[a] != 48
    v = 100 * (s[a] - 48) + 10 * (s[a + 1] - 48) + (s[a + 2] - 48)
    return 100 <= v <= hi


@njit(cache=True)
def _ipv4(s: np.ndarray, a: int, b: int, s1: int, s2: int, s3: int) -> bool:
    """Four dotted groups of 1-3 digits, the second to fourth starting at ``s1``, ``s2`` and ``s3``, are
    ``_IPV4``'s address: the first number 1-223, the middle ones 0-255, the last 1-254, outside the networks it
    leaves out."""
    e0, e1, e2 = s1 - 1, s2 - 1, s3 - 1
    if not (_octet(s, a, e0, False, 223) and _octet(s, s1, e1, True, 255)):
        return False
    if not (_octet(s, s2, e2, True, 255) and _octet(s, s3, b, False, 254)):
        return False
    n0, n1 = 0, 0
    for i in range(a, e0):
        n0 = 10 * n0 + s[i] - 48
    for i in range(s1, e1):
        n1 = 10 * n1 + s[i] - 48
    l0, l1 = e0 - a, e1 - s1
    # the networks left out, as the numbers are written: "10.", "127.", "169.254.", "192.168.", "172.16." to "172.31."
    if (l0 == 2 and n0 == 10) or (l0 == 3 and n0 == 127):
        return False
    if l0 == 3 and l1 == 3 and ((n0 == 169 and n1 == 254) or (n0 == 192 and n1 == 168)):
        return False
    return not (l0 == 3 and n0 == 172 and l1 == 2 and 16 <= n1 <= 31)


@njit(cache=True)
def _host(s: np.ndarray, a: int, b: int, cls: np.ndarray) -> bool:
    """``s[a:b]`` is an IPv4 address or a dotted host ending in 2-63 lower-case letters (``_ASCII.url``'s host)."""
    if a >= b:
        return False
    # IPv4: four groups of 1-3 digits, each as _IPV4 allows it, outside the networks it leaves out
    parts, run, ok = 0, 0, True
    s1, s2, s3 = 0, 0, 0  # where the second to fourth groups start
    for i in range(a, b):
        if s[i] == 46:
            if run < 1 or run > 3 or parts == 3:
                ok = False
                break
            parts += 1
            if parts == 1:
                s1 = i + 1
            elif parts == 2:
                s2 = i + 1
            else:
                s3 = i + 1
            run = 0
        elif _is(cls, s, i, _DI):
            run += 1
        else:
            ok = False
            break
    if ok and parts == 3 and 1 <= run <= 3:
        return _ipv4(s, a, b, s1, s2, s3)
    # labels of 1-64 characters: alphanumeric at both ends, word characters or '-' between, each followed by '.'
    last_dot = -1
    for i in range(b - 1, a - 1, -1):
        if s[i] == 46:
            last_dot = i
            break
    if last_dot < 0:
        return False
    tld = b - last_dot - 1
    if tld < 2 or tld > 63:
        return False
    for i in range(last_dot + 1, b):
        if not _is(cls, s, i, _LO):
            return False
    start = a
    for i in range(a, last_dot + 1):
        if s[i] == 46:
            if i == start or i - start > 64:
                return False
            if not (cls[s[start]] & (_LO | _UP | _DI)) or not (cls[s[i - 1]] & (_LO | _UP | _DI)):
                return False
            start = i + 1
    return True


@njit(cache=True)
def _after_host(s: np.ndarray, h: int, b: int) -> bool:
    """``s[h:b]`` is an optional ``:port`` (2-5 digits) and an optional path starting with / ? or #."""
    if h == b:
        return True
    if s[h] == 58:
        j = h + 1
        while j < b and 48 <= s[j] <= 57:
            j += 1
        if j - h - 1 < 2 or j - h - 1 > 5:
            return False
        h = j
        if h == b:
            return True
    return s[h] == 47 or s[h] == 63 or s[h] == 35


@njit(cache=True)
def _url(s: np.ndarray, a: int, b: int, cls: np.ndarray) -> bool:
    """``_ASCII.url.fullmatch(s[a:b])``: some optional scheme, optional user, then a host and what may follow it."""
    # where the user part may start: 0, or after each "scheme://" (2+ letters, digits, "_", "+", "-" or ".")
    for z in range(a - 1, b):
        if z >= a:
            if not (z + 2 < b and s[z] == 58 and s[z + 1] == 47 and s[z + 2] == 47) or z - a < 2:
                continue
            good = True
            for i in range(a, z):
                c = s[i]
                if not (cls[c] & (_LO | _UP | _DI) or c == 95 or c == 43 or c == 46 or c == 45):
                    good = False
                    break
            if not good:
                continue
            u0 = z + 3
        else:
            u0 = a
        # where the host may start: u0, or after each '@' ending a user of one character or more (any)
        for at in range(u0 - 1, b):
            if at >= u0:
                if s[at] != 64 or at == u0:
                    continue
                h0 = at + 1
            else:
                h0 = u0
            h = h0
            while h < b and _is(cls, s, h, _HOST):
                h += 1
            if _host(s, h0, h, cls) and _after_host(s, h, b):
                return True
    return False


@njit(cache=True)
def _infix(s: np.ndarray, i: int, a: int, b: int, cls: np.ndarray) -> int:
    """Length of ``_ASCII.infix``'s match at ``i`` in ``s[a:b]`` (0: none there)."""
    c = s[i]
    if c == 46 and i + 1 < b and s[i + 1] == 46:
        j = i
        while j < b and s[j] == 46:
            j += 1
        return j - i
    prev = s[i - 1] if i > a else 0
    nxt = s[i + 1] if i + 1 < b else 0
    prev_digit = i > a and _is(cls, s, i - 1, _DI)
    prev_letter = i > a and (cls[prev] & (_LO | _UP)) != 0
    if (
        (c == 43 or c == 45 or c == 42 or c == 94)
        and prev_digit
        and i + 1 < b
        and (_is(cls, s, i + 1, _DI) or nxt == 45)
    ):
        return 1
    if c == 46 and i > a and i + 1 < b and cls[prev] & (_LO | _QU) and cls[nxt] & (_UP | _QU):
        return 1
    if c == 44 and prev_letter and i + 1 < b and cls[nxt] & (_LO | _UP):
        return 1
    if (prev_letter or prev_digit) and (c == 45 or c == 126):
        if c == 45:
            for n in (3, 2):
                if i + n < b:
                    same = True
                    for k in range(n):
                        if s[i + k] != 45:
                            same = False
                    if same and cls[s[i + n]] & (_LO | _UP):
                        return n
        if i + 1 < b and cls[nxt] & (_LO | _UP):
            return 1
    if (prev_letter or prev_digit) and (c == 58 or c == 60 or c == 62 or c == 61 or c == 47):
        if i + 1 < b and cls[nxt] & (_LO | _UP):
            return 1
    return 0


@njit(cache=True)
def _special(s: np.ndarray, a: int, b: int, sp: np.ndarray, sp_off: np.ndarray, slots: np.ndarray, longest: int) -> int:
    """The index of ``s[a:b]`` in the special-case table (:func:`_special_table`), or -1.

    ``longest``: the table's longest string. A longer ``s[a:b]`` is none, unhashed: the edge-stripping loop
    asks once per character it strips, so hashing the rest each time was O(n^2) on a long piece of marks.
    """
    if a >= b or b - a > longest:
        return -1
    h = np.uint64(_FNV_OFFSET)
    for i in range(a, b):
        h = (h ^ np.uint64(s[i])) * np.uint64(_FNV_PRIME)
    mask = np.uint64(slots.shape[0] - 1)
    slot = h & mask
    while slots[slot]:
        e = slots[slot] - 1
        if sp_off[e + 1] - sp_off[e] == b - a:
            same = True
            for k in range(b - a):
                if s[a + k] != sp[sp_off[e] + k]:
                    same = False
                    break
            if same:
                return e
        slot = (slot + np.uint64(1)) & mask
    return -1


@njit(cache=True)
def _wide_tokens(s: np.ndarray, a: int, b: int, ucls: np.ndarray, ends: np.ndarray, n: int) -> int:
    """:func:`compat_words.wide_piece_tokens` of the piece ``s[a:b]`` past ASCII: its words' ends written to
    ``ends`` from ``n``, and the next free index returned; -1 (nothing written) where its shape does not decide
    them and the Python splitter does."""
    lo, hi = a, b
    if hi - lo >= 2 and ucls[s[lo]] & cc.A_EDGE:
        lo += 1
    period = False
    if hi - lo >= 2 and (ucls[s[hi - 1]] & cc.A_EDGE or s[hi - 1] == 46):
        period = s[hi - 1] == 46
        hi -= 1
    if not (ucls[s[lo]] & cc.A_CORE and ucls[s[hi - 1]] & cc.A_CORE):
        return -1
    wide = False
    for i in range(lo, hi):
        f = ucls[s[i]]
        if not f & (cc.A_CORE | cc.A_INNER):
            return -1
        wide = wide or (f & cc.A_LOWER_WIDE) != 0
    if not wide:
        return -1
    if period:
        if hi - lo < 2:
            return -1
        last = ucls[s[hi - 1]]
        if not (last & cc.A_SP_LOWER or (last & cc.A_SP_UPPER and ucls[s[hi - 2]] & cc.A_SP_UPPER)):
            hi += 1  # the period stays in the word
    if lo > a:
        ends[n] = lo
        n += 1
    ends[n] = hi
    n += 1
    if hi < b:
        ends[n] = b
        n += 1
    return n


@njit(cache=True)
def _split_all(
    s: np.ndarray,
    starts: np.ndarray,
    stops: np.ndarray,
    cls: np.ndarray,
    ucls: np.ndarray,
    units: np.ndarray,
    unit_off: np.ndarray,
    sp: np.ndarray,
    sp_off: np.ndarray,
    sp_n: np.ndarray,
    sp_end: np.ndarray,
    slots: np.ndarray,
    pt: np.ndarray,
    pt_off: np.ndarray,
    pt_n_run: np.ndarray,
    pt_run_end: np.ndarray,
    pt_n_sp: np.ndarray,
    pt_sp_end: np.ndarray,
    pt_slots: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token ends (absolute offsets into ``s``), the first token per piece (``tok_off``, one past the last)
    and which pieces are left to the Python splitter (no tokens here): a piece with a character past ASCII that
    :func:`_wide_tokens` does not decide. Piece ``p`` is ``s[starts[p]:stops[p]]``; the steps are
    :func:`compat_words._split`'s, in its order.

    :param cls: per ASCII character, the patterns' classes (:data:`CLASSES`).
    :param ucls: per code point, ``compat_chars.A_*`` flags, set for every character of a piece past ASCII.
    """
    most = 0
    widest = 0
    longest = 0
    for e in range(len(sp_off) - 1):
        longest = max(longest, sp_off[e + 1] - sp_off[e])
    pt_longest = 0  # the longest run's characters
    for e in range(len(pt_off) - 1):
        pt_longest = max(pt_longest, pt_off[e + 1] - pt_off[e])
    k_most = pt_run_end.shape[1]  # the most words of a run
    for p in range(len(starts)):
        most += stops[p] - starts[p]
        widest = max(widest, stops[p] - starts[p])
    ends = np.empty(most, dtype=np.int64)
    tok_off = np.zeros(len(starts) + 1, dtype=np.int64)
    sfx = np.empty(widest, dtype=np.int64)  # suffix starts of the current piece, outermost first
    buf = np.empty(widest, dtype=np.int64)  # the current piece's token ends before special cases merge
    run_a = np.empty(widest * k_most, dtype=np.int64)  # runs of the piece's words that spell a special case
    run_b = np.empty(widest * k_most, dtype=np.int64)
    run_e = np.empty(widest * k_most, dtype=np.int64)
    taken = np.empty(widest, dtype=np.int64)
    seen = np.empty(widest, dtype=np.bool_)
    python = np.zeros(len(starts), dtype=np.bool_)
    n = 0
    for p in range(len(starts)):
        a, b = starts[p], stops[p]
        wide = False
        for i in range(a, b):
            if s[i] > 127:
                wide = True
                break
        if wide:
            got = _wide_tokens(s, a, b, ucls, ends, n)
            if got < 0:
                python[p] = True
            else:
                n = got
            tok_off[p + 1] = n
            continue
        nt = 0
        ns = 0
        # e: the special case s[a:b] is (-1: none), looked up once per (a, b); a URL is matched only once the
        # edges are off
        e = _special(s, a, b, sp, sp_off, slots, longest)
        while a < b and e < 0:
            last = b - a
            pre = _prefix(s, a, b, cls)
            if pre and a + pre < b:
                e = _special(s, a + pre, b, sp, sp_off, slots, longest)
                if e >= 0:
                    buf[nt] = a + pre
                    nt += 1
                    a = a + pre
                    break
            suf = _suffix(s, a + pre, b, cls, units, unit_off) if a + pre < b else 0
            if suf and b - suf > a:
                e = _special(s, a, b - suf, sp, sp_off, slots, longest)
                if e >= 0:
                    sfx[ns] = b - suf
                    ns += 1
                    b = b - suf
                    break
            if pre and suf and pre + suf <= b - a:
                buf[nt] = a + pre
                nt += 1
                sfx[ns] = b - suf
                ns += 1
                a, b = a + pre, b - suf
            elif pre:
                buf[nt] = a + pre
                nt += 1
                a = a + pre
            elif suf:
                sfx[ns] = b - suf
                ns += 1
                b = b - suf
            if b - a == last:
                break
            e = _special(s, a, b, sp, sp_off, slots, longest)
        if a < b:
            if e >= 0:
                for j in range(sp_n[e]):
                    buf[nt] = a + sp_end[e, j]
                    nt += 1
            elif _url(s, a, b, cls):
                buf[nt] = b
                nt += 1
            else:
                i = a
                start = a
                while i < b:
                    m = _infix(s, i, a, b, cls)
                    if m:
                        if i > start:
                            buf[nt] = i
                            nt += 1
                        buf[nt] = i + m
                        nt += 1
                        i += m
                        start = i
                    else:
                        i += 1
                if start < b:
                    buf[nt] = b
                    nt += 1
        for k in range(ns - 1, -1, -1):
            buf[nt] = stops[p] if k == 0 else sfx[k - 1]
            nt += 1
        # runs of words that spell a special case as its affix rules split it become its words, the longest
        # first, then the leftmost; a run whose first or last word another run looked at holds is not taken
        # (compat_words._match_specials)
        nr = 0
        if nt >= 2:
            for i in range(nt):
                head = starts[p] if i == 0 else buf[i - 1]
                for k in range(1, min(k_most, nt - i) + 1):
                    e = _special(s, head, buf[i + k - 1], pt, pt_off, pt_slots, pt_longest)
                    if e < 0 or pt_n_run[e] != k:
                        continue
                    same = True
                    for j in range(k - 1):
                        if buf[i + j] - head != pt_run_end[e, j]:
                            same = False
                            break
                    if same:
                        run_a[nr] = i
                        run_b[nr] = i + k
                        run_e[nr] = e
                        nr += 1
        if nr:
            # insertion sort: longer runs first, then the leftmost
            for r in range(1, nr):
                ra, rb, re_ = run_a[r], run_b[r], run_e[r]
                q = r - 1
                while q >= 0 and (run_b[q] - run_a[q] < rb - ra or (run_b[q] - run_a[q] == rb - ra and run_a[q] > ra)):
                    run_a[q + 1], run_b[q + 1], run_e[q + 1] = run_a[q], run_b[q], run_e[q]
                    q -= 1
                run_a[q + 1], run_b[q + 1], run_e[q + 1] = ra, rb, re_
            seen[:nt] = False
            taken[:nt] = -1
            for r in range(nr):
                if not seen[run_a[r]] and not seen[run_b[r] - 1]:
                    taken[run_a[r]] = r
                for j in range(run_a[r], run_b[r]):
                    seen[j] = True
        i = 0
        while i < nt:
            r = taken[i] if nr else -1
            if r >= 0:
                head = starts[p] if i == 0 else buf[i - 1]
                e = run_e[r]
                for j in range(pt_n_sp[e]):
                    ends[n] = head + pt_sp_end[e, j]
                    n += 1
                i = run_b[r]
            else:
                ends[n] = buf[i]
                n += 1
                i += 1
        tok_off[p + 1] = n
    return ends[:n], tok_off, python


def split_pieces(pieces: list[str]) -> list[tuple[str, ...]]:
    """datatrove's words of each piece (the compiled path where it decides, the Python splitter elsewhere).

    :param pieces: whitespace pieces (no whitespace inside).
    """
    if not pieces:
        return []
    data = np.frombuffer("".join(pieces).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    off = np.zeros(len(pieces) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in pieces], out=off[1:])
    ucls = cc.cover(data, off[:-1], off[1:])
    ends, tok_off, python = _split_all(data, off[:-1], off[1:], CLASSES, ucls, UNITS, UNIT_OFF, *SPECIALS)
    rel = (ends - np.repeat(off[:-1], np.diff(tok_off))).tolist()  # token ends within their piece
    bounds = tok_off.tolist()
    out = []
    for i, (p, py) in enumerate(zip(pieces, python.tolist(), strict=True)):
        e = rel[bounds[i] : bounds[i + 1]]
        if py:
            out.append(cw._piece_tokens(p))
        else:
            out.append((p,) if len(e) == 1 else tuple(p[a:b] for a, b in zip([0, *e[:-1]], e, strict=True)))
    return out
