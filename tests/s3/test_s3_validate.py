"""Validate over a lake on S3 (moto on loopback): DuckDB reads the shards and attrs in place through
fsspec, Daft through its own S3 client, both in a job subprocess with the options from the environment."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from airflow_curation.core import storage
from airflow_curation.jobs.spec import JobSpec

from validate.synth import build_run  # tests/ is on sys.path (rootdir-relative packages)

pytestmark = pytest.mark.s3


@pytest.mark.parametrize("engine", ["duckdb", "daft"])
def test_validate_reads_an_s3_lake_in_place(s3_bucket, tmp_path, engine):
    root = f"s3://{s3_bucket}/lake"
    uris = build_run(root, shards=2, rows=40)
    spec = JobSpec(stage="validate", lake={"root": root, "dataset": "demo", "snapshot": None}, run_id=engine,
                   config={"input_manifest": uris["dedup"], "engine": engine, "max_duplicate_rate": 0.9})
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(spec.to_json())
    proc = subprocess.run([sys.executable, "-m", "airflow_curation.jobs", "run", str(spec_path)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(storage.read_bytes(f"{root}/demo/_manifests/{engine}/report.json"))
    assert report["status"] == "passed", report["summary"]
    assert report["metrics"]["rows"] == 80 and [f["label"] for f in report["metrics"]["funnel"]] == [
        "ingested", "quality", "dedup"]
    assert b"<svg" in storage.read_bytes(f"{root}/demo/_manifests/{engine}/report.html")
