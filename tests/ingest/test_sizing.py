"""Shard sizes follow the target, not the shape of the input: the same records as one file, as a
thousand small files or as one Parquet file of a single row group give shards within 2x of the target,
the same rows and ids, and books that close."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_curation.core.layout import Lake
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.ingest import sizing
from airflow_curation.stages.ingest.sizing import expected_output, group_files, unit_output_bytes
from airflow_curation.stages.ingest.stage import IngestStage

TARGET = 128 * 1024
ROWS = 8000


def _records() -> list[dict]:
    # Zipf-weighted common words: text that compresses about as much as prose (~4x as zstd Parquet).
    rng = random.Random(5)
    words = (
        "the of and to in is that it was for on are as with his they at be this from have or by one had not but "
        "what all were when we there can an your which their said if do will each about how up out them then she "
        "many some so these would other into has more her two like him see time could no make than first been its "
        "who now people my made over did down only way find use may water long little very after words called just"
    ).split()
    weights = [1 / (rank + 1) for rank in range(len(words))]
    return [
        {"id": f"doc-{i}", "text": " ".join(rng.choices(words, weights, k=rng.randrange(20, 150))), "lang": "en"}
        for i in range(ROWS)
    ]


def _layouts(tmp_path, records) -> dict[str, str]:
    lines = [json.dumps(r).encode() + b"\n" for r in records]
    one = tmp_path / "one"
    one.mkdir()
    (one / "all.jsonl").write_bytes(b"".join(lines))
    many = tmp_path / "many"
    many.mkdir()
    for k in range(0, ROWS, 4):  # 2,000 files of four records
        (many / f"part-{k:06d}.jsonl").write_bytes(b"".join(lines[k : k + 4]))
    pqdir = tmp_path / "parquet"
    pqdir.mkdir()
    pq.write_table(pa.Table.from_pylist(records), pqdir / "all.parquet", row_group_size=ROWS)  # one row group
    return {"one": str(one), "many": str(many), "parquet": str(pqdir)}


def _ingest(tmp_path, name: str, folder: str):
    lake = Lake(str(tmp_path / f"lake-{name}"), "web")
    config = {"inputs": [folder], "id_field": "id", "target_shard_bytes": TARGET, "row_group_rows": 64}
    return StageRunner(IngestStage(lake, config, "r1")).run()


@pytest.fixture
def small_units(monkeypatch):
    # Units of four target shards rather than 64 MiB of output, so that the small files make several units.
    monkeypatch.setattr(sizing, "MIN_UNIT_OUTPUT_BYTES", 4 * TARGET)


def test_shards_within_2x_of_the_target_whatever_the_input_files(tmp_path, small_units):
    records = _records()
    results = {name: _ingest(tmp_path, name, folder) for name, folder in _layouts(tmp_path, records).items()}
    assert len(results["many"].units) > 1  # several units, each of whole shards
    for name, m in results.items():
        sizes = [s.bytes / TARGET for s in m.shards]
        assert len(sizes) > 5, name
        assert all(0.5 <= x <= 2 for x in sizes), (name, [round(x, 2) for x in sizes])
        table = pa.concat_tables(pq.read_table(s.uri) for s in m.shards)
        assert table.column("id").to_pylist() == [r["id"] for r in records], name
        assert table.column("text").to_pylist() == [r["text"] for r in records], name
        assert m.accounting["read"] == m.accounting["kept"] == ROWS, name
    counts = [len(m.shards) for m in results.values()]
    assert max(counts) <= 2 * min(counts)


def test_units_are_sized_by_expected_output():
    target = 1 << 20
    plain = [(f"/d/p-{k:04d}.jsonl", {"size": 100_000}) for k in range(500)]  # 50 MB of JSONL
    groups = group_files(plain, target)
    per_unit = unit_output_bytes(target)
    assert per_unit % target == 0 and per_unit >= sizing.MIN_UNIT_OUTPUT_BYTES
    expected = [sum(expected_output(u, i["size"]) for u, i in g) for g in groups]
    assert all(x >= per_unit for x in expected[:-1])
    assert expected[-1] >= target / 2  # a small rest joins the unit before it
    assert [u for g in groups for u, _ in g] == [u for u, _ in plain]
    # Compressed input counts for more output than plain input of the same size.
    assert expected_output("/d/a.jsonl.gz", 1000) > expected_output("/d/a.jsonl", 1000)
    # unit_bytes keeps its meaning: input bytes.
    assert len(group_files(plain, target, unit_bytes=200_000)) == 250


def test_an_array_gets_a_unit_per_task_from_a_small_input():
    """A small input is one unit by default; with ``min_units`` (what a backend running N array tasks sets)
    it is split into N units where there are N files, never more units than files, order kept."""
    target = 256 << 20
    files = [(f"/d/p-{k}.jsonl", {"size": 10_000 + 100 * k}) for k in range(5)]
    assert len(group_files(files, target)) == 1
    for n in (2, 3, 4, 5, 8):
        groups = group_files(files, target, min_units=n)
        assert len(groups) == min(n, len(files)), n
        assert [u for g in groups for u, _ in g] == [u for u, _ in files]
    assert len(group_files(files[:1], target, min_units=4)) == 1
    assert len(group_files(files, target, unit_bytes=1 << 30, min_units=4)) == 1  # unit_bytes wins
