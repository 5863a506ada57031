"""The compiled word splitter (:mod:`airflow_curation.core.compat_split`) gives the Python splitter's words.

The Python splitter with its full Unicode patterns (``compat_words._UNICODE``) is the reference: held to
spaCy's words and datatrove's decisions by ``test_compat.py``. Every distinct whitespace piece of the test
corpus (prose, code, CJK) and a list of hand-picked edge cases goes through both.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_curation.core import compat_chars as cc
from airflow_curation.core import compat_split as cs
from airflow_curation.core import compat_words as cw

from . import corpus

TRICKY = [
    # punctuation runs, dots, ellipses
    "...",
    "..",
    "wait...",
    "...and",
    "a..b",
    "?!",
    "!!!",
    "(((x)))",
    "[1],",
    "{a:b}",
    "--",
    "---",
    "a---b",
    "a--b",
    "1--a",
    "x-",
    "-x",
    "~a",
    "a~b",
    "#!/usr/bin/env",
    '"quoted",',
    "``code``",
    "`x`.",
    "f(:)",
    "print(x):",
    "(1998)",
    "8)",
    "<3",
    "a<b",
    "a>=b",
    "x=1",
    "a/b",
    "and/or",
    "w/o",
    # apostrophes and contractions
    "don't",
    "dont",
    "Dont",
    "DONT",
    "can't",
    "cannot",
    "gonna",
    "y'all",
    "I'm",
    "im",
    "youre",
    "we'd",
    "it's",
    "its",
    "Bob's",
    "BOB'S",
    "'s",
    "''",
    "'quoted'",
    "rock'n'roll",
    "o'clock",
    "isn't.",
    "(don't)",
    # abbreviations and single letters
    "e.g.",
    "E.g.",
    "i.e.,",
    "U.S.",
    "U.S.A.",
    "Mr.",
    "vs.",
    "vs",
    "a.",
    "x.y.",
    "p.m.",
    "A.B.C",
    "USA.",
    "NASA.",
    "Cat.",
    "cat.",
    "3.",
    "%.",
    # digits, operators, units, currency
    "1-2",
    "1-2-3",
    "1+2",
    "2^3",
    "3*4",
    "10+",
    "5km",
    "5km.",
    "10m/s",
    "3km/h",
    "12mph",
    "5kg,",
    "$5",
    "5$",
    "US$5",
    "5US$",
    "C$3",
    "3C$",
    "1,000",
    "1.5",
    "3.14159",
    "-1j",
    "+1",
    "+a",
    "%s",
    "100%",
    "=x",
    # URLs, hosts, e-mails
    "https://example.com/a?b=c#d",
    "http://user:pw@host.org:8080/x",
    "example.com",
    "example.com.",
    "(example.com)",
    "www.python.org/",
    "user@example.com",
    "git@github.com:x/y",
    "192.168.0.1",
    "192.168.0.1:80",
    "1.2.3",
    "1.2.3.4.5",
    "os.path",
    "os.path.join()",
    "ast.Add",
    "sys._getframe()).",
    "a_b.c_d",
    "-a.bc",
    "a-.bc",
    "x.y:123456",
    "x.y:12",
    "ftp+x://h.io",
    "1ftp://h.io",
    "a:b@c.de",
    ":b@c.de",
    "a@b@c.de",
    "foo.Bar",
    "foo.BAR.",
    "'a'.B",
    "a,b",
    "a,1",
    # non-ASCII
    "café.",
    "naïve-ish",
    "“quoted”",
    "don’t",
    "l’homme",
    "20°C.",
    "€5",
    "5€",
    "—dash—",
    "a–b",
    "数据。",
    "日本語、",
    "Привет,",
    "…and",
    "x…y",
    "§3",
    "½",
    "👍!",
    # past ASCII: the shapes the compiled path decides (letters and marks; an edge mark or a period on either
    # side; marks inside that no rule reads) and what they leave to Python
    "KOÇ.",
    "oversættere.",
    "Ñ.",
    "ä.",
    "Éé.",
    "ÉÉ.",
    "(Ñe.",
    "كتابً.",
    "كتابً،",
    "فارسی\u200cزبان",
    "中文，中文。",
    "中文，，",
    "「中文」",
    "«Привет»",
    "“hello”",
    "Müller’s",
    "un’opera,",
    "ಠ_ಠ",
    "Praveen|പ്രവീണ്\u200d",
    "naïve…",
    "naïve:x",
    "Straße",
    "İstanbul",
    "ΣΟΦΟΣ",
    "σοφός;",
    "naïve,",
    "(café",
    "(café)",
    "Привет!",
    "Привет?!",
    "数据",
    "ſ",
    "ǅemal:",
    "\u212a",
    "\u212ano",
    "a\u212a)",
    "(\u212a",
    "e\u0301",
    "x²",
    "Ⅻ",
    "don’t",
    "DON’T",
    "l’",
    "’s",
    "n’t",
    "(’s",
    "l'été",
]


def _pieces(texts: list[str]) -> list[str]:
    return sorted({p for t in texts for p in t.split()})


@pytest.fixture(scope="module")
def pieces(prose) -> list[str]:
    texts = [*prose, *corpus.prose_docs(), *(t for _, t in corpus.code_docs()), *corpus.cjk_docs()]
    return sorted(set(_pieces(texts)) | set(TRICKY))


def test_same_words_as_python(pieces):
    got = cs.split_pieces(pieces)
    want = [cw._split(p, cw._UNICODE) for p in pieces]
    wrong = [(p, g, w) for p, g, w in zip(pieces, got, want, strict=True) if g != w]
    assert not wrong, wrong[:20]


def _split_compiled(pieces: list[str]) -> tuple[list[tuple[str, ...]], np.ndarray]:
    """The compiled splitter alone: each piece's words (empty where it leaves the piece to Python) and which."""
    data = np.frombuffer("".join(pieces).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    off = np.zeros(len(pieces) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in pieces], out=off[1:])
    ucls = cc.cover(data, off[:-1], off[1:])
    ends, tok_off, python = cs._split_all(
        data, off[:-1], off[1:], cs.CLASSES, ucls, cs.UNITS, cs.UNIT_OFF, *cs.SPECIALS
    )
    words = []
    for i, p in enumerate(pieces):
        e = (ends[tok_off[i] : tok_off[i + 1]] - off[i]).tolist()
        words.append(tuple(p[a:b] for a, b in zip([0, *e[:-1]], e)))
    return words, python


