"""Fixtures of the fault-injection tests: the tiny enrich model and the Airflow test helpers are the
ones tests/enrich and tests/airflow use (those folders are not packages: put them on the path)."""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
for folder in ("enrich", "airflow"):
    if str(TESTS / folder) not in sys.path:
        sys.path.insert(0, str(TESTS / folder))
