"""The pipeline DAG end to end with ``backend=slurm``: ``dag.test()`` submits the ingest job to the real
one-node Slurm, the checkpoint sensor defers and gates on it, and the manifest is complete."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest

from airflow_curation.core import storage
from airflow_curation.core.layout import Lake, curation_run_id
from airflow_curation.core.manifest import Manifest

pytestmark = [pytest.mark.airflow, pytest.mark.slurm]
REPO = Path(__file__).resolve().parents[3]


def _write_jsonl(path: Path, n: int, start: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for i in range(start, start + n):
            f.write(json.dumps({"text": f"slurm document {i} on curation and data quality " * 3}) + "\n")


@pytest.fixture
def pipeline(airflow_db, slurm_cluster, monkeypatch):
    monkeypatch.setenv("CURATION_POLL_INTERVAL", "0.5")
    spec = importlib.util.spec_from_file_location("curation_pipeline_on_slurm", REPO / "dags" / "curation_pipeline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def test_pipeline_dag_on_slurm(pipeline, tmp_path):
    inputs = tmp_path / "in"
    _write_jsonl(inputs / "a.jsonl", 40)
    _write_jsonl(inputs / "b.jsonl", 25, start=40)
    (inputs / "bad.jsonl").write_text('{"text": "kept"}\nnot json\n')
    lake_root = tmp_path / "lake"

    dag_run = pipeline.test(
        logical_date=datetime(2026, 11, 27, tzinfo=timezone.utc),
        run_conf={
            "input": str(inputs),
            "lake": str(lake_root),
            "dataset": "web",
            "backend": "slurm",
            # Its repetitive generated documents all fail the gopher preset: validate would rightly refuse an
            # empty curated set, so the gate asks for none; validate still runs on Slurm.
            "max_failed_fraction": 0.0,
            "min_rows": 0,
        },
    )
    assert dag_run.state == "success", dag_run.state

    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.scalars(XComModel.get_many(run_id=dag_run.run_id, dag_ids=dag_run.dag_id)).all()
        xcoms = {(r.task_id, r.key): XComModel.deserialize_value(r) for r in rows}
    job = xcoms[("ingest.launch", "return_value")]["job"]
    assert job["backend"] == "slurm" and job["job_id"].isdigit()
    out = subprocess.run(["scontrol", "show", "job", "-o", job["job_id"]], capture_output=True, text=True).stdout
    assert "JobState=COMPLETED" in out and "JobName=curation-ingest" in out

    lake = Lake(str(lake_root), "web", "2026-11-27")
    manifest = Manifest.read(lake.manifest_uri(curation_run_id(dag_run.run_id, lake.snapshot), "ingest"))
    assert manifest.status == "complete" and manifest.rows == 66
    assert manifest.accounting["read"] == 67 and sum(manifest.accounting["quarantined"].values()) == 1
    assert all(storage.exists(s.uri) for s in manifest.shards)
    assert xcoms[("ingest.checkpoints", "return_value")]["rows"] == 66
    # The job's folder (script, spec, log, result) is under the lake's _jobs/ for this run.
    job_dir = Path(job["job_dir"])
    assert job_dir.parent == Path(lake.jobs_dir(curation_run_id(dag_run.run_id, lake.snapshot), "ingest"))
    assert (job_dir / "job.sh").exists() and "ingest" in (job_dir / "job.log").read_text()
