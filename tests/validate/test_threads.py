"""Validate's threads default to the cores this process may use (its affinity, a cgroup's CPU quota), not the
node's: DuckDB's own default and ``os.cpu_count()`` count every core of the node, so a one-core array task of a
64-core node ran 64 threads on its core. Real DuckDB, a real lake."""

from __future__ import annotations

import os

from airflow_curation.core.manifest import Manifest
from airflow_curation.stages.mappers.budget import cpu_count
from airflow_curation.stages.validate.query_engines import make_engine
from airflow_curation.stages.validate.view import CuratedView

from .synth import build_run


def _threads(view: CuratedView, config: dict) -> int:
    engine = make_engine(view, config)
    try:
        return engine.threads
    finally:
        engine.close()


def test_duckdb_threads_default_to_the_cores_this_process_may_use(tmp_path):
    view = CuratedView.from_manifest(Manifest.read(build_run(str(tmp_path), shards=1, rows=20)["dedup"]))
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})  # as a task's cpuset of one core
    try:
        assert _threads(view, {}) == 1
    finally:
        os.sched_setaffinity(0, before)
    assert _threads(view, {}) == cpu_count()
    assert _threads(view, {"threads": 3}) == 3  # the setting, when given, whatever the cores
