"""A real Airflow for the journey test: PostgreSQL (Debian's packages) as the metadata DB, then the
api-server, scheduler, dag-processor and triggerer (LocalExecutor, SimpleAuthManager), all on
loopback, started once per session and stopped after it (``scripts/airflow_stack.py``, which the
benchmarks use too)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import threading
from pathlib import Path

import pytest
from airflow_stack import airflow_stack as start_stack  # scripts/ (pyproject.toml: pythonpath)

REPO = Path(__file__).resolve().parents[2]

HERE = Path(__file__).resolve().parent
ARTIFACTS = REPO / "tests" / "artifacts"
USER, PASSWORD = "admin", "journey-admin"
PIPELINE_DATASET = "pipeline"


class StatsdListener:
    """A StatsD server on loopback UDP: every datagram Airflow's Stats sends, kept for assertions."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.5)
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65536)
            except (socket.timeout, OSError):
                continue
            self.lines.extend(data.decode(errors="replace").splitlines())

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


def _write_input(path: Path) -> None:
    """Documents for the real stages: prose, exact duplicates, and junk the quality filters drop."""
    import random

    rng = random.Random(11)
    words = (
        "curation keeps the documents that teach a model something and drops the noise the web is "
        "full of while it counts every row it reads writes or sets aside"
    ).split()
    docs = [" ".join(rng.choice(words) for _ in range(rng.randint(80, 200))) + "." for _ in range(40)]
    docs += docs[:8] + ["buy now", "", "$$$$ !!!! ####"]
    path.write_text("".join(json.dumps({"text": t, "n": i}) + "\n" for i, t in enumerate(docs)))


@pytest.fixture(scope="session")
def airflow_stack():
    # Our own folder, not pytest's numbered ones: other pytest sessions on the machine prune those.
    base = Path(tempfile.mkdtemp(prefix="curation-journey-"))
    home, lake = base / "airflow", base / "lake"
    dags = home / "dags"
    (home / "logs").mkdir(parents=True)
    dags.mkdir(parents=True)
    shutil.copy(HERE / "dags" / "curation_journey.py", dags)
    # The shipped pipeline DAG, copied as a user would: its defaults come from the deployment below.
    shutil.copy(REPO / "dags" / "curation_pipeline.py", dags)
    _write_input(base / "input.jsonl")
    shutil.copy(REPO / "tests" / "validate" / "synth.py", dags / "journey_synth.py")
    (dags / ".airflowignore").write_text("journey_synth\n")

    statsd = StatsdListener()
    env = {
        "AIRFLOW__API_AUTH__JWT_SECRET": "journey-test-secret-not-for-production",
        "AIRFLOW__METRICS__STATSD_ON": "True",
        "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
        "AIRFLOW__METRICS__STATSD_PORT": str(statsd.port),
        "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
        # OpenLineage events (the provider is in the dev extra) go to one JSON-lines file.
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(home / "openlineage.jsonl"), "append": True}
        ),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "journey",
        # The pipeline's defaults: the lake from the curation_default connection, input and dataset from
        # Variables (an empty trigger form, and a backfill without overridden params, use them).
        "AIRFLOW_CONN_CURATION_DEFAULT": json.dumps(
            {"conn_type": "curation", "extra": {"lake": str(lake), "backend": "local"}}
        ),
        "AIRFLOW_VAR_CURATION_INPUT": str(base / "input.jsonl"),
        "AIRFLOW_VAR_CURATION_DATASET": PIPELINE_DATASET,
        "CURATION_POLL_INTERVAL": "3",
        "CURATION_JOURNEY_LAKE": str(lake),
        "CURATION_JOURNEY_INPUT": str(base / "input.jsonl"),
        "CURATION_LOCAL_JOBS_DIR": str(base / "jobs"),
    }
    try:
        with start_stack(home, dags, env, user=USER, password=PASSWORD, prefix="curation-journey-") as stack:
            stack.lake, stack.statsd = lake, statsd
            yield stack
    finally:
        if os.environ.get("CURATION_KEEP_JOURNEY") != "1":
            shutil.rmtree(base, ignore_errors=True)
        statsd.close()
