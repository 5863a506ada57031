"""The compiled pass of the reference-compatible signals (:mod:`airflow_curation.core.compat`).

Python does what only Python states exactly: ``str.split()`` of each document into whitespace pieces, and
each *new* piece's datatrove words (:func:`~airflow_curation.core.compat_words.words`), kept in a table that
grows across batches (a piece is split once per process). This kernel gets the batch's code points (UTF-32,
so a character is an index), the piece ids in order and the tables, and computes every ``dt_*`` value of a
document in one call: the line rules over code points, the word counts and n-gram repetition over the
pieces' words. Equality of lines, paragraphs and top n-grams is exact (hash, then a compare); duplicated
5..10-grams are keyed as datatrove keys them, the words joined without spaces, by a polynomial hash modulo
the Mersenne prime 2^61-1 of their characters (a collision needs two different strings with one hash).
The n-gram passes look up only where an n-gram can repeat: a top 3- or 4-gram where the shorter n-grams at i
and i + 1 were counted twice or more; a duplicated n-gram where a first, cheaper pass (its hash modulo 2^64
in saturating byte counters) saw its key twice or more. Both only skip what cannot change a result.

Documents the kernel does not state exactly fall back to the pure-Python definitions for the C4 group only
(``C4_FALLBACK``): a line with a citation mark (``[1]``, ``[edit]``; datatrove removes it before counting
sentences, which changes the words) or a capital dotted I (whose lower case is two characters).
"""

from __future__ import annotations

import numpy as np

from airflow_curation.core.jit import numba

njit = numba.njit

# per code point flags (class table)
SPACE, BREAK, DIGIT, TERM = 1, 2, 4, 8
# per token flags
T_PUNCT, T_ALPHA = 1, 2
MERSENNE = (1 << 61) - 1
BASE = 0x1F3D5B79A3C2E1  # < 2^61-1, odd

# output columns, in order
COLUMNS = (
    "n_tokens",
    "dt_n_words",
    "content_chars",
    "n_alpha",
    "dt_n_stop_words",
    "hashes",
    "ellipses",
    "n_lines",
    "bullet_lines",
    "ellipsis_lines",
    "dt_dup_para_frac",
    "dt_dup_para_char_frac",
    "dt_dup_line_frac",
    "dt_dup_line_char_frac",
    "dt_top_2gram_char_frac",
    "dt_top_3gram_char_frac",
    "dt_top_4gram_char_frac",
    "dt_dup_5gram_char_frac",
    "dt_dup_6gram_char_frac",
    "dt_dup_7gram_char_frac",
    "dt_dup_8gram_char_frac",
    "dt_dup_9gram_char_frac",
    "dt_dup_10gram_char_frac",
    "c4_lorem",
    "c4_curly",
    "c4_sentences",
    "c4nt_lorem",
    "c4nt_curly",
    "c4nt_sentences",
    "c4_fallback",
    "fw_lines",
    "fw_punct",
    "fw_short",
    "fw_dup_chars",
    "newlines",
    "n_chars",
)
COL = {name: i for i, name in enumerate(COLUMNS)}
NCOL = len(COLUMNS)

# C4's patterns, in code points: what a lower-cased kept line is searched for
_C4_PATTERNS = ("lorem ipsum", "javascript", "terms of use", "privacy policy", "cookie policy", "uses cookies")
_C4_PATTERNS += ("use of cookies", "use cookies")
PATTERNS = np.zeros((len(_C4_PATTERNS), max(map(len, _C4_PATTERNS))), dtype=np.uint32)
CITES = np.zeros((2, 17), dtype=np.uint32)  # datatrove's citation marks without digits
CITES[0, :6] = [ord(c) for c in "[edit]"]
CITES[1, :17] = [ord(c) for c in "[citation needed]"]
PATTERN_LEN = np.array([len(p) for p in _C4_PATTERNS], dtype=np.int64)
PATTERN_PAIRS = np.zeros((128, 128), dtype=np.uint8)  # per two ASCII characters: the patterns starting so, as bits
for _i, _p in enumerate(_C4_PATTERNS):
    PATTERNS[_i, : len(_p)] = [ord(c) for c in _p]
    PATTERN_PAIRS[ord(_p[0]), ord(_p[1])] |= 1 << _i