def test_compiled_path_decides_every_ascii_piece_and_the_wide_shapes(pieces):
    """The equality above must come from the compiled path, not from handing pieces back to Python: every
    ASCII piece, special cases included, is split in compiled code; past ASCII, every piece whose shape decides
    its words (``compat_words.wide_piece_tokens``: letters and marks, an edge mark or period on either side),
    and only those; the rest go to Python."""
    words, python = _split_compiled(pieces)
    wide = np.array([not p.isascii() for p in pieces])
    assert not python[~wide].any()
    assert python[wide].tolist() == [cw.wide_piece_tokens(p) is None for p in pieces if not p.isascii()]
    # the corpus's pieces past ASCII are mostly words of other languages: most take the compiled path
    assert (~python[wide]).sum() > 0.5 * wide.sum()
    want = [cw._split(p, cw._UNICODE) for p in pieces]
    wrong = [(p, w, v) for p, w, v, py in zip(pieces, words, want, python) if not py and w != v]
    assert not wrong, wrong[:20]


@pytest.mark.parametrize(
    "piece,words",
    [
        ("don't", ("do", "n't")),
        ("DONT", ("DONT",)),
        ("Dont", ("Do", "nt")),
        ("youre", ("you", "re")),
        ("wholl", ("who", "ll")),  # as spaCy's table has it (tests/preprocess/test_compat.py asks it)
        ("couldn't've", ("could", "n't", "'ve")),  # chains of three words
        ("ima", ("i", "m", "a")),
        ("(Youdve)", ("(", "You", "d", "ve", ")")),
        ("DON'T", ("DON'T",)),  # spaCy's contractions are lower and title case
        ("e.g.", ("e.g.",)),
        ("(e.g.", ("(", "e.g.")),
        ("a.", ("a.",)),
        ("print(x):", ("print(x", "):")),
        ("https://example.com", ("https://example.com",)),
        ("(don't)", ("(", "do", "n't", ")")),
        ("I'm,", ("I", "'m", ",")),
    ],
)
def test_special_cases_in_compiled_code(piece, words):
    """Contractions split, abbreviations and emoticons stay whole (merged back from their tokens: ``):``)."""
    assert cw._split(piece, cw._UNICODE) == words
    assert _split_compiled([piece])[0] == [words]


def test_special_table_answers_as_the_python_special_cases(pieces):
    """The table holds exactly the strings ``compat_words._special`` answers, with its answers: every entry,
    and every substring (up to one character longer than the longest entry, in three case forms) of the hand-
    picked pieces, of every corpus piece with an apostrophe and of every 8th other ASCII piece (all of them
    would take ~15 s)."""
    data, off, n_words, word_end, slots = cs.SPECIALS[:5]
    longest = int(np.diff(off).max()) + 1

    for i in range(len(off) - 1):
        w = data[off[i] : off[i + 1]].tobytes().decode()
        got = cw._special(w)
        ends = word_end[i, : n_words[i]].tolist()
        assert got is not None and ends == [sum(map(len, got[:k])) for k in range(1, len(got) + 1)], w
    assert (n_words == 3).any(), "chains of three words (can't've) are in the table"
    subs = {
        f
        for i, p in enumerate(pieces)
        if p.isascii() and (p in TRICKY or "'" in p or i % 8 == 0)
        for a in range(len(p))
        for b in range(a + 1, min(len(p), a + longest) + 1)
        for f in (p[a:b], p[a:b].upper(), p[a:b].capitalize())
    }
    for s in subs:
        arr = np.frombuffer(s.encode(), dtype=np.uint8)
        e = cs._special(arr, 0, len(arr), data, off, slots, longest - 1)
        want = cw._special(s)
        assert (e >= 0) == (want is not None), s
        if want is not None:
            assert word_end[e, : n_words[e]].tolist() == [sum(map(len, want[:k])) for k in range(1, len(want) + 1)], s


