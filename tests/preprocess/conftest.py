from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from . import corpus

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNNER = os.path.join(os.path.dirname(__file__), "oracle_runner.py")


def _oracle_python(venv: str) -> str:
    """The oracle venv's Python, created by scripts/setup_oracles.sh (idempotent, instant when present)."""
    python = os.path.join(REPO, venv, "bin", "python")
    if not os.path.exists(os.path.join(REPO, venv, ".stamp-v2")):
        subprocess.run(["bash", os.path.join(REPO, "scripts", "setup_oracles.sh")], check=True)
    return python


def run_oracle(which: str, docs: list[dict], tmp_path_factory, venv: str = ".venv-oracles") -> list[dict]:
    path = tmp_path_factory.mktemp(f"oracle-{which}") / "docs.json"
    path.write_text(json.dumps(docs))
    proc = subprocess.run(
        [_oracle_python(venv), RUNNER, which, str(path)], capture_output=True, text=True, timeout=900, check=False
    )
    assert proc.returncode == 0, f"oracle {which} failed:\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout)


@pytest.fixture(scope="session")
def prose() -> list[str]:
    return corpus.prose_docs(limit=150)


@pytest.fixture(scope="session")
def code() -> list[tuple[str, str]]:
    return corpus.code_docs(limit=60)


@pytest.fixture(scope="session")
def datatrove_results(prose, tmp_path_factory) -> list[dict]:
    return run_oracle("datatrove", [{"text": t} for t in prose], tmp_path_factory)


@pytest.fixture(scope="session")
def warm_signals():
    from airflow_curation.core.signals import warm_up

    warm_up()
    return True


__all__ = ["run_oracle", "sys"]