def class_table(terminals: frozenset[str]) -> np.ndarray:
    """Flags per code point: ``str.isspace``, a ``splitlines`` boundary, a decimal digit (``re``'s ``\\d``),
    a sentence terminal of ``terminals``."""
    out = np.zeros(0x110000, dtype=np.uint8)
    for c in range(0x3001):  # every space and line boundary is below U+3001
        ch = chr(c)
        if ch.isspace():
            out[c] |= SPACE
        if c != 32 and len(("a" + ch + "b").splitlines()) == 2:
            out[c] |= BREAK
    # str.isdecimal of every code point through numpy's string ufunc (the same Unicode database), ~0.03 s where
    # a generator over chr() costs ~0.1 s of each process's start
    chars = np.arange(0x110000, dtype=np.uint32).view("<U1")
    out |= np.char.isdecimal(chars) * np.uint8(DIGIT)
    out[[ord(t) for t in terminals]] |= TERM
    return out


@njit(cache=True, inline="always")
def _mix(h, x):
    h = (h * np.uint64(0x9E3779B97F4A7C15)) ^ np.uint64(x)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(31)
    if h == 0:
        h = np.uint64(1)
    return h


FNV_OFFSET, FNV_PRIME = 0xCBF29CE484222325, 0x100000001B3


@njit(cache=True, inline="always")
def span_hash(arr, s, e):
    """A hash of ``arr[s:e]``, never 0: FNV-1a over pairs of code points (one multiply per two), then one
    ``_mix`` with the length. Tables compare the items on a hit, so a collision costs a compare, never a wrong
    answer."""
    h = np.uint64(FNV_OFFSET)
    k = s
    while k + 1 < e:  # two code points (< 2^21 each) a step: half the dependent multiplies
        h = (h ^ (np.uint64(arr[k]) | (np.uint64(arr[k + 1]) << np.uint64(32)))) * np.uint64(FNV_PRIME)
        k += 2
    if k < e:
        h = (h ^ np.uint64(arr[k])) * np.uint64(FNV_PRIME)
    return _mix(h, e - s + 1)


@njit(cache=True, inline="always")
def spans_equal(a, s, b, t, n):
    """``a[s:s + n] == b[t:t + n]``, compared item by item."""
    for k in range(n):
        if a[s + k] != b[t + k]:
            return False
    return True


@njit(cache=True, inline="always")
def _mulmod(a, b):
    """a * b mod 2^61-1 for a, b < 2^61-1, without 128-bit integers."""
    m31 = np.uint64((1 << 31) - 1)
    m30 = np.uint64((1 << 30) - 1)
    au = a >> np.uint64(31)
    ad = a & m31
    bu = b >> np.uint64(31)
    bd = b & m31
    mid = ad * bu + au * bd
    x = (au * bu << np.uint64(1)) + (mid >> np.uint64(30)) + ((mid & m30) << np.uint64(31)) + ad * bd
    p = np.uint64(MERSENNE)
    x = (x >> np.uint64(61)) + (x & p)
    if x >= p:
        x -= p
    return x


@njit(cache=True, inline="always")
def _size(n):
    size = 16
    while size < 2 * n:
        size *= 2
    return size


@njit(cache=True)
def _dup_spans(cps, starts, ends, n):
    """(spans equal to an earlier one, their characters): exact, over code point ranges."""
    if n < 2:
        return 0, 0
    size = _size(n)
    mask = np.uint64(size - 1)
    keys = np.zeros(size, dtype=np.uint64)
    first = np.empty(size, dtype=np.int64)
    dup = 0
    chars = 0
    for i in range(n):
        s, e = starts[i], ends[i]
        h = span_hash(cps, s, e)
        slot = h & mask
        found = False
        while keys[slot] != 0:
            if keys[slot] == h:
                j = first[slot]
                s2, e2 = starts[j], ends[j]
                if e2 - s2 == e - s and spans_equal(cps, s, cps, s2, e - s):
                    found = True
                    break
            slot = (slot + np.uint64(1)) & mask
        if found:
            dup += 1
            chars += e - s
        else:
            keys[slot] = h
            first[slot] = i
    return dup, chars


