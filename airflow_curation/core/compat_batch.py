"""A batch of texts through the compiled compat pass (:mod:`airflow_curation.core.compat_kernel`).

The words of a whitespace piece depend on the piece alone, so each distinct piece is split into datatrove's
words once per process and remembered with what the kernel reads of it: its words (ids into a word table
holding each word's length, whether it is all punctuation, whether it has a letter, its stop-word index and
its hash for joined n-grams) and how it moves spaCy's sentence cut. The tables are append-only numpy arrays
(regrown by doubling) and start over past :data:`MAX_PIECES`, so a long-running worker stays bounded.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

import numpy as np

from airflow_curation.core import compat_kernel as k
from airflow_curation.core.compat_words import SENTENCE_TERMINALS, _piece_tokens

MAX_PIECES = 2_000_000
_CLS: np.ndarray | None = None


def _classes() -> np.ndarray:
    global _CLS
    if _CLS is None:
        _CLS = k.class_table(SENTENCE_TERMINALS)
    return _CLS


class _Grow:
    """An append-only numpy array with amortised growth."""

    def __init__(self, dtype: type, width: int = 0) -> None:
        self.shape = (1024, width) if width else (1024,)
        self.a = np.zeros(self.shape, dtype=dtype)
        self.n = 0

    def append(self, value) -> None:
        if self.n == self.a.shape[0]:
            self.a = np.concatenate([self.a, np.zeros_like(self.a)])
        self.a[self.n] = value
        self.n += 1

    def view(self) -> np.ndarray:
        return self.a[: self.n]


class Vocab:
    """Pieces and words seen so far, with what the kernel reads of them."""

    def __init__(self) -> None:
        from airflow_curation.core.compat import PUNCTUATION, STOP_WORDS

        self._punct = PUNCTUATION
        self._stop = {w: i for i, w in enumerate(sorted(STOP_WORDS))}
        self.pieces: dict[str, int] = {}
        self.words: dict[str, int] = {}
        self.pt_off = _Grow(np.int64)
        self.pt_off.append(0)
        self.pt_tok = _Grow(np.int64)
        self.p_sent = _Grow(np.int64, 4)
        self.tlen = _Grow(np.int64)
        self.tflag = _Grow(np.uint8)
        self.tstop = _Grow(np.int8)
        self.th = _Grow(np.uint64)
        self.tpw = _Grow(np.uint64)
        self._is_punct: list[bool] = []

    def _word(self, w: str) -> int:
        i = self.words.get(w)
        if i is not None:
            return i
        i = self.words[w] = len(self.words)
        h = 0
        for c in w:
            h = (h * k.BASE + ord(c)) % k.MERSENNE
        self.tlen.append(len(w))
        flag = (k.T_PUNCT if self._punct.issuperset(w) else 0) | (k.T_ALPHA if any(c.isalpha() for c in w) else 0)
        self.tflag.append(flag)
        self.tstop.append(self._stop.get(w, -1))
        self.th.append(h)
        self.tpw.append(pow(k.BASE, len(w), k.MERSENNE))
        self._is_punct.append(all(unicodedata.category(c).startswith("P") for c in w))
        return i

    def add(self, piece: str) -> int:
        """The id of ``piece``, splitting it into words the first time."""
        ids = [self._word(w) for w in _piece_tokens(piece)]
        for t in ids:
            self.pt_tok.append(t)
        self.pt_off.append(self.pt_tok.n)
        # spaCy's sentencizer: after a terminal, the next word that is not punctuation opens a sentence
        moves = []
        for state in (0, 1):
            add = 0
            for t, w in zip(ids, _piece_tokens(piece)):
                term = w in SENTENCE_TERMINALS
                if state and not term and not self._is_punct[t]:
                    add += 1
                    state = 0
                elif term:
                    state = 1
            moves += [add, state]
        self.p_sent.append(moves)
        i = self.pieces[piece] = len(self.pieces)
        return i


_VOCAB: Vocab | None = None


def vocab() -> Vocab:
    global _VOCAB
    if _VOCAB is None or len(_VOCAB.pieces) > MAX_PIECES:
        _VOCAB = Vocab()
    return _VOCAB


def kernel_rows(texts: Sequence[str], groups: tuple[bool, bool, bool, bool]) -> np.ndarray:
    """:data:`compat_kernel.COLUMNS` per text (C4's sentences of lines with citation marks included).

    :param texts: the documents.
    :param groups: which groups to compute: Gopher quality, Gopher repetition, C4, FineWeb.
    """
    v = vocab()
    pieces: list[str] = []
    poff = [0]
    for t in texts:
        pieces += t.split()
        poff.append(len(pieces))
    ids = list(map(v.pieces.get, pieces))
    if None in ids:
        add = v.add
        for i, x in enumerate(ids):
            if x is None:
                ids[i] = v.pieces.get(pieces[i]) if pieces[i] in v.pieces else add(pieces[i])
    doff = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum([len(t) for t in texts], out=doff[1:])
    joined = "".join(texts)
    cps = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    rows, pending = k.compat_kernel(
        cps,
        doff,
        _classes(),
        np.array(ids, dtype=np.int64),
        np.array(poff, dtype=np.int64),
        v.pt_off.view(),
        v.pt_tok.view(),
        v.p_sent.view(),
        v.tlen.view(),
        v.tflag.view(),
        v.tstop.view(),
        v.th.view(),
        v.tpw.view(),
        k.PATTERNS,
        k.PATTERN_LEN,
        k.CITES,
        np.array(groups, dtype=np.bool_),
        3,
        1000,
    )
    if pending:
        from airflow_curation.core.compat_words import count_sentences
        from airflow_curation.core.line_clean import CITATION

        for col, a, b in pending:
            doc = int(np.searchsorted(doff, a, side="right")) - 1
            rows[doc, col + 2] += count_sentences(CITATION.sub("", joined[a:b]))
    return rows
