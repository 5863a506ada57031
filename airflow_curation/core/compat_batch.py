"""A batch of texts through the compiled compat pass (:mod:`airflow_curation.core.compat_kernel`).

The words of a whitespace piece depend on the piece alone, so each distinct piece is split into datatrove's
words once per process (the new pieces of a batch together, :func:`compat_split.split_pieces`) and remembered
with what the kernel reads of it: its words (ids into a word table holding each word's length, whether it is
all punctuation, whether it has a letter, its stop-word index and its hash for joined n-grams) and how it moves
spaCy's sentence cut. The tables are append-only numpy arrays (Python lists while a batch adds, numpy arrays
for the kernel) and start over past :data:`MAX_PIECES`, so a long-running worker stays bounded.
"""

from __future__ import annotations

import threading
import unicodedata
from collections.abc import Sequence

import numpy as np

from airflow_curation.core import compat_kernel as k
from airflow_curation.core.compat_split import split_pieces
from airflow_curation.core.compat_words import SENTENCE_TERMINALS, _piece_tokens

MAX_PIECES = 2_000_000
_CLS: np.ndarray | None = None


def _classes() -> np.ndarray:
    global _CLS
    if _CLS is None:
        _CLS = k.class_table(SENTENCE_TERMINALS)
    return _CLS


class _Table:
    """An append-only column: a Python list while a batch adds to it, a numpy array for the kernel."""

    def __init__(self, dtype: type, first: tuple = ()) -> None:
        self.dtype = dtype
        self.items: list = list(first)
        self.array = np.zeros(0, dtype=dtype)

    def view(self) -> np.ndarray:
        if len(self.array) < len(self.items):  # only the new tail is converted
            tail = np.array(self.items[len(self.array) :], dtype=self.dtype)
            self.array = np.concatenate([self.array, tail])
        return self.array


class Vocab:
    """Pieces and words seen so far, with what the kernel reads of them."""

    def __init__(self) -> None:
        from airflow_curation.core.compat import PUNCTUATION, STOP_WORDS

        self._punct = PUNCTUATION
        self._stop = {w: i for i, w in enumerate(sorted(STOP_WORDS))}
        self.pieces: dict[str, int] = {}
        self.words: dict[str, int] = {}
        self.pt_off = _Table(np.int64, (0,))
        self.pt_tok = _Table(np.int64)
        self.p_sent = _Table(np.int64)  # 4 per piece: (sentences, state) after it from state 0, from state 1
        self.tlen = _Table(np.int64)
        self.tflag = _Table(np.uint8)
        self.tstop = _Table(np.int8)
        self.th = _Table(np.uint64)
        self.tpw = _Table(np.uint64)
        self._term: list[bool] = []
        self._is_punct: list[bool] = []
        self._unhashed: list[str] = []

    def flush(self) -> None:
        """Hash the words added since the last flush (one compiled pass: their hash and BASE^length)."""
        if not self._unhashed:
            return
        cps = np.frombuffer("".join(self._unhashed).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        off = np.zeros(len(self._unhashed) + 1, dtype=np.int64)
        np.cumsum([len(w) for w in self._unhashed], out=off[1:])
        h, pw = k.word_hashes(cps, off)
        self.th.items += h.tolist()
        self.tpw.items += pw.tolist()
        self._unhashed = []

    def _word(self, w: str) -> int:
        i = self.words.get(w)
        if i is not None:
            return i
        i = self.words[w] = len(self.words)
        self._unhashed.append(w)  # hashed with the rest of the batch's new words (flush)
        self.tlen.items.append(len(w))
        alpha = w.isalpha() or any(c.isalpha() for c in w)
        self.tflag.items.append((k.T_PUNCT if self._punct.issuperset(w) else 0) | (k.T_ALPHA if alpha else 0))
        self.tstop.items.append(self._stop.get(w, -1))
        self._term.append(w in SENTENCE_TERMINALS)
        self._is_punct.append(not alpha and all(unicodedata.category(c)[0] == "P" for c in w))
        return i

    def add(self, piece: str, words: tuple[str, ...] | None = None) -> int:
        """The id of a new ``piece``.

        :param piece: a whitespace piece not seen before.
        :param words: its words if known (:func:`compat_split.split_pieces`), else split here.
        """
        ids = [self._word(w) for w in (_piece_tokens(piece) if words is None else words)]
        self.pt_tok.items += ids
        self.pt_off.items.append(len(self.pt_tok.items))
        # spaCy's sentencizer: after a terminal, the next word that is not punctuation opens a sentence
        for state in (0, 1):
            add = 0
            for t in ids:
                if state and not self._term[t] and not self._is_punct[t]:
                    add += 1
                    state = 0
                elif self._term[t]:
                    state = 1
            self.p_sent.items += (add, state)
        i = self.pieces[piece] = len(self.pieces)
        return i


_VOCAB: Vocab | None = None
_LOCK = threading.Lock()


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
    pieces: list[str] = []
    poff = [0]
    for t in texts:
        pieces += t.split()
        poff.append(len(pieces))
    # the tables grow under a lock (threads of one worker share them); the kernel reads this snapshot
    with _LOCK:
        v = vocab()
        new = list(set(pieces).difference(v.pieces))  # pieces new to the process: their words, once
        for piece, words in zip(new, split_pieces(new), strict=True):
            v.add(piece, words)
        v.flush()
        ids = np.array(list(map(v.pieces.__getitem__, pieces)), dtype=np.int64)
        tables = (
            v.pt_off.view(),
            v.pt_tok.view(),
            v.p_sent.view().reshape(-1, 4),
            v.tlen.view(),
            v.tflag.view(),
            v.tstop.view(),
            v.th.view(),
            v.tpw.view(),
        )
    doff = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum([len(t) for t in texts], out=doff[1:])
    joined = "".join(texts)
    cps = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    rows, pending = k.compat_kernel(
        cps,
        doff,
        _classes(),
        ids,
        np.array(poff, dtype=np.int64),
        *tables,
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