ID_BASE = 0x100000001B3  # the polynomial base of the word-id prefix hashes (mod 2^64)
BASE64 = ID_BASE  # the words' polynomial hash modulo 2^64 (the duplicated n-grams' counting pass)


@njit(cache=True)
def _top_ngram_chars(toks, tlen, hid, nt, n, cand, slots, keys, tab, gen):
    """(characters of the most frequent n-gram with its joining spaces) * its count; ties to the first seen.
    Only the positions ``cand`` marks are counted (every occurrence of a repeated n-gram must be one: an n-gram
    repeats only where the (n-1)-grams at i and i + 1 do); an unmarked one occurs once. Each counted
    position's slot goes to ``slots``. ``hid``: prefix hashes of the word ids; ``keys``, ``tab`` (stamp, first,
    count): scratch, ``gen`` new."""
    m = nt - n + 1
    if m <= 0:
        return 0
    mask = np.uint64(_size(m) - 1)
    stamp, first, count = tab[0], tab[1], tab[2]
    pw = np.uint64(1)
    for _ in range(n):
        pw *= np.uint64(ID_BASE)
    best_count = 0
    best_first = 0
    for i in range(m):
        if not cand[i]:
            continue
        h = _mix(hid[i + n] - hid[i] * pw, n)
        slot = h & mask
        while stamp[slot] == gen:
            if keys[slot] == h and spans_equal(toks, i, toks, first[slot], n):
                break
            slot = (slot + np.uint64(1)) & mask
        if stamp[slot] != gen:
            stamp[slot] = gen
            keys[slot] = h
            first[slot] = i
            count[slot] = 0
        slots[i] = slot
        c = count[slot] + 1
        count[slot] = c
        f = first[slot]
        if c > best_count or (c == best_count and f < best_first):
            best_count = c
            best_first = f
    if best_count < 2:  # every n-gram once: the first one
        best_count = 1
        best_first = 0
    chars = n - 1
    for k in range(n):
        chars += tlen[toks[best_first + k]]
    return chars * best_count


@njit(cache=True)
def _next_candidates(cand, slots, count, m):
    """Where the (n+1)-gram can repeat: the n-grams at i and i + 1 both counted more than once (``m``: the
    number of n-grams)."""
    rep = False
    for i in range(m):
        r = cand[i] and count[slots[i]] > 1
        if i > 0:
            cand[i - 1] = rep and r
        rep = r
    if m > 0:
        cand[m - 1] = False


@njit(cache=True)
def _greedy_dup_chars(cum, hp, pows, hq, pows64, nt, n, seen, keys, tab, gen):
    """datatrove's duplicated n-gram characters: left to right, a repeat (its words joined without spaces)
    counts its characters and skips its n words; a skipped position is never remembered. ``hp``: prefix
    hashes (mod 2^61-1) of the joined words, ``cum``: their prefix character counts, ``pows``: BASE^length;
    ``hq``, ``pows64``: the same modulo 2^64 with ``BASE64``.

    A first pass counts every n-gram by its hash modulo 2^64 (one multiply) in saturating byte counters
    (``seen``, no keys kept); the walk passes a position whose counter says once without computing its key
    or a lookup: its n-gram can neither repeat nor be repeated (two n-grams sharing a counter cost a lookup
    more, never one fewer)."""
    m = nt - n + 1
    if m <= 1:
        return 0
    size = min(_size(4 * m), seen.shape[0])
    bits = 4
    while (1 << bits) < size:
        bits += 1
    shift = np.uint64(64 - bits)  # a counter is the top bits of the key times an odd constant
    seen[:size] = 0
    at = np.empty(m, dtype=np.int64)
    for i in range(m):
        h = hq[i + n] - hq[i] * pows64[cum[i + n] - cum[i]]
        c = (h * np.uint64(0x9E3779B97F4A7C15)) >> shift
        at[i] = c
        seen[c] += seen[c] < 2
    mask = np.uint64(_size(m) - 1)
    stamp, klen = tab[0], tab[1]
    p = np.uint64(MERSENNE)
    chars = 0
    i = 0
    while i < m:
        if seen[at[i]] < 2:
            i += 1
            continue
        ln = cum[i + n] - cum[i]
        h = hp[i + n] + p - _mulmod(hp[i], pows[ln])
        if h >= p:
            h -= p
        key = h + np.uint64(1)
        slot = _mix(key, ln) & mask
        while stamp[slot] == gen and not (keys[slot] == key and klen[slot] == ln):
            slot = (slot + np.uint64(1)) & mask
        if stamp[slot] == gen:
            chars += ln
            i += n
        else:
            stamp[slot] = gen
            keys[slot] = key
            klen[slot] = ln
            i += 1
    return chars


