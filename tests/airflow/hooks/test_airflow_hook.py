"""The ``curation`` connection: lake, backend and storage credentials, kept out of specs and XCom."""

from __future__ import annotations

import json

import pytest
from curation_airflow_helpers import MemoryTaskStateStore
from curation_airflow_helpers import task_context as _context

from airflow_curation.core import storage
from airflow_curation.hooks.curation import CurationHook
from airflow_curation.operators.ingest import IngestOperator

pytestmark = pytest.mark.airflow


def test_connection_settings_and_secrets(monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_CURATION_S3",
        json.dumps(
            {
                "conn_type": "curation",
                "host": "s3://bucket/lake",
                "login": "AKIA",
                "password": "s3cret",
                "extra": {"backend": "slurm", "storage_options": {"s3": {"endpoint_url": "http://127.0.0.1:9"}}},
            }
        ),
    )
    settings = CurationHook("curation_s3").get_conn()
    assert settings["lake"] == "s3://bucket/lake" and settings["backend"] == "slurm"
    assert settings["storage_options"] == {
        "s3": {"endpoint_url": "http://127.0.0.1:9", "key": "AKIA", "secret": "s3cret"}
    }
    env = settings["storage"].to_env()
    assert json.loads(env["CURATION_STORAGE_OPTIONS_S3"])["secret"] == "s3cret"


def test_operator_takes_lake_and_backend_from_the_connection(monkeypatch, tmp_path, small_input):
    work = tmp_path / "jobs"
    monkeypatch.setenv(
        "AIRFLOW_CONN_CURATION_LOCAL",
        json.dumps(
            {
                "conn_type": "curation",
                "host": str(tmp_path / "lake"),
                "extra": {
                    "backend": "local",
                    "backend_options": {"work_dir": str(work)},
                    "storage_options": {"memory": {"marker": "not-a-real-secret"}},
                },
            }
        ),
    )
    op = IngestOperator(
        task_id="ingest",
        inputs=str(small_input),
        dataset="web",
        curation_conn_id="curation_local",
        deferrable=False,
        poll_interval=0.05,
    )
    summary = op.execute(_context(store := MemoryTaskStateStore()))
    assert summary["rows"] == 60 and summary["manifest_uri"].startswith(str(tmp_path / "lake"))
    handle = store.get("curation_job")
    assert handle["job_dir"].startswith(str(work))
    # Storage options reach the job's environment, never the handle that goes to the state store / XCom.
    assert "not-a-real-secret" not in json.dumps(handle)
    assert "not-a-real-secret" not in (work / handle["job_id"] / "spec.json").read_text()
    assert handle["curation_conn_id"] == "curation_local"  # the id, resolved again where the job is followed
    assert "marker" not in storage.options_for("memory://x")  # the task's storage map did not outlive it


def test_test_connection_lists_the_lake(monkeypatch, tmp_path):
    monkeypatch.setenv("AIRFLOW_CONN_CURATION_OK", json.dumps({"conn_type": "curation", "host": str(tmp_path)}))
    monkeypatch.setenv(
        "AIRFLOW_CONN_CURATION_BAD", json.dumps({"conn_type": "curation", "host": "nosuchfs://bucket/lake"})
    )
    ok, message = CurationHook("curation_ok").test_connection()
    assert ok and str(tmp_path) in message
    ok, message = CurationHook("curation_bad").test_connection()
    assert not ok and "cannot list nosuchfs://bucket/lake" in message
