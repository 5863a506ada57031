"""A unit's failure is reported even when its failure marker cannot be written (the disk that failed the unit
is full, the object store refuses a write): before, the marker's error escaped the unit, and the mapper
stopped every other unit's work with it."""

from __future__ import annotations

import errno

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_curation.core.checkpoint import CheckpointStore
from airflow_curation.core.layout import Lake
from airflow_curation.stages import stage_class
from airflow_curation.stages.base import StageFailed, StageRunner


def test_a_failure_marker_that_cannot_be_written_fails_only_its_unit(tmp_path, monkeypatch):
    raw = pa.array([b"caf\xe9 au lait"], pa.binary())  # Latin-1, not UTF-8: the unit fails
    files = []
    for name, text in (
        ("a", pa.array(["one"])),
        ("bad", pa.Array.from_buffers(pa.string(), 1, raw.buffers())),
        ("c", pa.array(["two"])),
    ):
        files.append(str(tmp_path / f"{name}.parquet"))
        pq.write_table(pa.table({"id": [name], "text": text}), files[-1])

    def disk_full(self, unit_id, error, attempt):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(CheckpointStore, "mark_failed", disk_full)
    config = {"inputs": files, "output_dir": str(tmp_path / "out"), "workers": 1}
    stage = stage_class("pii")(Lake(str(tmp_path / "lake"), "ds"), config, "r1")
    with pytest.raises(StageFailed, match="1 of 3 units failed.*bad: BadRows"):
        StageRunner(stage).run()
    assert sorted(p.name for p in (tmp_path / "out").glob("*.parquet")) == ["a.parquet", "c.parquet"]
