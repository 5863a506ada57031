"""Validate's distinct-id and cluster-size counts in one scan of their column, however many hash partitions
the memory budget asks for (stages/validate/partitions.py): the same numbers as one pass and as a count
in Python, and as many reads of each file whatever the number of partitions."""

from __future__ import annotations

import json
import math
import os
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_curation.core.manifest import Manifest
from airflow_curation.stages.validate import partitions
from airflow_curation.stages.validate.query_engines import DuckDBEngine
from airflow_curation.stages.validate.view import CuratedView

from .synth import build_run, record_checksums
from .test_bounded_memory import _duplicate_id_across_shards, _run


@pytest.mark.parametrize(
    "rows, per_pass, fanout, want",
    [
        (400, 0, 256, []),
        (400, 400, 256, []),
        (401, 400, 256, [2]),
        (4_000_000, 1_000_000, 256, [4]),
        (256_000_000, 1_000_000, 256, [256]),
        (257_000_000, 1_000_000, 256, [17, 17]),
        (17_500_000_000, 1_000_000, 256, [133, 133]),
        (400, 5, 3, [3, 3, 3, 3]),
    ],
)
def test_levels_cover_the_partitions_the_budget_asks_for(rows, per_pass, fanout, want):
    got = partitions.levels(rows, per_pass, fanout)
    assert got == want
    if got:
        assert math.prod(got) >= math.ceil(rows / per_pass) and max(got) <= fanout


def test_levels_refuse_a_fanout_below_two():
    with pytest.raises(ValueError, match="fan-out of 2"):
        partitions.levels(100, 10, 1)


def _null_keys(uris: dict[str, str]) -> None:
    """A null id in the first shard (and its attrs), a null cluster id in the last shard's dedup attrs."""
    m = Manifest.read(uris["dedup"])
    for uri in [m.shards[0].uri, *m.shards[0].attrs.values()]:
        t = pq.read_table(uri)
        ids = t.column("id").to_pylist()
        ids[1] = None
        schema = t.schema.set(t.schema.get_field_index("id"), pa.field("id", pa.string()))
        pq.write_table(t.set_column(t.schema.get_field_index("id"), "id", pa.array(ids, pa.string())).cast(schema), uri)
    uri = m.shards[-1].attrs["dedup"]
    t = pq.read_table(uri)
    cl = t.column("cluster_id").to_pylist()
    cl[2] = None
    pq.write_table(t.set_column(t.schema.get_field_index("cluster_id"), "cluster_id", pa.array(cl, pa.string())), uri)


def _python_counts(uris: dict[str, str]) -> tuple[int, dict[int, int]]:
    """Distinct ids and cluster sizes, counted with pyarrow and Python sets over the files themselves."""
    m = Manifest.read(uris["dedup"])
    ids = {i for s in m.shards for i in pq.read_table(s.uri, columns=["id"]).column(0).to_pylist() if i is not None}
    members = Counter(
        c
        for s in m.shards
        for c in pq.read_table(s.attrs["dedup"], columns=["cluster_id"]).column(0).to_pylist()
        if c is not None
    )
    return len(ids), dict(sorted(Counter(members.values()).items()))


def _metrics(uri: str, **kw) -> dict:
    engine = DuckDBEngine(CuratedView.from_manifest(Manifest.read(uri)), **kw)
    try:
        return engine.metrics()
    finally:
        engine.close()


def test_many_partitions_count_what_one_pass_and_python_count(tmp_path):
    root = str(tmp_path)
    uris = build_run(root, shards=5, rows=80, stages=("preprocess", "dedup"))
    _duplicate_id_across_shards(uris)
    _null_keys(uris)
    record_checksums(uris)  # the edits stand for a stage's output: validate re-hashes what it reads
    distinct, sizes = _python_counts(uris)
    assert distinct == 398  # 400 rows, one id twice, one null

    # The stage, with 58 partitions (one routing level) against one pass: the whole report's metrics (one
    # thread: DuckDB's avg adds doubles in the order its threads finish, so a mean's last bit can differ).
    spill = tmp_path / "spill"
    spill.mkdir()
    parted = _run(root, uris["dedup"], "parted", ids_per_pass=7, temp_dir=str(spill), threads=1)
    whole = _run(root, uris["dedup"], "whole", ids_per_pass=0, threads=1)
    assert parted["metrics"] == whole["metrics"]
    assert [(c["name"], c["status"], c["observed"]) for c in parted["checks"]] == [
        (c["name"], c["status"], c["observed"]) for c in whole["checks"]
    ]
    m = parted["metrics"]
    assert m["distinct_ids"] == distinct
    assert {int(k): v for k, v in m["clusters"]["sizes"].items()} == sizes
    assert m["clusters"]["clusters"] == sum(sizes.values()) and m["clusters"]["largest"] == max(sizes)
    assert os.listdir(spill) == []  # the partitions (in the run's temp folder) are gone with it

    # Four routing levels of fan-out 3 (81 partitions of 5 ids), straight on the engine.
    deep = _metrics(uris["dedup"], ids_per_pass=5, fanout=3, spill_dir=str(spill), threads=1)
    one = _metrics(uris["dedup"], ids_per_pass=0, threads=1)
    assert json.dumps(deep, sort_keys=True) == json.dumps(one, sort_keys=True)
    assert deep["distinct_ids"] == distinct
    assert {int(k): v for k, v in deep["clusters"]["sizes"].items()} == sizes


def _opens(engine: DuckDBEngine) -> Counter:
    """How many times DuckDB opened each file (its file-system log), by file name within its folder."""
    out: Counter = Counter()
    for (message,) in engine.con.execute("SELECT message FROM duckdb_logs WHERE type = 'FileSystem'").fetchall():
        event = json.loads(message)
        if event.get("op") == "OPEN" and event["path"].endswith(".parquet"):
            out[os.path.join(*event["path"].split(os.sep)[-2:])] += 1
    return out


def test_each_file_is_read_as_often_whatever_the_partitions(tmp_path):
    """At a fixed budget (20 ids a partition) a lake of 8x the rows has 8x the partitions (5 -> 40); each
    shard and dedup attrs file is still opened as many times (one scan of the ids, one of the cluster ids,
    the groups' joins), where one query a partition opened every file once per partition."""
    small = build_run(str(tmp_path / "small"), shards=4, rows=25)
    large = build_run(str(tmp_path / "large"), shards=4, rows=200)
    counts = []
    for uris in (small, large):
        engine = DuckDBEngine(CuratedView.from_manifest(Manifest.read(uris["dedup"])), ids_per_pass=20, trace=True)
        try:
            engine.metrics()
            counts.append(_opens(engine))
        finally:
            engine.close()
    a, b = counts
    assert a == b and a  # the same files (same names in both lakes), opened as many times each
