"""Packing tokenized documents into fixed-length sequences with their boundaries (stages/tokenize/packing)."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from airflow_curation.stages.tokenize.packing import Packer

E, P = 0, 99


def _pack(docs: list[tuple[str, list[int]]], seq_len: int, splits: list[int] | None = None) -> pa.Table:
    """Pack ``docs`` (EOS appended here), handed to the packer in groups cut at ``splits``."""
    packer = Packer(seq_len, P)
    out = []
    cuts = [0, *(splits or []), len(docs)]
    for a, b in zip(cuts, cuts[1:]):
        group = docs[a:b]
        if not group:
            continue
        flat = np.array([t for _, toks in group for t in [*toks, E]], dtype=np.int32)
        packer.add([d for d, _ in group], flat, np.array([len(t) + 1 for _, t in group]))
        out += list(packer.full())
    out += list(packer.flush())
    return pa.concat_tables(out) if out else packer.schema.empty_table()


def test_boundaries_of_a_small_example():
    docs = [("a", [1, 2, 3]), ("b", [4]), ("c", [5, 6, 7, 8, 9]), ("d", [10])]
    t = _pack(docs, 4).to_pydict()
    assert t["input_ids"] == [[1, 2, 3, E], [4, E, 5, 6], [7, 8, 9, E], [10, E, P, P]]
    assert t["n_tokens"] == [4, 4, 4, 2]
    assert t["doc_ids"] == [["a"], ["b", "c"], ["c"], ["d"]]
    assert t["doc_starts"] == [[0], [0, 2], [0], [0]]
    assert t["doc_offsets"] == [[0], [0, 0], [2], [0]]  # c continues at its 3rd token


def test_a_document_longer_than_several_sequences():
    t = _pack([("long", list(range(1, 11)))], 3).to_pydict()
    assert t["input_ids"] == [[1, 2, 3], [4, 5, 6], [7, 8, 9], [10, E, P]]
    assert t["doc_ids"] == [["long"]] * 4 and t["doc_offsets"] == [[0], [3], [6], [9]]


def test_exact_multiple_has_no_padding_and_nothing_gives_nothing():
    packer = Packer(2, P)
    packer.add(["x"], np.array([5, E], dtype=np.int32), np.array([2]))
    tables = list(packer.flush())
    assert sum(t.num_rows for t in tables) == 1 and packer.padding == 0
    assert list(Packer(8, P).flush()) == []
    with pytest.raises(ValueError, match="without tokens"):
        Packer(4, P).add(["e"], np.array([], dtype=np.int32), np.array([0]))


@pytest.mark.parametrize("seed", range(5))
def test_any_grouping_gives_the_same_sequences_and_boundaries_rebuild_every_document(seed):
    rng = random.Random(seed)
    docs = [(f"d{i}", [rng.randint(1, 50) for _ in range(rng.randint(1, 40))]) for i in range(60)]
    seq_len = rng.choice([1, 7, 16, 64])
    whole = _pack(docs, seq_len)
    splits = sorted(rng.sample(range(1, len(docs)), 10))
    assert _pack(docs, seq_len, splits).equals(whole)
    # Walking the boundaries gives back each document's tokens (and its EOS), in order.
    rebuilt: dict[str, list[int]] = {}
    for ids, n, doc_ids, starts, offsets in zip(*whole.to_pydict().values()):
        ends = [*starts[1:], n]
        for d, s, e, off in zip(doc_ids, starts, ends, offsets):
            assert len(rebuilt.get(d, [])) == off
            rebuilt.setdefault(d, []).extend(ids[s:e])
    assert list(rebuilt) == [d for d, _ in docs]
    assert all(rebuilt[d] == [*toks, E] for d, toks in docs)
    total = sum(len(t) + 1 for _, t in docs)
    assert sum(whole.column("n_tokens").to_pylist()) == total
    assert whole.num_rows == -(-total // seq_len)
