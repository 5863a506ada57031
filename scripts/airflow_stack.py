"""A real Airflow on loopback, for the journey tests and the benchmarks: PostgreSQL (Debian's packages,
``scripts/postgres_up.sh``) as the metadata DB, ``airflow db migrate``, then the api-server, scheduler,
dag-processor and triggerer (LocalExecutor, SimpleAuthManager), and REST with a bearer token.

    with airflow_stack(home, dags, {"AIRFLOW_VAR_X": "1"}, prefix="my-") as stack:
        stack.request("PATCH", "/api/v2/dags/my_dag", {"is_paused": False})

Test and benchmark infrastructure: it lives here, not in the provider package.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROCESSES = ("api-server", "scheduler", "dag-processor", "triggerer")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AirflowStack:
    """The running stack: its home, URL, environment, processes (by name) and PostgreSQL data folder."""

    def __init__(
        self, home: Path, url: str, env: dict[str, str], user: str, password: str, procs: dict, pgdata: Path
    ) -> None:
        self.home, self.url, self.env, self.procs, self.pgdata = home, url, env, procs, pgdata
        self.user, self.password = user, password
        self._token: str | None = None

    def token(self) -> str:
        if self._token is None:
            body = self.request("POST", "/auth/token", {"username": self.user, "password": self.password}, auth=False)
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


def _stop(procs: dict[str, subprocess.Popen]) -> None:
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


@contextmanager
def airflow_stack(
    home: Path,
    dags: Path,
    extra_env: dict[str, str] | None = None,
    *,
    user: str = "admin",
    password: str = "admin",
    prefix: str = "airflow-stack-",
) -> Iterator[AirflowStack]:
    """Start the stack with ``home`` as AIRFLOW_HOME and ``dags`` as its dags folder; stop it and its
    PostgreSQL on exit.

    :param extra_env: more environment (Airflow settings, Variables, connections), over the defaults here.
    :param user: / :param password: the SimpleAuthManager admin.
    :param prefix: of the temporary folder that holds PostgreSQL's data (``<prefix>pg-...``).
    """
    (home / "logs").mkdir(parents=True, exist_ok=True)
    (home / "passwords.json").write_text(json.dumps({user: password}))
    # PostgreSQL runs as the postgres user, who cannot enter private temp folders (pytest's, say).
    pg_base = Path(tempfile.mkdtemp(prefix=f"{prefix}pg-"))
    pg_base.chmod(0o755)
    pgdata = pg_base / "data"
    pg_port, api_port = free_port(), free_port()
    procs: dict[str, subprocess.Popen] = {}
    try:
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
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{user}:admin",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
                "AIRFLOW__CORE__FERNET_KEY": "",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db_url,
                "AIRFLOW__API__BASE_URL": url,
                "AIRFLOW__API__PORT": str(api_port),
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__WORKERS": "1",
                "AIRFLOW__API_AUTH__JWT_SECRET": "airflow-stack-secret-not-for-production",
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "10",
                "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
                "AIRFLOW__TRIGGERER__DEFAULT_CAPACITY": "50",
                "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
                **(extra_env or {}),
            }
        )
        airflow = [sys.executable, "-m", "airflow"]
        mig = subprocess.run(airflow + ["db", "migrate"], env=env, capture_output=True, text=True, timeout=600)
        if mig.returncode != 0:
            raise RuntimeError(
                f"airflow db migrate failed ({mig.returncode}):\n{mig.stdout[-3000:]}\n{mig.stderr[-5000:]}"
            )
        for name in PROCESSES:
            args = ["api-server", "--port", str(api_port), "--host", "127.0.0.1"] if name == "api-server" else [name]
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
        yield AirflowStack(home, url, env, user, password, procs, pgdata)
    finally:
        _stop(procs)
        subprocess.run(["bash", str(REPO / "scripts" / "postgres_down.sh"), str(pgdata)], timeout=120)
        shutil.rmtree(pg_base, ignore_errors=True)
