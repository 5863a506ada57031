"""The CLI builds backends through the factory (the one builder), and does so without Airflow where no
connection or client is asked for: local, Slurm on this machine, Ray."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

# Run in a fresh interpreter where ``import airflow`` fails, as on a machine without Airflow.
PROBE = """
import json, sys
sys.modules["airflow"] = None  # any import of airflow or a provider now raises ImportError
from airflow_curation.cli.submit import build_backend
out = {}
for name, options in [("local", {"work_dir": sys.argv[1]}), ("slurm", {"partition": "debug"}), ("ray", {})]:
    out[name] = type(build_backend(name, options)).__name__
try:
    build_backend("kubernetes", {"host": "http://127.0.0.1:1"})
except ImportError as e:
    out["kubernetes"] = str(e)
print(json.dumps(out))
"""


def test_cli_builds_through_the_factory_without_airflow(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-P", "-c", PROBE, str(tmp_path / "jobs")],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(tmp_path)},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (out["local"], out["slurm"], out["ray"]) == ("LocalBackend", "SlurmBackend", "RayJobBackend")
    # A Kubernetes client comes only from the provider's hook: without it, a clear refusal, no own client.
    assert "cncf-kubernetes provider" in out["kubernetes"] and "airflow-curation[kubernetes]" in out["kubernetes"]


class _RayJobServer:
    """Ray's job server as far as a submit and a stop go (its version route included), on loopback,
    recording each request's method, path and headers: what the real ``JobSubmissionClient`` sends."""

    def __init__(self) -> None:
        import ray

        self.requests: list[tuple[str, str, dict[str, str]]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, body: dict) -> None:
                server.requests.append((self.command, self.path, dict(self.headers)))
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                self._answer({"version": "4", "ray_version": ray.__version__, "ray_commit": "x"})

            def do_POST(self) -> None:  # noqa: N802
                sent = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                stop = self.path.endswith("/stop")
                self._answer({"stopped": True} if stop else {"submission_id": sent["submission_id"], "job_id": None})

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_the_factory_builds_the_ray_client_from_the_connection_and_the_backend_uses_it(tmp_path, monkeypatch):
    """``ray_conn_id``: the factory makes the Job Submission client (address, token, headers) and injects it;
    the backend's submit and cancel go through it, and a handle keeps the connection id, never the token."""
    from airflow_curation.core.layout import Lake
    from airflow_curation.hooks.factory import RayJobClient, backend_for, handle_options
    from airflow_curation.jobs.spec import JobSpec

    server = _RayJobServer()
    try:
        host, port = server.address.rsplit(":", 1)
        conn = {"conn_type": "generic", "host": host.split("//")[1], "port": int(port), "password": "tok-12345"}
        monkeypatch.setenv("AIRFLOW_CONN_RAY_TEST", json.dumps({**conn, "extra": {"headers": {"X-Team": "cur"}}}))
        backend = backend_for("ray", {"ray_conn_id": "ray_test", "python": sys.executable})
        assert isinstance(backend.client, RayJobClient) and backend.client.address == server.address
        assert backend.address == server.address and server.requests == []  # the client connects on first use
        spec = JobSpec("validate", Lake(str(tmp_path / "lake"), "web").to_dict(), "2026-11-30__manual", {})
        handle = backend.submit(spec)
        backend.cancel(handle)
        calls = [(method, path) for method, path, _ in server.requests]
        assert calls[0] == ("GET", "/api/version")  # Ray's client checks the cluster's version when it is made
        assert [c for c in calls if c[0] == "POST"] == [
            ("POST", "/api/jobs/"),
            ("POST", f"/api/jobs/{handle['job_id']}/stop"),
        ]
        assert all(
            h.get("Authorization") == "Bearer tok-12345" and h.get("X-Team") == "cur" for *_, h in server.requests
        )
        kept = handle_options(backend, {"ray_conn_id": "ray_test"})
        assert kept["ray_conn_id"] == "ray_test" and "tok-12345" not in json.dumps([kept, handle])
        # Rebuilt from the handle (a trigger, a retry): the same cluster, through a client of its own.
        again = backend_for("ray", kept)
        assert again.client is not backend.client and again.client.headers == backend.client.headers
    finally:
        server.close()


def test_the_ray_backend_refuses_to_build_its_own_client():
    from airflow_curation.backends import get_backend

    with pytest.raises(ValueError, match="needs a client.*backend_for"):
        get_backend("ray", address="http://127.0.0.1:1")
