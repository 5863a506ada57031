"""The local backend runs real job subprocesses: submit, status, logs, cancel, reconnect."""

from __future__ import annotations

import json
import os
import time

from airflow_curation.backends import JobState, get_backend
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest
from airflow_curation.jobs.spec import JobSpec


def _wait(backend, handle, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        st = backend.status(handle)
        if st.state.finished:
            return st
        time.sleep(0.2)
    raise AssertionError(f"job did not finish: {backend.status(handle)}")


def _input(tmp_path, files=1, docs=50):
    src = tmp_path / "in"
    src.mkdir(exist_ok=True)
    for f in range(files):
        (src / f"{f:03d}.jsonl").write_text(
            "".join(json.dumps({"text": f"doc {f}-{i} " + "w " * 200}) + "\n" for i in range(docs))
        )
    return src


def test_submit_status_logs_and_result(tmp_path):
    lake = Lake(str(tmp_path / "lake"), "web", "2026-11-30")
    backend = get_backend("local", work_dir=str(tmp_path / "jobs"))
    spec = JobSpec("ingest", lake.to_dict(), "run-a", {"inputs": [str(_input(tmp_path))]})
    handle = backend.submit(spec)
    assert json.loads(json.dumps(handle)) == handle  # a handle must survive the task state store
    st = _wait(backend, handle)
    assert st.state is JobState.SUCCEEDED, st.message
    assert st.result["rows"] == 50 and st.result["manifest_uri"] == spec.manifest_uri
    assert Manifest.read(spec.manifest_uri).rows == 50
    text, offset = backend.logs(handle)
    assert "ingest: 1 units planned" in text and offset == len(text.encode())
    assert backend.logs(handle, offset) == ("", offset)
    # A fresh backend object (a restarted worker, the triggerer) sees the same job through the handle.
    assert get_backend("local", **backend.options()).status(handle).state is JobState.SUCCEEDED


def test_failed_job_reports_its_error(tmp_path):
    backend = get_backend("local", work_dir=str(tmp_path / "jobs"))
    spec = JobSpec(
        "ingest", Lake(str(tmp_path / "lake"), "web").to_dict(), "run-b", {"inputs": [str(tmp_path / "missing")]}
    )
    st = _wait(backend, backend.submit(spec))
    assert st.state is JobState.FAILED and "does not exist" in st.message


def test_cancel_kills_the_job_and_its_children(tmp_path):
    # The "interpreter" is a script that starts a child and waits: the job is running for as long as the
    # test needs, whatever the machine's speed, and has a child that cancel must kill too.
    python = tmp_path / "slow-python"
    python.write_text("#!/bin/sh\nsleep 300 &\nwait\n")
    python.chmod(0o755)
    backend = get_backend("local", work_dir=str(tmp_path / "jobs"), python=str(python))
    spec = JobSpec(
        "ingest", Lake(str(tmp_path / "lake"), "web").to_dict(), "run-c", {"inputs": [str(_input(tmp_path))]}
    )
    handle = backend.submit(spec)
    deadline = time.time() + 60
    while len(_live_group_members(handle["pid"])) < 2 and time.time() < deadline:
        time.sleep(0.05)
    assert backend.status(handle).state is JobState.RUNNING
    assert len(_live_group_members(handle["pid"])) == 2  # the job and its child
    backend.cancel(handle, grace_seconds=5)
    assert backend.status(handle).state is JobState.CANCELLED
    assert _live_group_members(handle["pid"]) == []  # the child too, not only the leader
    backend.cancel(handle)  # idempotent


def _live_group_members(pgid: int) -> list[int]:
    """Processes of a process group that are not zombies (a zombie is dead, waiting to be reaped)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = open(f"/proc/{entry}/stat").read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry))
    return members


def test_dead_process_without_result_is_a_failure(tmp_path):
    backend = get_backend("local", work_dir=str(tmp_path / "jobs"))
    handle = {
        "backend": "local",
        "job_id": "x",
        "pid": 2**22 - 1,
        "start_time": "1",
        "job_dir": str(tmp_path),
        "log": str(tmp_path / "nope.log"),
        "result": str(tmp_path / "nope.json"),
    }
    st = backend.status(handle)
    assert st.state is JobState.FAILED and "ended without a result" in st.message
