"""The pipeline DAG overlaps ingest and preprocess, shown by a real ``dag.test()`` from checkpoint records.

dag.test() runs tasks one at a time in this process (and runs each deferred trigger inline, to its end),
but the stage jobs are local-backend subprocesses, so two jobs do run at the same time: ingest's job is
still working when ``ingest_first_shards`` (a quorum gate) opens and preprocess's job starts. To make the
overlap certain rather than likely, ingest's job holds before its second unit (``CURATION_HOLD``) until
preprocess has checkpointed a shard; if preprocess did not stream, the hold would be released only by the
watcher's limit and the timestamps below would show no overlap.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from airflow_curation.core.layout import Lake, curation_run_id
from airflow_curation.core.manifest import Manifest

pytestmark = pytest.mark.airflow
REPO = Path(__file__).resolve().parents[2]
AFTER_PREPROCESS = r"(?!ingest|preprocess).*"  # the later stages are marked successful, not run


def test_preprocess_starts_while_ingest_still_runs(airflow_db, tmp_path, monkeypatch):
    inputs = tmp_path / "in"
    inputs.mkdir()
    for k in range(3):  # three input files of ~8 KB; 4 KB units: three ingest units
        with open(inputs / f"part-{k}.jsonl", "w") as f:
            for i in range(30):
                f.write(json.dumps({"text": f"file {k} document {i} " + "about curation and data quality " * 8}) + "\n")
    lake_root = tmp_path / "lake"
    snapshot = Lake(str(lake_root), "web", "2026-11-20")
    release = tmp_path / "release-ingest"
    monkeypatch.setenv("CURATION_POLL_INTERVAL", "0.2")
    monkeypatch.setenv("CURATION_HOLD", f"ingest.before_unit@2={release}")  # read by the jobs, not by this process

    pre_records = os.path.join(snapshot.base, "_checkpoints", "preprocess", "*", "*.json")
    stop = threading.Event()

    def release_when_preprocess_has_a_shard() -> None:
        deadline = time.monotonic() + 240  # only so that a broken stream cannot hang the test
        while not stop.is_set() and time.monotonic() < deadline:
            if [p for p in glob.glob(pre_records) if not p.endswith(".failed.json")]:
                break
            time.sleep(0.05)
        release.touch()

    watcher = threading.Thread(target=release_when_preprocess_has_a_shard, daemon=True)
    watcher.start()
    spec = importlib.util.spec_from_file_location(
        "curation_pipeline_stream_test", REPO / "dags" / "curation_pipeline.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        dag_run = module.dag.test(
            logical_date=datetime(2026, 11, 20, tzinfo=timezone.utc),
            mark_success_pattern=AFTER_PREPROCESS,
            run_conf={
                "input": str(inputs),
                "lake": str(lake_root),
                "dataset": "web",
                "ingest_unit_size": "4KB",
                "stream_quorum": 0.01,
            },
        )
    finally:
        stop.set()
        release.touch()
        watcher.join()
    assert dag_run.state == "success", dag_run.state

    run_id = curation_run_id(dag_run.run_id, snapshot.snapshot)
    ingest = Manifest.read(snapshot.manifest_uri(run_id, "ingest"))
    pre = Manifest.read(snapshot.manifest_uri(run_id, "preprocess"))
    assert ingest.status == "complete" and len(ingest.units) == 3
    assert pre.status == "complete" and pre.accounting["read"] == ingest.rows
    assert [s.shard_id for s in pre.shards] == [s.shard_id for s in ingest.shards]

    def records(stage: str, fingerprint: str) -> list[dict]:
        folder = os.path.join(snapshot.base, "_checkpoints", stage, fingerprint)
        return [json.load(open(p)) for p in sorted(glob.glob(os.path.join(folder, "*.json"))) if ".failed" not in p]

    ing, prep = records("ingest", ingest.fingerprint), records("preprocess", pre.fingerprint)
    assert len(ing) == 3 and len(prep) == len(pre.shards)
    # the overlap, from the checkpoint records: preprocess's first unit began before ingest's last unit ended
    assert min(r["started_at"] for r in prep) < max(r["finished_at"] for r in ing)
    # and it began on shards of the units ingest had already checkpointed then
    first = min(prep, key=lambda r: r["started_at"])
    producer = next(r for r in ing if any(o["shard_id"] == first["unit_id"] for o in r["outputs"]))
    assert producer["finished_at"] <= first["started_at"]
