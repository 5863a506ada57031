"""Shared test fixtures.

Airflow reads its configuration when it is first imported, so the session's Airflow home (a temporary
folder with its own SQLite DB) is set here at import time, before any test module imports Airflow.
The DB itself is migrated once, lazily, by the ``airflow_db`` fixture, so tests that never touch
Airflow do not pay for it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

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
