"""Shared test fixtures.

Airflow reads its configuration when it is first imported, so the session's Airflow home (a temporary
folder with its own SQLite DB) is set here at import time, before any test module imports Airflow.
The DB itself is migrated once, lazily, by the ``airflow_db`` fixture, so tests that never touch
Airflow do not pay for it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from process_helpers import free_port, stop_group
from worker_units import SHARED_SESSION_GROUPS, xdist_group

REPO = Path(__file__).resolve().parent.parent

_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="curation-airflow-home-"))
os.environ.update(
    {
        "AIRFLOW_HOME": str(_AIRFLOW_HOME),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "True",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_AIRFLOW_HOME}/airflow.db",
        # The product's dags/ plus a bundle of test-only DAGs (dag.test() needs a DAG to be in a bundle).
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(
            [
                {
                    "name": "dags-folder",
                    "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
                    "kwargs": {},
                },
                {
                    "name": "curation-test-dags",
                    "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
                    "kwargs": {"path": str(REPO / "tests" / "airflow" / "dags")},
                },
            ]
        ),
        # Local backend jobs of tests that do not choose a folder land here, not in ~/.airflow-curation.
        "CURATION_LOCAL_JOBS_DIR": str(_AIRFLOW_HOME / "jobs"),
    }
)


def _venv_bin(name: str) -> str:
    candidate = Path(sys.executable).with_name(name)
    return str(candidate) if candidate.exists() else name


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """The session's Airflow home with a migrated SQLite DB (``airflow db migrate`` runs once)."""
    proc = subprocess.run(
        [_venv_bin("airflow"), "db", "migrate"], capture_output=True, text=True, env=os.environ.copy(), timeout=600
    )
    if proc.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return _AIRFLOW_HOME


def pytest_sessionfinish(session, exitstatus) -> None:
    shutil.rmtree(_AIRFLOW_HOME, ignore_errors=True)


# `make test` runs the suite on pytest-xdist workers: the units are tests/worker_units.py's.
@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """xdist's scope scheduling with :func:`xdist_group`'s units (its own ``xdist_group`` marks rename node
    ids, which pytest 9 no longer lets a plugin do)."""
    from xdist.scheduler import LoadScopeScheduling

    class SharedSessionScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid)

    return SharedSessionScheduling(config, log)


def pytest_collection_modifyitems(config, items) -> None:
    if not hasattr(config, "workerinput"):  # not an xdist worker: collection order
        return
    order = {group: k for k, group in enumerate(dict.fromkeys(SHARED_SESSION_GROUPS.values()))}
    first_seen: dict[str, int] = {}
    for k, item in enumerate(items):
        first_seen.setdefault(xdist_group(item.nodeid), k)
    # A stable sort: the shared groups first in the order above, then every module where it was collected.
    items.sort(key=lambda it: (order.get(g := xdist_group(it.nodeid), len(order)), first_seen[g]))


@pytest.fixture
def ingest_texts(tmp_path):
    """``ingest_texts(texts, dataset)``: ``texts`` written ``copies`` times as JSONL files and ingested
    (one unit per file) into a lake under ``tmp_path``; returns the lake, the ingest manifest's URI and the
    rows it holds."""
    from airflow_curation.core.layout import Lake
    from airflow_curation.stages.base import StageRunner
    from airflow_curation.stages.ingest.stage import IngestStage

    def ingest(texts: list[str], dataset: str = "web", copies: int = 2):
        raw = tmp_path / "raw"
        raw.mkdir()
        for k in range(copies):
            (raw / f"part{k}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
        lake = Lake(str(tmp_path / "lake"), dataset)
        stage = IngestStage(lake, {"inputs": [str(raw)], "unit_bytes": 1}, "r1")
        return lake, stage.manifest_uri, StageRunner(stage).run().rows

    return ingest


@pytest.fixture
def flip_byte():
    """Corrupt a file in place, as a bad disk or a stray write would: one byte in its middle, same size."""

    def flip(path: str) -> None:
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) // 2)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0xFF]))

    return flip


# Ray's own start limits (raylet and agent registration, a worker's start) are far too short for the
# shared, loaded 2-core test machine: a local Ray or the session head missed them under load.
for _name, _value in {
    "RAY_raylet_start_wait_time_s": "180",
    "RAY_agent_register_timeout_ms": "180000",
    "RAY_worker_register_timeout_seconds": "180",
}.items():
    os.environ.setdefault(_name, _value)


@dataclass(frozen=True)
class RayHead:
    gcs: str  # host:port, what a driver on this machine joins
    client: str  # ray://host:port (Ray Client)
    temp_dir: str

    def driver_pids(self) -> list[int]:
        """The process of each driver that has joined the cluster so far, from its GCS: a driver on this
        machine is the process that joined (``host:port``); a Ray Client session's is the client server's
        process on the head, never the client's."""
        from ray._raylet import GcsClient

        return [job.driver_pid for job in GcsClient(address=self.gcs).get_all_job_info().values()]

    def drivers(self) -> int:
        """Drivers that have joined the cluster so far (Ray Client sessions included)."""
        return len(self.driver_pids())


def _stop_head(proc: subprocess.Popen, temp: str) -> None:
    proc.terminate()  # `ray start --block` drains and stops this head's processes on SIGTERM
    stop_group(proc, temp, wait_s=90)


def _start_head() -> tuple[subprocess.Popen, RayHead]:
    port, client, agent, dash = (free_port() for _ in range(4))
    temp = tempfile.mkdtemp(prefix="rh-", dir="/tmp")  # short: Ray's socket paths have a length limit
    log_path = Path(temp, "head.log")
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    args = [
        _venv_bin("ray"), "start", "--head", f"--port={port}", f"--ray-client-server-port={client}",
        "--include-dashboard=false", f"--dashboard-agent-listen-port={agent}",
        f"--dashboard-port={dash}",  # a minimal dashboard process runs anyway (8265 by default)
        f"--temp-dir={temp}", "--num-cpus=2", "--object-store-memory=200000000", "--block",
    ]  # fmt: skip
    with open(log_path, "w") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while "--block" not in log_path.read_text():  # printed once the head is up
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(log_path.read_text()[-3000:])
            time.sleep(0.5)
        host = re.search(r"ray start --address='([\d.]+):", log_path.read_text()).group(1)
        # The client server gives up when the head's node takes over 30 s to register (a loaded machine),
        # and `ray start --block` then stops the head: wait until a client can connect.
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", client)) == 0:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(log_path.read_text()[-3000:])
            time.sleep(1)
        return proc, RayHead(f"{host}:{port}", f"ray://127.0.0.1:{client}", temp)
    except BaseException:
        _stop_head(proc, temp)
        raise


@pytest.fixture(scope="session")
def ray_head():
    """A Ray cluster of this test session: ``ray start --head --block`` with its own ports and temp dir (never
    the machine's default ``/tmp/ray``), stopped by SIGTERM to that process at the end (never ``ray stop``,
    which would stop other users' Ray too). Its workers import this checkout (``PYTHONPATH``). No dashboard:
    its dozen processes made the head miss Ray's own 30 s startup limits on the loaded 2-core test machine
    (the ``ray`` backend's test starts a head with one). A start that fails anyway is tried again, twice."""
    for attempt in range(3):
        try:
            proc, head = _start_head()
            break
        except RuntimeError:
            if attempt == 2:
                raise
    try:
        yield head
    finally:
        _stop_head(proc, head.temp_dir)
