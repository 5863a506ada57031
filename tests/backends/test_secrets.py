"""Secrets on disk, local and Ray backends: the lake's storage options (as the Airflow layer hands them
to a backend, in ``env``) reach a local job through its process environment only, and are never sent
in a Ray job's runtime environment (which the dashboard and the job API show); nor is any other
credential, which the Ray backend refuses."""

from __future__ import annotations

import hashlib
import json
import sys
import time
import uuid
from pathlib import Path

import pytest

from airflow_curation.backends import JobState, get_backend
from airflow_curation.core.layout import Lake
from airflow_curation.jobs.spec import JobSpec

WRAPPER = """#!/bin/sh
# Records a digest of the storage options the job got (never the value), then runs the real interpreter.
printf '%s' "$CURATION_STORAGE_OPTIONS_S3" | sha256sum | cut -d' ' -f1 > "$0.digest"
exec {python} "$@"
"""


def _secret_env() -> tuple[str, dict[str, str]]:
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    return secret, {"CURATION_STORAGE_OPTIONS_S3": json.dumps({"key": "AKIA-FAKE", "secret": secret})}


def _files_holding(root: Path, needle: str) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes())


def test_local_job_gets_the_secret_in_its_environment_only(tmp_path):
    secret, env = _secret_env()
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.jsonl").write_text(json.dumps({"text": "one document"}) + "\n")
    lake = Lake(str(tmp_path / "lake"), "web")
    wrapper = tmp_path / "python"
    wrapper.write_text(WRAPPER.format(python=sys.executable))
    wrapper.chmod(0o755)
    spec = JobSpec("ingest", lake.to_dict(), "run-s", {"inputs": [str(src)]})
    # Job folders where the operator puts them: under the lake's _jobs/.
    backend = get_backend("local", work_dir=lake.jobs_dir("run-s", "ingest"), python=str(wrapper), env=env)
    handle = backend.submit(spec)
    deadline = time.time() + 120
    while not (st := backend.status(handle)).state.finished:
        assert time.time() < deadline
        time.sleep(0.2)
    assert st.state is JobState.SUCCEEDED, st.message
    digest = Path(f"{wrapper}.digest").read_text().strip()
    assert digest == hashlib.sha256(env["CURATION_STORAGE_OPTIONS_S3"].encode()).hexdigest()
    assert _files_holding(tmp_path, secret) == []  # spec, log, result, manifest, checkpoints, shards
    assert secret not in json.dumps(handle)


class _RecordingRayClient:
    def __init__(self) -> None:
        self.submitted: list[dict] = []

    def submit_job(self, **kwargs) -> str:
        self.submitted.append(kwargs)
        return kwargs["submission_id"]


def test_ray_runtime_env_carries_no_storage_options(tmp_path, monkeypatch, caplog):
    secret, env = _secret_env()
    client = _RecordingRayClient()
    backend = get_backend(
        "ray",
        address="http://ray-head:8265",
        env={**env, "PLAIN": "1"},
        runtime_env={"env_vars": {"CURATION_STORAGE_OPTIONS_GCS": secret, "OTHER": "2"}, "pip": ["x"]},
        client=client,
    )
    spec = JobSpec("validate", Lake(str(tmp_path / "lake"), "web").to_dict(), "run-r", {})
    handle = backend.submit(spec)
    [sent] = client.submitted
    assert sent["runtime_env"] == {"env_vars": {"PLAIN": "1", "OTHER": "2"}, "pip": ["x"]}
    assert secret not in json.dumps(sent) and secret not in json.dumps(handle)
    assert "CURATION_STORAGE_OPTIONS_GCS, CURATION_STORAGE_OPTIONS_S3" in caplog.text
    assert _files_holding(tmp_path, secret) == []
    assert backend.runtime_env["env_vars"]["CURATION_STORAGE_OPTIONS_GCS"] == secret  # options left as given


@pytest.mark.parametrize(
    "options",
    [
        {"env": {"AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI-fake"}},
        {"env": {"HF_TOKEN": "hf_fake"}},
        {"runtime_env": {"env_vars": {"AIRFLOW_CONN_DB": "postgres://u:pw@db/x"}}},
        {"runtime_env": {"env_vars": {"DATABASE_URL": "postgresql://u:pw123@db/x"}}},
    ],
)
def test_ray_refuses_credentials_it_would_have_to_send(tmp_path, monkeypatch, options):
    """A credential other than the lake's storage options (which the Airflow layer adds and the backend
    leaves out) would be shown in the dashboard: the backend refuses it, naming it, before any submit."""
    client = _RecordingRayClient()
    with pytest.raises(ValueError, match=r"(AWS_SECRET_ACCESS_KEY|HF_TOKEN|AIRFLOW_CONN_DB|DATABASE_URL): credentials"):
        backend = get_backend("ray", address="http://ray-head:8265", **options, client=client)
        backend.submit(JobSpec("validate", Lake(str(tmp_path / "lake"), "web").to_dict(), "run-r", {}))
    assert client.submitted == []
