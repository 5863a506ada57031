"""Issue 9: the worker process running a stage operator is SIGKILLed while its job runs; the task's
retry reconnects to that same job, and exactly one job process ever ran.

tests/airflow/operators/test_airflow_operator.py plays the crash with two operator instances in one process (and
tests/airflow/test_airflow_dag.py with an exception in a real DAG run); here the worker is a real
process (``airflow_worker.py``), polling its job in place (``deferrable=False``), and dies by SIGKILL.
The job waits at a gate (``Gate`` of tests/airflow) so that it is certainly still running when the
worker dies and when the retry looks at it, without any timing assumption.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from curation_airflow_helpers import Gate, job_dirs, pid_alive, write_jsonl

from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest
from reliability.airflow_worker import SNAPSHOT, FileTaskStateStore

pytestmark = pytest.mark.airflow

TESTS = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).with_name("airflow_worker.py")


class CountingGate(Gate):
    """A gate whose interpreter also records each launch (its pid, which the job keeps) before waiting."""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        self.launches = folder / "launches"
        script = self.python.read_text()
        self.python.write_text(script.replace("#!/bin/sh\n", f'#!/bin/sh\necho $$ >> "{self.launches}"\n', 1))

    def launched(self) -> list[int]:
        return [int(x) for x in self.launches.read_text().split()] if self.launches.exists() else []


@pytest.fixture
def gate(tmp_path):
    g = CountingGate(tmp_path / "gate")
    yield g
    g.open()  # a test that failed half-way must not leave a job waiting forever (tiny inputs)


@pytest.fixture
def start_worker(tmp_path, gate):
    """Starts a worker process for this test's task; any still running at the end is killed."""
    started: list[subprocess.Popen] = []

    def start(name: str) -> subprocess.Popen:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(p for p in (str(TESTS / "airflow"), os.environ.get("PYTHONPATH")) if p),
        }
        args = [
            str(tmp_path / "task_state.json"),
            str(tmp_path / "lake"),
            str(tmp_path / "input"),
            str(tmp_path / "jobs"),
            str(gate.python),
            str(tmp_path / f"{name}.result.json"),
        ]
        with open(tmp_path / f"{name}.log", "wb") as log:
            started.append(
                subprocess.Popen([sys.executable, str(WORKER), *args], stdout=log, stderr=subprocess.STDOUT, env=env)
            )
        return started[-1]

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _wait_for(what: str, ready: Callable[[], bool], worker: subprocess.Popen, timeout: float = 300) -> None:
    """Until ``ready()``; fails at once if the worker ended first (a generous deadline, not a threshold)."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert worker.poll() is None, f"the worker ended (exit {worker.returncode}) before: {what}"
        assert time.monotonic() < deadline, f"timed out waiting for: {what}"
        time.sleep(0.05)


def _events(tmp_path: Path, worker: subprocess.Popen) -> list[str]:
    """What ``worker`` recorded (``airflow_worker.ObservedIngestOperator``), in order."""
    path = tmp_path / "task_state.json.events"
    lines = [line.split() for line in path.read_text().splitlines()] if path.exists() else []
    return [what for pid, what in lines if int(pid) == worker.pid]


def test_a_worker_killed_during_its_job_retries_onto_the_same_job(tmp_path, gate, start_worker):
    write_jsonl(tmp_path / "input" / "a.jsonl", 40)
    write_jsonl(tmp_path / "input" / "b.jsonl", 20, start=40)
    store = FileTaskStateStore(tmp_path / "task_state.json")

    first = start_worker("first")
    _wait_for("the worker to follow its job", lambda: _events(tmp_path, first) == ["polling"], first)
    # the job process may not have reached its interpreter's first line yet when the worker starts polling
    _wait_for("the job to start", gate.launched, first)
    handle = store.get("curation_job")
    assert handle is not None and gate.launched() == [handle["pid"]], "the handle was not stored"
    first.send_signal(signal.SIGKILL)
    assert first.wait() == -signal.SIGKILL
    assert pid_alive(handle["pid"]), "the job died with its worker"

    retry = start_worker("retry")
    _wait_for("the retry to follow a job", lambda: "polling" in _events(tmp_path, retry), retry)
    assert _events(tmp_path, retry) == ["status:running", "polling"], "the retry did not reconnect"
    gate.open()
    assert retry.wait(timeout=300) == 0, (tmp_path / "retry.log").read_text()[-3000:]

    # One job: the retry reconnected to the handle the killed worker stored, and submitted nothing.
    assert store.get("curation_job") == handle
    assert [p.name for p in job_dirs(tmp_path / "jobs")] == [handle["job_id"]]
    assert gate.launched() == [handle["pid"]]
    lake = Lake(str(tmp_path / "lake"), "web", SNAPSHOT)
    records = [json.loads(p.read_text()) for p in Path(lake.path("_checkpoints", "ingest")).glob("*/*.json")]
    assert records and {r["pid"] for r in records} == {handle["pid"]}, "units ran in another process"
    summary = json.loads((tmp_path / "retry.result.json").read_text())
    assert summary["rows"] == Manifest.read(summary["manifest_uri"]).rows == 60