@njit(cache=True)
def _repetition(toks, tlen, th, tpw, th64, tpw64, nt, size, keys, tab, gen, row):
    """top_{2,3,4}gram and dup_{5..10}gram character fractions into row[14:23]; returns the next ``gen``."""
    hid = np.empty(nt + 1, dtype=np.uint64)
    hp = np.empty(nt + 1, dtype=np.uint64)
    cum = np.empty(nt + 1, dtype=np.int64)
    hq = np.empty(nt + 1, dtype=np.uint64)
    hid[0] = 0
    hp[0] = 0
    hq[0] = 0
    cum[0] = 0
    p = np.uint64(MERSENNE)
    for i in range(nt):
        t = toks[i]
        hid[i + 1] = hid[i] * np.uint64(ID_BASE) + np.uint64(t + 1)
        h = _mulmod(hp[i], tpw[t]) + th[t]
        hp[i + 1] = h - p if h >= p else h
        hq[i + 1] = hq[i] * tpw64[t] + th64[t]
        cum[i + 1] = cum[i] + tlen[t]
    longest = 0
    for i in range(nt):
        longest = max(longest, cum[min(i + 10, nt)] - cum[i])
    pows = np.empty(longest + 1, dtype=np.uint64)
    pows64 = np.empty(longest + 1, dtype=np.uint64)
    pows[0] = 1
    pows64[0] = 1
    for i in range(longest):
        pows[i + 1] = _mulmod(pows[i], np.uint64(BASE))
        pows64[i + 1] = pows64[i] * np.uint64(BASE64)
    # top n-grams: every 2-gram counted, then only where the shorter n-grams at i and i + 1 repeat
    cand = np.ones(max(nt, 1), dtype=np.bool_)
    slots = np.empty(max(nt, 1), dtype=np.int64)
    for g in range(3):
        gen += 1
        row[14 + g] = _top_ngram_chars(toks, tlen, hid, nt, g + 2, cand, slots, keys, tab, gen) / size if size else 0.0
        _next_candidates(cand, slots, tab[2], nt - g - 1)
    seen = np.empty(min(_size(4 * nt), 1 << 24), dtype=np.uint8)
    for g in range(6):
        gen += 1
        got = _greedy_dup_chars(cum, hp, pows, hq, pows64, nt, g + 5, seen, keys, tab, gen)
        row[17 + g] = got / size if size else 0.0
    return gen


@njit(cache=True, inline="always")
def _lower(c):
    if 65 <= c <= 90:
        return c + 32
    if c == 0x212A:  # KELVIN SIGN lower-cases to "k"
        return 107
    return c


@njit(cache=True)
def _patterns_in(arr, s, e, pats, plen, pairs):
    """Which of C4's patterns the lower-cased ``arr[s:e]`` contains, as a bit mask (bit p: ``pats[p]``); one
    pass, each position tried against the patterns that start with its two characters (``pairs``, per two
    ASCII characters the bits of the patterns starting so: :data:`PATTERN_PAIRS` for :data:`PATTERNS`; every
    pattern's first two are ASCII letters)."""
    found = 0
    if e - s < 2:
        return found
    prev = _lower(arr[s])
    for i in range(s + 1, e):
        c = _lower(arr[i])
        if prev < 128 and c < 128:
            todo = pairs[prev, c] & ~found
            while todo:
                p = 0
                while not (todo >> p) & 1:
                    p += 1
                todo &= ~(1 << p)
                n = plen[p]
                if i - 1 + n > e:
                    continue
                ok = True
                for k in range(2, n):
                    if _lower(arr[i - 1 + k]) != pats[p, k]:
                        ok = False
                        break
                if ok:
                    found |= 1 << p
        prev = c
    return found


