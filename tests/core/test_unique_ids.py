"""Ingest's check of caller ids across units in bounded memory (core/unique_ids.py): the run's id
hashes routed into partition files, each searched alone, the same repeats as a search of them all at once."""

from __future__ import annotations

import os
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_curation.core import unique_ids
from airflow_curation.core.manifest import ShardEntry


def _shards(tmp_path, ids_per_shard: list[list[str]]) -> list[ShardEntry]:
    shards = []
    for k, ids in enumerate(ids_per_shard):
        uri = str(tmp_path / f"s{k:03d}.parquet")
        pq.write_table(pa.table({"id": ids, "source": [f"src{k}.jsonl"] * len(ids), "text": ids}), uri)
        shards.append(ShardEntry(shard_id=f"s{k:03d}", uri=uri, rows=len(ids), bytes=0, checksum=""))
    return shards


def _expected(ids_per_shard: list[list[str]]) -> list[tuple]:
    first, found = {}, []
    for k, ids in enumerate(ids_per_shard):
        for row, i in enumerate(ids):
            place = (f"s{k:03d}", row, f"src{k}.jsonl")
            if i in first:
                found.append((i, first[i], place))
            else:
                first[i] = place
    return found


@pytest.fixture
def corpus() -> list[list[str]]:
    rng = random.Random(7)
    shards = [[f"doc-{k}-{r}" for r in range(300)] for k in range(12)]
    for _ in range(25):  # ids repeated across shards, some three times
        a, b = rng.sample(range(12), 2)
        shards[b][rng.randrange(300)] = shards[a][rng.randrange(300)]
    return shards


@pytest.mark.parametrize("rows_in_memory", [None, 1000, 97])
def test_repeats_are_those_of_a_search_of_all_ids_at_once_whatever_the_partitions(
    tmp_path, corpus, rows_in_memory, monkeypatch
):
    routed = []
    route = unique_ids._route
    monkeypatch.setattr(unique_ids, "_route", lambda shards, paths: (routed.append(len(paths)), route(shards, paths)))
    temp = tmp_path / "tmp"
    temp.mkdir()
    got = unique_ids.repeated_ids(_shards(tmp_path, corpus), rows_in_memory, str(temp))
    assert sorted(got.listed) == sorted(_expected(corpus)) and len(got.listed) >= 20
    assert got.total == len(got.listed)
    # 3,600 rows: one partition by default, 4 and 38 with the smaller budgets; no partition file left.
    assert routed == [{None: 1, 1000: 4, 97: 38}[rows_in_memory]]
    assert os.listdir(temp) == []


def test_partitions_stop_at_the_fan_out(tmp_path, corpus, monkeypatch):
    """At most ``FANOUT`` partition files open at once: past it a partition holds more records."""
    monkeypatch.setattr(unique_ids, "FANOUT", 5)
    routed = []
    route = unique_ids._route
    monkeypatch.setattr(unique_ids, "_route", lambda shards, paths: (routed.append(len(paths)), route(shards, paths)))
    got = unique_ids.repeated_ids(_shards(tmp_path, corpus), rows_in_memory=97)
    assert routed == [5] and sorted(got.listed) == sorted(_expected(corpus))


def test_a_hash_shared_by_different_ids_is_no_repeat(tmp_path, monkeypatch):
    """Rows whose hashes collide are read again for their exact ids: only equal ids are repeats."""
    monkeypatch.setattr(unique_ids, "_hashes", lambda ids: np.array([len(i) for i in ids.to_pylist()], np.uint64))
    ids = [["aa", "bb", "cc"], ["dd", "bb"], ["ee", "cc", "ff"]]
    got = unique_ids.repeated_ids(_shards(tmp_path, ids), rows_in_memory=2)
    assert got.total == 2 and sorted(got.listed) == [
        ("bb", ("s000", 1, "src0.jsonl"), ("s001", 1, "src1.jsonl")),
        ("cc", ("s000", 2, "src0.jsonl"), ("s002", 1, "src2.jsonl")),
    ]


def test_no_shard_and_no_repeat(tmp_path):
    assert unique_ids.repeated_ids([]) == ([], 0)
    assert unique_ids.repeated_ids(_shards(tmp_path, [["a", "b"], ["c"]]), rows_in_memory=1) == ([], 0)


def test_past_the_listed_maximum_the_repeats_are_counted_not_listed(tmp_path, corpus):
    """A corpus ingested twice repeats every id: the places of the first ``listed_max`` repeated ids are
    found, the rest counted (a place for each would hold the run's ids in memory again)."""
    twice = corpus + corpus
    got = unique_ids.repeated_ids(_shards(tmp_path, twice), rows_in_memory=1000, listed_max=50)
    every = _expected(twice)
    assert got.total == len(every) > 3000  # each of the first copy's distinct ids once more, or more
    assert 50 <= len(got.listed) < 200 and set(got.listed) <= set(every)


def test_an_id_hashes_the_same_in_every_layout():
    """Ids come as any Arrow string layout, or integers (a user's file): one hash for one text, the line keys'
    hash (``core/boilerplate.py``), computed without DuckDB (which imports pandas into the stage's process)."""
    from airflow_curation.core.boilerplate import line_keys, string_hashes

    ids = ["a", "bb", "ünï", "12"]
    want = string_hashes(pa.array(ids))
    for arr in (
        pa.array(ids, pa.large_string()),
        pa.array(ids, pa.string_view()),
        pa.array(ids).dictionary_encode(),
        pa.chunked_array([pa.array(ids[:2]), pa.array(ids[2:])]),
    ):
        assert string_hashes(arr).tolist() == want.tolist()
    assert string_hashes(pa.array([12], pa.int64())).tolist() == want[3:].tolist()
    assert line_keys(pa.array(ids))[0].tolist() == want.tolist()
    assert len(set(want.tolist())) == 4
