"""The pipeline DAG runs ingest -> preprocess in a real ``dag.test()`` (local backend, Dask in the job)."""

from __future__ import annotations

import importlib.util
import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from airflow_curation.core.layout import Lake, curation_run_id
from airflow_curation.core.manifest import Manifest

from . import corpus

pytestmark = pytest.mark.airflow
REPO = Path(__file__).resolve().parents[2]


def test_pipeline_runs_ingest_then_preprocess(airflow_db, tmp_path, monkeypatch):
    monkeypatch.setenv("CURATION_POLL_INTERVAL", "0.2")
    spec = importlib.util.spec_from_file_location(
        "curation_pipeline_preprocess_test", REPO / "dags" / "curation_pipeline.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    inputs = tmp_path / "in"
    inputs.mkdir()
    docs = corpus.prose_docs(limit=40)
    with open(inputs / "docs.jsonl", "w") as f:
        f.writelines(json.dumps({"text": t}) + "\n" for t in docs + [""])

    dag_run = module.dag.test(
        logical_date=datetime(2026, 11, 26, tzinfo=UTC),
        run_conf={"input": str(inputs), "lake": str(tmp_path / "lake"), "dataset": "web", "preset": "gopher,c4"},
    )
    assert dag_run.state == "success", dag_run.state

    lake = Lake(str(tmp_path / "lake"), "web", "2026-11-26")
    run_id = curation_run_id(dag_run.run_id, lake.snapshot)
    # The gate opens on the shards' checkpoints; the job writes its final manifest just after.
    deadline = time.monotonic() + 300
    while (manifest := Manifest.read(lake.manifest_uri(run_id, "preprocess"))).status == "planned":
        assert time.monotonic() < deadline, "the preprocess job never finished its manifest"
        time.sleep(0.2)
    assert manifest.status == "complete" and manifest.config["preset"] == "gopher,c4"
    acc = manifest.accounting
    assert (
        acc["read"]
        == Manifest.read(lake.manifest_uri(run_id, "ingest")).rows
        == acc["kept"] + sum(acc["dropped"].values())
    )
    assert acc["read"] == 40 and acc["kept"] > 0 and acc["dropped"]  # ingest quarantines the empty line
    for shard in manifest.shards:
        attrs = pq.read_table(shard.attrs["preprocess"], columns=["id", "keep", "drop_reason"])
        assert attrs.num_rows == shard.rows
