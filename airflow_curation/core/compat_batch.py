"""A batch of texts through the compiled compat pass (:mod:`airflow_curation.core.compat_kernel`).

The words of a whitespace piece depend on the piece alone, so each distinct piece is split into datatrove's
words once per process and remembered with what the kernel reads of it: its words (ids into a word table
holding each word's length, whether it is all punctuation, whether it has a letter, its stop-word index and
its two hashes for joined n-grams) and how it moves spaCy's sentence cut. Cutting the documents into pieces, looking
them up and storing the new ones is compiled (:mod:`airflow_curation.core.compat_vocab`); so is splitting a new
piece into words (:mod:`airflow_curation.core.compat_split`) but for the pieces past ASCII whose shape does not
decide their words, which Python splits; the words' attributes come from a per-character table
(:mod:`airflow_curation.core.compat_chars`). The tables are append-only numpy arrays and start over
past :data:`MAX_PIECES`, so a long-running worker stays bounded.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from airflow_curation.core import compat_chars as cc
from airflow_curation.core import compat_kernel as k
from airflow_curation.core import compat_split as cs
from airflow_curation.core import compat_vocab as cv
from airflow_curation.core.compat_words import SENTENCE_TERMINALS, _piece_tokens

MAX_PIECES = 2_000_000
_CLS: np.ndarray | None = None


def _classes() -> np.ndarray:
    global _CLS
    if _CLS is None:
        _CLS = k.class_table(SENTENCE_TERMINALS)
    return _CLS


class Vocab:
    """Pieces and words seen so far, with what the kernel reads of them (:mod:`compat_vocab`'s tables)."""

    def __init__(self) -> None:
        from airflow_curation.core.compat import STOP_WORDS

        stops = sorted(STOP_WORDS)
        self.stops = np.zeros((len(stops), max(map(len, stops))), dtype=np.uint32)
        for i, w in enumerate(stops):
            self.stops[i, : len(w)] = [ord(c) for c in w]
        self.stop_len = np.array([len(w) for w in stops], dtype=np.int64)
        self.counts = np.zeros(5, dtype=np.int64)
        # pieces: slot table (per slot: id + 1 and hash), characters, character offsets per id
        self.ptab = np.zeros((1 << 12, 2), dtype=np.uint64)
        self.pchars = np.zeros(1 << 14, dtype=np.uint32)
        self.pcoff = np.zeros(1024, dtype=np.int64)
        # words: slot table (as the pieces'), characters, offsets, length, flags, stop index, terminal,
        # punctuation, n-gram hash and BASE^length (mod 2^61-1), the same two mod 2^64
        i64 = np.int64
        self.words = (
            np.zeros((1 << 12, 2), dtype=np.uint64),
            np.zeros(1 << 13, dtype=np.uint32),
            np.zeros(1024, dtype=i64),
            *(np.zeros(1024, dtype=i64) for _ in range(5)),
            *(np.zeros(1024, dtype=np.uint64) for _ in range(4)),
        )
        # pieces' words: first word per piece, word ids, (sentences, state) after the piece from state 0 and 1
        self.pieces = (np.zeros(1024, dtype=i64), np.zeros(1 << 12, dtype=i64), np.zeros((1024, 4), dtype=i64))

    def scan(self, text: str, cps: np.ndarray, doff: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Piece ids of the documents ``cps[doff[d]:doff[d + 1]]`` and the first piece per document; the new
        pieces' words are added to the tables.

        :param text: the documents one after another.
        :param cps: its code points.
        """
        got = cv.scan(cps, doff, _classes(), self.ptab, self.pchars, self.pcoff, self.counts)
        pids, poff, new_s, new_e, self.ptab, self.pchars, self.pcoff = got
        if len(new_s):
            self._add(text, cps, new_s, new_e)
        return pids, poff

    def _add(self, text: str, cps: np.ndarray, new_s: np.ndarray, new_e: np.ndarray) -> None:
        chars = cc.cover(cps, new_s, new_e)
        tok_ends, tok_off, python = cs._split_all(
            cps, new_s, new_e, cs.CLASSES, chars, cs.UNITS, cs.UNIT_OFF, *cs.SPECIALS
        )
        # the pieces the compiled splitter leaves to Python: their words
        words: list[str] = []
        count: list[int] = []
        for a, b in zip(new_s[python].tolist(), new_e[python].tolist(), strict=True):
            ws = _piece_tokens(text[a:b])
            words += ws
            count.append(len(ws))
        py_coff = np.zeros(len(words) + 1, dtype=np.int64)
        np.cumsum([len(w) for w in words], out=py_coff[1:])
        py_chars = np.frombuffer("".join(words).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        self.words, self.pieces = cv.add_pieces(
            cps,
            new_s,
            new_e,
            tok_ends,
            tok_off,
            python,
            py_chars,
            py_coff,
            np.array(count, dtype=np.int64),
            chars,
            self.stops,
            self.stop_len,
            self.words,
            self.pieces,
            self.counts,
        )

    def tables(self) -> tuple[np.ndarray, ...]:
        """The kernel's view: first word per piece, word ids, sentence moves, and per word: length, flags, stop
        index, n-gram hash and BASE^length modulo 2^61-1 and modulo 2^64 (the used prefixes)."""
        n_pieces, _, n_tok, n_words, _ = self.counts.tolist()
        pt_off, pt_tok, p_sent = self.pieces
        w = self.words
        return (
            pt_off[: n_pieces + 1],
            pt_tok[:n_tok],
            p_sent[:n_pieces],
            w[3][:n_words],
            w[4][:n_words],
            w[5][:n_words],
            w[8][:n_words],
            w[9][:n_words],
            w[10][:n_words],
            w[11][:n_words],
        )


_VOCAB: Vocab | None = None
_LOCK = threading.Lock()


def vocab() -> Vocab:
    global _VOCAB
    if _VOCAB is None or _VOCAB.counts[cv.N_PIECES] > MAX_PIECES:
        _VOCAB = Vocab()
    return _VOCAB


def kernel_rows(texts: Sequence[str], groups: tuple[bool, bool, bool, bool]) -> np.ndarray:
    """:data:`compat_kernel.COLUMNS` per text (C4's sentences of lines with citation marks included).

    :param texts: the documents.
    :param groups: which groups to compute: Gopher quality, Gopher repetition, C4, FineWeb.
    """
    doff = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum([len(t) for t in texts], out=doff[1:])
    joined = "".join(texts)
    cps = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    # the tables grow under a lock (threads of one worker share them); the kernel reads this snapshot
    with _LOCK:
        v = vocab()
        ids, poff = v.scan(joined, cps, doff)
        tables = v.tables()
    rows, pending = k.compat_kernel(
        cps,
        doff,
        _classes(),
        ids,
        poff,
        *tables,
        k.PATTERNS,
        k.PATTERN_LEN,
        k.PATTERN_PAIRS,
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
