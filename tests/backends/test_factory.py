"""The CLI builds backends through the factory (the one builder), and does so without Airflow where no
connection or client is asked for: local, Slurm on this machine, Ray."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

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