def _split_by_slices(s: str, rules) -> tuple[str, ...]:
    """``compat_words._split``'s edge loop as it was, on slices (quadratic on a long piece of marks): the
    reference for the loop on bounds."""
    prefixes, suffixes = [], []
    while s:
        if cw._special_case(s):
            break
        last = len(s)
        m = rules.prefix.match(s)
        pre = m.end() if m else 0
        if pre and s[pre:] and cw._special_case(s[pre:]):
            prefixes.append(s[:pre])
            s = s[pre:]
            break
        m = rules.suffix.search(s[pre:])
        suf = len(s) - pre - m.start() if m and m.start() < len(s) - pre else 0
        if suf and s[:-suf] and cw._special_case(s[:-suf]):
            suffixes.append(s[-suf:])
            s = s[:-suf]
            break
        if pre and suf and pre + suf <= len(s):
            prefixes.append(s[:pre])
            suffixes.append(s[-suf:])
            s = s[pre:-suf]
        elif pre:
            prefixes.append(s[:pre])
            s = s[pre:]
        elif suf:
            suffixes.append(s[-suf:])
            s = s[:-suf]
        if len(s) == last or cw._special_case(s):
            break
    middle = []
    if s:
        sp = cw._special_case(s)
        middle = list(sp) if sp else [s] if rules.url.fullmatch(s) else cw._infix_split(s, rules.infix)
    return cw._match_specials(prefixes + middle + suffixes[::-1])


# marks that the prefix, suffix and infix rules take, dots (the unbounded suffix), units after digits, letters
# past ASCII, and the special cases' pieces, in runs long enough to pass the suffix window
_MARKS = list("«»()[]{}\"'!?,;:.…%$+-—–°Cc9aé") + ["..", "...", "km", "US$", "n't", "'s", "e.g", "Mr", "(:"]


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(_MARKS), max_size=40).map("".join))
def test_the_edge_loop_on_bounds_splits_as_on_slices(piece):
    for rules in (cw._UNICODE, cw._ASCII) if piece.isascii() else (cw._UNICODE,):
        assert cw._split(piece, rules) == _split_by_slices(piece, rules), piece


def test_a_long_piece_of_marks_splits_in_linear_time():
    """1,000,000 marks on each side of a piece past ASCII (the Python path) and of an ASCII one (the compiled
    path): each edge stripping hashed and searched the whole rest, hours on such a document."""
    n = 1_000_000
    assert cw._split("«" * n + "»" * n, cw._UNICODE) == ("«",) * n + ("»",) * n
    (words,) = cs.split_pieces(["{" * n + "}" * n])
    assert words == ("{",) * n + ("}",) * n
    dots = cw._split("«é" + "." * n, cw._UNICODE)
    assert dots == ("«", "é", "." * n)


# Letters of cased and uncased scripts (lower, upper, one of each case that spaCy does not list), marks, a zero-width
# joiner, edge marks (inner ones and ones that act inside: "," ":" "…" "’"), a period, digits, ASCII letters.
_WIDE_CHARS = (
    list("aZséÉçÇßñÑσΣяЯжЖიحبًّ中文ಠ੍") + ["\u200c", "\u200d", "\u0301"] + list("«»“”「」。，、()!?;|,:…’'._-1٣$")
)


@settings(max_examples=4000, deadline=None)
@given(st.lists(st.sampled_from(_WIDE_CHARS), min_size=1, max_size=8).map("".join))
def test_the_wide_shapes_split_as_the_rules_do(piece):
    """Where a piece's shape decides its words (``wide_piece_tokens``), they are the rules' (``_split``), and
    the compiled splitter gives the rules' words for every piece, whether it decides it or hands it to Python."""
    want = cw._split(piece, cw._UNICODE)
    shaped = cw.wide_piece_tokens(piece)
    assert shaped is None or shaped == want, piece
    words, python = _split_compiled([piece])
    assert bool(python[0]) == (shaped is None and not piece.isascii()), piece
    assert python[0] or words[0] == want, piece
