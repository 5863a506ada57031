"""The ``ray`` backend against a real Ray cluster (head with dashboard and job server, on loopback).

An enrich job is submitted through the Ray Job Submission API; its driver joins the cluster, and the
stage's engine actor (transformers engine) runs there. The cluster is a head started by a helper process
of this test and stopped by it (never ``ray stop``, which would stop other users' Ray too).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import pyarrow.parquet as pq
import pytest
from enrich_helpers import make_docs, write_lake
from process_helpers import free_port, stop_group

from airflow_curation.backends import JobState
from airflow_curation.core.manifest import Manifest
from airflow_curation.hooks.factory import backend_for
from airflow_curation.jobs.spec import JobSpec

HEAD = r"""
import os, sys, ray
ray.init(num_cpus=2, include_dashboard=True, dashboard_host="127.0.0.1", dashboard_port=int(sys.argv[1]),
         _temp_dir=sys.argv[2])
print("READY", flush=True)
sys.stdin.read()  # until the test closes our stdin
ray.shutdown()
"""


@pytest.fixture(scope="module")
def ray_cluster():
    port = free_port()
    temp = tempfile.mkdtemp(prefix="rt-", dir="/tmp")  # short: Ray's socket paths have a length limit
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    proc = subprocess.Popen(
        [sys.executable, "-c", HEAD, str(port), temp],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        start_new_session=True,
    )
    address = f"http://127.0.0.1:{port}"
    try:
        assert proc.stdout.readline().strip() == "READY"
        from ray.job_submission import JobSubmissionClient

        deadline = time.monotonic() + 180
        while True:  # the job server comes up with the dashboard, a little after ray.init returns
            try:
                JobSubmissionClient(address).list_jobs()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        yield address
    finally:
        proc.stdin.close()  # the head script shuts Ray down and exits
        stop_group(proc, temp, wait_s=60)


def test_enrich_job_runs_on_an_existing_ray_cluster(ray_cluster, tmp_path, llama_score):
    docs = make_docs(12)
    lake, uri = write_lake(str(tmp_path), {"s0": docs})
    spec = JobSpec(
        stage="enrich",
        lake=lake.to_dict(),
        run_id="rayjob",
        config={
            "input_manifest": uri,
            "task": "score",
            "model": llama_score,
            "model_runtime": "transformers",
            "mapper": "ray",
            "dtype": "float32",
            "batch_size": 4,
            "checkpoint_rows": 5,
        },
    )
    # Storage options as a curation connection would add them: the cluster must never be sent them.
    secret = "s3cr3t-not-for-the-dashboard"
    backend = backend_for(
        "ray",
        {
            "address": ray_cluster,
            "python": sys.executable,
            "env": {
                "RAY_AUTH_MODE": "disabled",
                "PYTHONPATH": os.getcwd(),
                "CURATION_STORAGE_OPTIONS_S3": json.dumps({"key": "AKIA-FAKE", "secret": secret}),
            },
        },
    )
    handle = backend.submit(spec)
    assert handle["dashboard_url"] == f"{ray_cluster}/#/jobs/{handle['job_id']}"
    from ray.job_submission import JobSubmissionClient

    info = JobSubmissionClient(ray_cluster).get_job_info(handle["job_id"])  # what the dashboard shows
    assert info.runtime_env["env_vars"]["PYTHONPATH"] == os.getcwd()
    assert secret not in json.dumps(info.runtime_env) and secret not in (info.entrypoint or "")
    # A restarted worker rebuilds the backend from the handle's options alone.
    again = backend_for("ray", backend.options())
    deadline = time.monotonic() + 400
    while not (status := again.status(handle)).state.finished:
        assert time.monotonic() < deadline, again.logs(handle)[0][-3000:]
        time.sleep(1)
    logs, offset = again.logs(handle)
    assert status.state == JobState.SUCCEEDED, (status.message, logs[-3000:])
    assert status.result["manifest_uri"] == spec.manifest_uri and status.result["rows"] == 12
    assert "enrich" in logs and again.logs(handle, offset)[0] == ""
    out = pq.read_table(Manifest.read(spec.manifest_uri).shards[0].attrs["enrich-score"])
    assert out.column("id").to_pylist() == [d["id"] for d in docs]
    assert all(out.column("enriched").to_pylist()) and None not in out.column("score").to_pylist()
    again.cancel(handle)  # idempotent on a finished job
    assert again.status(handle).state == JobState.SUCCEEDED
