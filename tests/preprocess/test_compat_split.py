"""The compiled word splitter (:mod:`airflow_curation.core.compat_split`) gives the Python splitter's words.

The Python splitter with its full Unicode patterns (``compat_words._UNICODE``) is the reference: held to
spaCy's words and datatrove's decisions by ``test_compat.py``. Every distinct whitespace piece of the test
corpus (prose, code, CJK) and a list of hand-picked edge cases goes through both.
"""

from __future__ import annotations

import numpy as np
import pytest

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


def test_compiled_path_decides_most_ascii_pieces(pieces):
    """The equality above must come from the compiled path, not from handing every piece back to Python."""
    ascii_pieces = [p for p in pieces if p.isascii()]
    data = np.frombuffer("".join(ascii_pieces).encode(), dtype=np.uint8)
    off = np.zeros(len(ascii_pieces) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in ascii_pieces], out=off[1:])
    ends, tok_off, python = cs._split_all(data, off[:-1], off[1:], cs.CLASSES, cs.UNITS, cs.UNIT_OFF, *cs.SPECIALS)
    decided = [i for i in range(len(ascii_pieces)) if not python[i]]
    assert len(decided) > 0.8 * len(ascii_pieces)
    for i in decided:
        e = (ends[tok_off[i] : tok_off[i + 1]] - off[i]).tolist()
        p = ascii_pieces[i]
        assert tuple(p[a:b] for a, b in zip([0, *e[:-1]], e)) == cw._split(p, cw._UNICODE), p


@pytest.mark.parametrize(
    "piece,python",
    [
        ("don't", True),
        ("dont", True),
        ("e.g.", True),
        ("print(x):", True),
        ("youre", True),
        ("cat.", False),
        ("a.", True),
        ("data.", False),
        ("os.path.join()", False),
        ("dontcare", False),
        ("www.python.org/about", False),
        ("https://example.com", True),  # ":/" is an emoticon
    ],
)
def test_special_cases_go_to_python(piece, python):
    """A piece a special case could touch is left to the Python splitter; a letter run that merely contains
    a case (``dontcare``) or ends in a one-letter abbreviation's letter (``data.``) is not."""
    data = np.frombuffer(piece.encode(), dtype=np.uint8)
    off = np.array([0, len(piece)], dtype=np.int64)
    _, _, flags = cs._split_all(data, off[:-1], off[1:], cs.CLASSES, cs.UNITS, cs.UNIT_OFF, *cs.SPECIALS)
    assert bool(flags[0]) is python
