"""Phase 1 keeps each shard's ids and keep mask in a small checked file, and phase 3 reads it instead of the
shard and its attrs (at plan scale a second pass over every shard's bytes)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_curation.core.integrity import IntegrityError
from airflow_curation.core.layout import Lake
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.dedup import phases
from airflow_curation.stages.dedup.stage import DedupStage


def _run(tmp, files, name, **config) -> tuple[dict[str, pa.Table], Lake]:
    lake = Lake(str(tmp / f"lake-{name}"), "ds")
    out = tmp / f"out-{name}"
    manifest = StageRunner(DedupStage(lake, {"inputs": files, "output_dir": str(out), **config}, "r1")).run()
    assert manifest.status == "complete"
    return {os.path.basename(f): pq.read_table(str(out / os.path.basename(f))) for f in files}, lake


def _ids_files(lake: Lake) -> list[str]:
    return sorted(str(p) for p in Path(lake.path("dedup")).glob("*/spill/*.ids.arrow"))


def test_ids_and_keep_round_trip_and_a_damaged_file_fails_naming_itself(tmp_path, flip_byte):
    uri = str(tmp_path / "s.ids.arrow")
    ids = pa.chunked_array([pa.array(["a", "b"]), pa.array(["c"])])
    keep = np.array([True, False, True])
    phases.write_ids(uri, ids, keep)
    got_ids, got_keep = phases.read_ids(uri, 3)
    assert got_ids.to_pylist() == ["a", "b", "c"] and got_keep.tolist() == [True, False, True]
    with pytest.raises(IntegrityError, match=r"s\.ids\.arrow has 3 rows, its shard 4"):
        phases.read_ids(uri, 4)
    flip_byte(uri)
    with pytest.raises(IntegrityError, match=r"s\.ids\.arrow is unreadable \(checksum mismatch\).*delete it"):
        phases.read_ids(uri)
    data = open(uri, "rb").read()
    with open(uri, "wb") as f:  # cut short, as a killed writer without the atomic rename would leave it
        f.write(data[: len(data) // 2])
    with pytest.raises(IntegrityError, match="no end marker"):
        phases.read_ids(uri)


def test_phase_3_reads_the_ids_file_and_labels_as_from_the_shards(nd_files, tmp_path, monkeypatch):
    """Every shard gets an ids file in phase 1; phase 3's labels are the same as where phase 1 wrote none (a
    lake signed before: phase 3 then reads the shard and its attrs, verified)."""
    reads = []
    real = phases.read_ids
    monkeypatch.setattr(phases, "read_ids", lambda *a: reads.append(a[0]) or real(*a))
    with_ids, lake = _run(tmp_path, nd_files, "ids", memory_budget=4096)
    assert sorted(reads) == _ids_files(lake) and len(reads) == len(nd_files)
    reads.clear()
    monkeypatch.setattr(phases, "write_ids", lambda *a: None)
    without, lake_without = _run(tmp_path, nd_files, "no-ids", memory_budget=4096)
    assert not _ids_files(lake_without) and not reads
    for name in with_ids:
        assert with_ids[name].equals(without[name]), name
