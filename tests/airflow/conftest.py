"""Fixtures for the Airflow layer's tests: small real inputs and a job whose start a test controls."""

from __future__ import annotations

from pathlib import Path

import pytest
from curation_airflow_helpers import Gate, write_jsonl


@pytest.fixture
def small_input(tmp_path) -> Path:
    """Two JSONL files, 60 documents."""
    write_jsonl(tmp_path / "input" / "a.jsonl", 40)
    write_jsonl(tmp_path / "input" / "b.jsonl", 20, start=40)
    return tmp_path / "input"


@pytest.fixture
def gate(tmp_path):
    g = Gate(tmp_path / "gate")
    yield g
    # A test that failed half-way must not leave a job waiting forever: let it run out (tiny inputs).
    g.open()