@njit(cache=True)
def _citation_at(cps, cls, c, e, cites):
    """The end of datatrove's citation mark starting at ``c`` (``[`` digits ``]``, ``[edit]``, ``[citation
    needed]``, tried in that order), or -1."""
    k = c + 1
    while k < e and cls[cps[k]] & 4:
        k += 1
    if k < e and cps[k] == 93:
        return k + 1
    for w in range(cites.shape[0]):
        n = 0
        while n < cites.shape[1] and cites[w, n] != 0:
            n += 1
        if c + n <= e:
            ok = True
            for q in range(n):
                if cps[c + q] != cites[w, q]:
                    ok = False
                    break
            if ok:
                return c + n
    return -1


@njit(cache=True)
def _without_citations(cps, cls, a, b, cites, buf):
    """CITATION.sub("", line) of ``cps[a:b]`` into ``buf``: (its length, whether a mark was removed)."""
    n = 0
    removed = False
    c = a
    while c < b:
        if cps[c] == 91:
            e = _citation_at(cps, cls, c, b, cites)
            if e >= 0:
                removed = True
                c = e
                continue
        buf[n] = cps[c]
        n += 1
        c += 1
    return n, removed


@njit(cache=True)
def _c4(cps, cls, s0, s1, pids, p0, p_sent, min_words, max_word_len, pats, plen, pairs, cites, out, col, pend):
    """C4QualityFilter's outcome over splitlines() with ``filter_no_terminal_punct`` True and False, in one pass
    over the lines: (lorem, curly, sentences) of each into out[col:col+3] and out[col+3:col+6]; the pieces of
    each line are the next ones of the document's pieces (line boundaries are whitespace). A kept line a
    citation mark was removed from has other words: its (column, start, end) goes to ``pend`` for Python to
    count its sentences."""
    cursor = p0
    sentences = np.zeros(2, dtype=np.int64)
    lorem = np.zeros(2, dtype=np.int64)
    curly = np.zeros(2, dtype=np.int64)
    done = np.zeros(2, dtype=np.bool_)  # a setting whose page a line has dropped reads no further line
    buf = np.empty(s1 - s0 + 1, dtype=np.uint32)
    i = s0
    while i < s1 and not (done[0] and done[1]):
        # one line: [i, j), then the boundary
        j = i
        while j < s1 and not (cls[cps[j]] & 2):
            j += 1
        nxt = j + 1
        if j < s1 and cps[j] == 13 and j + 1 < s1 and cps[j + 1] == 10:
            nxt = j + 2
        # its pieces, the longest one, its stripped ends
        n_pieces = 0
        longest = 0
        run = 0
        a = i
        b = i
        bracket = False
        for k in range(i, j):
            x = cps[k]
            if cls[x] & 1:
                run = 0
            else:
                if run == 0:
                    n_pieces += 1
                    if n_pieces == 1:
                        a = k
                run += 1
                if run > longest:
                    longest = run
                b = k + 1
                if x == 91:
                    bracket = True
        first_piece = cursor
        cursor += n_pieces
        i = nxt
        if longest > max_word_len or n_pieces < min_words:
            continue
        # the line the rules read: stripped, its citation marks removed
        arr = cps
        la = a
        lb = b
        cited = False
        if bracket:
            nb, cited = _without_citations(cps, cls, a, b, cites, buf)
            if cited:
                arr = buf
                la = 0
                lb = nb
        # the terminal-punctuation rule (setting 0 only): ends in . ? ! " ' and not in ...
        ends = False
        if lb > la:
            last = arr[lb - 1]
            ends = last == 46 or last == 63 or last == 33 or last == 34 or last == 39
            if lb - la >= 3 and last == 46 and arr[lb - 2] == 46 and arr[lb - 3] == 46:
                ends = False
        if done[1] and not ends:
            continue
        found = _patterns_in(arr, la, lb, pats, plen, pairs)
        has_curly = False
        if not found & 3:
            for k in range(la, lb):
                if arr[k] == 123:
                    has_curly = True
                    break
        n = -1
        for m in range(2):
            if done[m] or (m == 0 and not ends):
                continue
            if found & 1:  # lorem ipsum
                lorem[m] = 1
                done[m] = True
                continue
            if found & 2:  # javascript: the line goes
                continue
            if has_curly:
                curly[m] = 1
                done[m] = True
                continue
            if found > 3:  # a policy line goes
                continue
            if cited:
                pend.append((col + 3 * m, a, b))
                continue
            if n < 0:
                # spaCy's sentencizer over the line's words: each piece moves (sentences, after-a-terminal) on
                n = 1
                state = 0
                for q in range(first_piece, first_piece + n_pieces):
                    pid = pids[q]
                    n += p_sent[pid, 2 * state]
                    state = p_sent[pid, 2 * state + 1]
            sentences[m] += n
    for m in range(2):
        out[col + 3 * m] = lorem[m]
        out[col + 3 * m + 1] = curly[m]
        out[col + 3 * m + 2] = sentences[m]


