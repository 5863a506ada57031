"""A real Airflow for the journey test: PostgreSQL (Debian's packages) as the metadata DB, then the
api-server, scheduler, dag-processor and triggerer (LocalExecutor, SimpleAuthManager), all on
loopback, started once per session and stopped after it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
ARTIFACTS = REPO / "tests" / "artifacts"
USER, PASSWORD = "admin", "journey-admin"
PIPELINE_DATASET = "pipeline"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


class AirflowStack:
    def __init__(self, home: Path, url: str, lake: Path, env: dict[str, str], statsd: StatsdListener) -> None:
        self.home, self.url, self.lake, self.env, self.statsd = home, url, lake, env, statsd
        self._token: str | None = None

    def token(self) -> str:
        if self._token is None:
            body = self.request("POST", "/auth/token", {"username": USER, "password": PASSWORD}, auth=False)
            self._token = body["access_token"]
        return self._token

    def request(self, method: str, path: str, body: dict | None = None, auth: bool = True) -> dict:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token()}"
        req = urllib.request.Request(
            self.url + path,
            method=method,
            headers=headers,
            data=json.dumps(body).encode() if body is not None else None,
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                text = r.read().decode()
        except urllib.error.HTTPError as e:
            raise AssertionError(f"{method} {path} -> {e.code}: {e.read().decode()[:2000]}") from None
        return json.loads(text) if text else {}

    def get_text(self, path: str) -> tuple[int, str]:
        req = urllib.request.Request(self.url + path, headers={"Authorization": f"Bearer {self.token()}"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def logs(self) -> str:
        out = []
        for f in sorted((self.home / "logs").glob("*.out")):
            out.append(f"==== {f.name}\n" + "\n".join(f.read_text(errors="replace").splitlines()[-40:]))
        return "\n".join(out)


def _wait_http(url: str, timeout: float, procs: dict[str, subprocess.Popen], home: Path) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        for name, p in procs.items():
            if p.poll() is not None:
                log = (home / "logs" / f"{name}.out").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"airflow {name} exited with {p.returncode}:\n{log}")
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        time.sleep(1)
    raise TimeoutError(f"{url} not up after {timeout} s")


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
    # PostgreSQL runs as the postgres user, who cannot enter pytest's private temp folders.
    pg_base = Path(tempfile.mkdtemp(prefix="curation-journey-pg-"))
    pg_base.chmod(0o755)
    pgdata = pg_base / "data"
    dags = home / "dags"
    (home / "logs").mkdir(parents=True)
    dags.mkdir(parents=True)
    shutil.copy(HERE / "dags" / "curation_journey.py", dags)
    # The shipped pipeline DAG, copied as a user would: its defaults come from the deployment below.
    shutil.copy(REPO / "dags" / "curation_pipeline.py", dags)
    _write_input(base / "input.jsonl")
    shutil.copy(REPO / "tests" / "validate" / "synth.py", dags / "journey_synth.py")
    (dags / ".airflowignore").write_text("journey_synth\n")
    (home / "passwords.json").write_text(json.dumps({USER: PASSWORD}))

    pg_port, api_port = _free_port(), _free_port()
    up = subprocess.run(
        ["bash", str(REPO / "scripts" / "postgres_up.sh"), str(pgdata), str(pg_port)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if up.returncode != 0:
        raise RuntimeError(f"postgres_up.sh failed ({up.returncode}):\n{up.stdout}\n{up.stderr}")
    db_url = up.stdout.strip().splitlines()[-1]
    url = f"http://127.0.0.1:{api_port}"
    statsd = StatsdListener()
    venv_bin = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTEST"))}
    env.update(
        {
            "PATH": f"{venv_bin}:{env.get('PATH', '')}",
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p),
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            "AIRFLOW__CORE__LAZY_LOAD_PLUGINS": "False",
            "AIRFLOW__CORE__AUTH_MANAGER": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
            "AIRFLOW__CORE__FERNET_KEY": "",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db_url,
            "AIRFLOW__API__BASE_URL": url,
            "AIRFLOW__API__PORT": str(api_port),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API_AUTH__JWT_SECRET": "journey-test-secret-not-for-production",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "10",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "AIRFLOW__TRIGGERER__DEFAULT_CAPACITY": "50",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
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
    )
    airflow = [sys.executable, "-m", "airflow"]
    mig = subprocess.run(airflow + ["db", "migrate"], env=env, capture_output=True, text=True, timeout=600)
    if mig.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed ({mig.returncode}):\n{mig.stdout[-3000:]}\n{mig.stderr[-5000:]}")

    procs: dict[str, subprocess.Popen] = {}
    try:
        for name, args in (
            ("api-server", ["api-server", "--port", str(api_port), "--host", "127.0.0.1"]),
            ("scheduler", ["scheduler"]),
            ("dag-processor", ["dag-processor"]),
            ("triggerer", ["triggerer"]),
        ):
            log = open(home / "logs" / f"{name}.out", "wb")
            procs[name] = subprocess.Popen(
                airflow + args,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=str(home),
            )
        _wait_http(f"{url}/api/v2/monitor/health", 240, procs, home)
        yield AirflowStack(home, url, lake, env, statsd)
    finally:
        for p in procs.values():
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for p in procs.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=10)
        subprocess.run(["bash", str(REPO / "scripts" / "postgres_down.sh"), str(pgdata)], timeout=120)
        shutil.rmtree(pg_base, ignore_errors=True)
        if os.environ.get("CURATION_KEEP_JOURNEY") != "1":
            shutil.rmtree(base, ignore_errors=True)
        statsd.close()