@njit(cache=True)
def _split_runs(cps, a, b, min_run, starts, ends):
    """``cps[a:b]`` cut at every run of at least ``min_run`` newlines (shorter runs stay inside a piece), as
    ``re.split("\\n{min_run,}")`` cuts it: the pieces' bounds into ``starts``/``ends``; returns how many."""
    n = 0
    start = a
    c = a
    while c < b:
        if cps[c] == 10:
            e = c
            while e < b and cps[e] == 10:
                e += 1
            if e - c >= min_run:
                starts[n] = start
                ends[n] = c
                n += 1
                start = e
            c = e
        else:
            c += 1
    starts[n] = start
    ends[n] = b
    return n + 1


@njit(cache=True)
def compat_kernel(
    cps,
    doff,
    cls,
    pids,
    poff,
    pt_off,
    pt_tok,
    p_sent,
    tlen,
    tflag,
    tstop,
    th,
    tpw,
    th64,
    tpw64,
    pats,
    plen,
    pairs,
    cites,
    want,
    min_words,
    mwl,
):
    """Every column of :data:`COLUMNS` per document (``want``: gopher quality, gopher repetition, c4, fineweb)."""
    nd = doff.shape[0] - 1
    out = np.zeros((nd, NCOL), dtype=np.float64)
    pend = [(0, 0, 0)]  # (column, start, end) of the kept lines whose citation marks Python removes
    pend.pop()
    # n-gram tables shared by every document, a slot taken when its stamp is the current generation
    most = 0
    for d in range(nd):
        nt = 0
        for q in range(poff[d], poff[d + 1]):
            nt += pt_off[pids[q] + 1] - pt_off[pids[q]]
        most = max(most, nt)
    keys = np.zeros(_size(most), dtype=np.uint64)
    tab = np.zeros((3, _size(most)), dtype=np.int64)
    gen = 0
    for d in range(nd):
        row = out[d]
        s0 = doff[d]
        s1 = doff[d + 1]
        size = s1 - s0
        row[35] = size
        # the document's words, in order
        nt = 0
        for q in range(poff[d], poff[d + 1]):
            pid = pids[q]
            nt += pt_off[pid + 1] - pt_off[pid]
        toks = np.empty(nt, dtype=np.int64)
        k = 0
        for q in range(poff[d], poff[d + 1]):
            pid = pids[q]
            for r in range(pt_off[pid], pt_off[pid + 1]):
                toks[k] = pt_tok[r]
                k += 1
        row[0] = nt
        newlines = 0
        for c in range(s0, s1):
            if cps[c] == 10:
                newlines += 1
        row[34] = newlines
        if want[0]:
            n_content = 0
            content_chars = 0
            n_alpha = 0
            stops = 0
            for r in range(nt):
                t = toks[r]
                if not (tflag[t] & 1):
                    n_content += 1
                    content_chars += tlen[t]
                if tflag[t] & 2:
                    n_alpha += 1
                if tstop[t] >= 0:
                    stops |= 1 << tstop[t]
            row[1] = n_content
            row[2] = content_chars
            row[3] = n_alpha
            n_stop = 0
            while stops:
                n_stop += stops & 1
                stops >>= 1
            row[4] = n_stop
            hashes = 0
            ellipses = 0
            dots = 0
            for c in range(s0, s1):
                x = cps[c]
                if x == 35:
                    hashes += 1
                elif x == 0x2026:
                    ellipses += 1
                if x == 46:
                    dots += 1
                else:
                    ellipses += dots // 3
                    dots = 0
            ellipses += dots // 3
            row[5] = hashes
            row[6] = ellipses
            # splitlines(): lines whose lstrip() starts with a bullet, whose rstrip() ends with an ellipsis
            n_lines = 0
            bullets = 0
            ell_lines = 0
            i = s0
            while i < s1:
                j = i
                while j < s1 and not (cls[cps[j]] & 2):
                    j += 1
                n_lines += 1
                a = i
                while a < j and cls[cps[a]] & 1:
                    a += 1
                if a < j and (cps[a] == 0x2022 or cps[a] == 45):
                    bullets += 1
                b = j
                while b > i and cls[cps[b - 1]] & 1:
                    b -= 1
                if b > i and (
                    cps[b - 1] == 0x2026 or (b - i >= 3 and cps[b - 1] == 46 and cps[b - 2] == 46 and cps[b - 3] == 46)
                ):
                    ell_lines += 1
                i = j + 1
                if j < s1 and cps[j] == 13 and j + 1 < s1 and cps[j + 1] == 10:
                    i = j + 2
            row[7] = n_lines
            row[8] = bullets
            row[9] = ell_lines
        if want[1]:
            # paragraphs: text.strip() split at runs of 2+ newlines
            a = s0
            while a < s1 and cls[cps[a]] & 1:
                a += 1
            b = s1
            while b > a and cls[cps[b - 1]] & 1:
                b -= 1
            starts = np.empty(size + 1, dtype=np.int64)
            ends = np.empty(size + 1, dtype=np.int64)
            n = _split_runs(cps, a, b, 2, starts, ends)
            dp, dpc = _dup_spans(cps, starts, ends, n)
            row[10] = dp / n
            row[11] = dpc / size if size else 0.0
            # lines: text split at runs of newlines (an empty first/last piece counts)
            n = _split_runs(cps, s0, s1, 1, starts, ends)
            dl, dlc = _dup_spans(cps, starts, ends, n)
            row[12] = dl / n
            row[13] = dlc / size if size else 0.0
            gen = _repetition(toks, tlen, th, tpw, th64, tpw64, nt, size, keys, tab, gen, row)
        if want[2]:
            _c4(cps, cls, s0, s1, pids, poff[d], p_sent, min_words, mwl, pats, plen, pairs, cites, row, 23, pend)
            # a capital dotted I lower-cases to two characters: the Python definition decides (docstring)
            for c in range(s0, s1):
                if cps[c] == 0x130:
                    row[29] = 1
                    break
        if want[3]:
            starts = np.empty(newlines + 1, dtype=np.int64)
            ends = np.empty(newlines + 1, dtype=np.int64)
            n = 0
            punct = 0
            short = 0
            start = s0
            for c in range(s0, s1 + 1):
                if c == s1 or cps[c] == 10:
                    blank = True
                    for k in range(start, c):
                        if not (cls[cps[k]] & 1):
                            blank = False
                            break
                    if not blank:
                        starts[n] = start
                        ends[n] = c
                        n += 1
                        if cls[cps[c - 1]] & 8:
                            punct += 1
                        if c - start <= 30:
                            short += 1
                    start = c + 1
            row[30] = n
            row[31] = punct
            row[32] = short
            row[33] = _dup_spans(cps, starts, ends, n)[1]
    return out, pend
