"""Issue 21 item 4: a sql check is bounded in time, memory and temp disk.

An endless query fails its own check with a clear message and the next check still runs (DuckDB is
interrupted; a Daft query runs in a child process that is killed); DuckDB spills only into a private,
capped folder under the job's folder, removed at the end; the memory limit is the one set (read back
from DuckDB), and a Daft query past it is stopped. Real DuckDB and Daft over a synthetic lake.
"""

from __future__ import annotations

import json
import os
import threading

import duckdb
import pytest

from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.validate import ValidateStage, ValidationFailed, limits
from airflow_curation.stages.validate.checks import CheckSpecError
from airflow_curation.stages.validate.query_engines import make_engine
from airflow_curation.stages.validate.sandbox import SqlFailed
from airflow_curation.stages.validate.view import CuratedView

from .synth import build_run

ENDLESS = {
    "duckdb": "SELECT count(*) FROM range(1000000000000)",
    "daft": "SELECT count(*) FROM docs a, docs b, docs c, docs d, docs e, docs f",  # 60**6 rows
}
# Sorts 1.5 M md5 strings: past a 100 MB memory limit it must spill.
SPILLS = (
    "SELECT sum(hash(s) * rn) FROM (SELECT s, row_number() OVER (ORDER BY s) AS rn FROM "
    "(SELECT md5(range::VARCHAR) AS s FROM range(1500000)))"
)


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("lake"))
    return root, build_run(root, shards=2, rows=30)


@pytest.fixture
def view(lake) -> CuratedView:
    return CuratedView.from_manifest(Manifest.read(lake[1]["dedup"]))


def _checks(report: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report["checks"]}


@pytest.mark.parametrize("engine", ["duckdb", "daft"])
def test_an_endless_query_fails_its_check_and_the_next_one_runs(lake, tmp_path, monkeypatch, engine):
    root, uris = lake
    monkeypatch.chdir(tmp_path)  # the job's folder
    checks = [
        {"type": "sql", "name": "endless", "query": ENDLESS[engine], "min": 0, "timeout_s": 2},
        {"type": "sql", "name": "rows after", "query": "SELECT count(*) FROM docs", "min": 60, "max": 60},
    ]
    run_id = f"endless-{engine}"
    stage = ValidateStage(
        Lake(root, "demo"), {"input_manifest": uris["dedup"], "checks": checks, "query_engine": engine}, run_id
    )
    with pytest.raises(ValidationFailed, match="check endless exceeded its 2 s timeout"):
        StageRunner(stage).run()
    with open(os.path.join(root, "demo", "_manifests", run_id, "report.json")) as f:
        by_name = _checks(json.load(f))
    assert by_name["endless"]["status"] == "fail"
    assert by_name["endless"]["message"] == "check endless exceeded its 2 s timeout"
    assert (by_name["rows after"]["status"], by_name["rows after"]["observed"]) == ("pass", 60)
    assert [p for p in os.listdir(tmp_path) if p.startswith("curation-validate-")] == []  # removed at the end


def test_the_stage_setting_is_every_checks_timeout(lake, tmp_path, monkeypatch):
    root, uris = lake
    monkeypatch.chdir(tmp_path)
    checks = [{"type": "sql", "name": "endless", "query": ENDLESS["duckdb"], "min": 0}]
    config = {"input_manifest": uris["dedup"], "checks": checks, "check_timeout_s": 2, "fail_on_error": False}
    StageRunner(ValidateStage(Lake(root, "demo"), config, "stage-timeout")).run()
    with open(os.path.join(root, "demo", "_manifests", "stage-timeout", "report.json")) as f:
        assert _checks(json.load(f))["endless"]["message"] == "check endless exceeded its 2 s timeout"


@pytest.mark.parametrize("timeout", [0, -1, "soon"])
def test_a_bad_timeout_is_refused_before_any_work(lake, timeout):
    root, uris = lake
    checks = [{"type": "sql", "query": "SELECT 1", "min": 1, "timeout_s": timeout}]
    with pytest.raises(CheckSpecError, match="timeout_s must be"):
        StageRunner(ValidateStage(Lake(root, "demo"), {"input_manifest": uris["dedup"], "checks": checks}, "b")).run()


class _Watch:
    """The most bytes ever seen under a folder, and every file path, while a query runs."""

    def __init__(self, folder: str) -> None:
        self.folder, self.peak, self.paths = folder, 0, set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            total = 0
            for root, _, files in os.walk(self.folder):
                for f in files:
                    path = os.path.join(root, f)
                    self.paths.add(path)
                    try:
                        total += os.path.getsize(path)
                    except OSError:
                        pass
            self.peak = max(self.peak, total)

    def __enter__(self) -> _Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def test_duckdb_spills_into_a_private_folder_under_the_job_folder(view, tmp_path, monkeypatch):
    job = tmp_path / "job"
    job.mkdir()
    monkeypatch.chdir(job)
    config = {"memory_limit": "100MB", "max_temp_size": "2GB", "threads": 2}
    with limits.scratch(config) as bounds:
        engine = make_engine(view, config, bounds)
        setting = engine.con.execute("SELECT current_setting('temp_directory')").fetchone()[0]
        assert setting == bounds.temp_dir and os.path.dirname(bounds.temp_dir) == str(job)
        with _Watch(str(tmp_path)) as watch:
            assert engine.sql(SPILLS) is not None
        engine.close()
    assert watch.peak > 0, "the query did not spill: the test proves nothing"
    assert watch.paths and all(p.startswith(bounds.temp_dir + "/") for p in watch.paths)
    assert not os.path.exists(job / ".tmp") and not os.path.exists(bounds.temp_dir)


def test_the_temp_cap_stops_a_spill_past_it(view, tmp_path):
    config = {"memory_limit": "100MB", "max_temp_size": "1MB", "temp_dir": str(tmp_path), "threads": 2}
    with limits.scratch(config) as bounds:
        engine = make_engine(view, config, bounds)
        with _Watch(bounds.temp_dir) as watch, pytest.raises(SqlFailed, match="max_temp_directory_size"):
            engine.sql(SPILLS)
        engine.close()
    assert watch.peak <= 1_000_000


def _shown(nbytes: int) -> str:
    """How DuckDB shows a memory limit of ``nbytes``."""
    con = duckdb.connect(":memory:")
    con.execute(f"SET memory_limit = '{nbytes}B'")
    return con.execute("SELECT current_setting('memory_limit')").fetchone()[0]


@pytest.mark.parametrize("memory_limit", ["300MB", None])
def test_duckdb_memory_limit_is_the_one_set(view, tmp_path, memory_limit):
    config = {"memory_limit": memory_limit, "temp_dir": str(tmp_path)}
    with limits.scratch(config) as bounds:
        engine = make_engine(view, config, bounds)
        got = engine.con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
        engine.close()
    if memory_limit:
        assert bounds.memory_bytes == 300_000_000 and got == "286.1 MiB"
    else:  # within the job's budget: a share of the memory available, not DuckDB's 80% of the RAM
        from airflow_curation.stages.mappers.budget import available_memory

        assert bounds.memory_bytes < available_memory()
    assert got == _shown(bounds.memory_bytes)


def test_a_daft_query_past_the_memory_limit_is_stopped(view, tmp_path):
    """The child's resident memory passes 700 MB (60 rows of 40 MB strings): it is killed, and the next
    query runs."""
    config = {"query_engine": "daft", "memory_limit": "700MB", "temp_dir": str(tmp_path)}
    with limits.scratch(config) as bounds:
        engine = make_engine(view, config, bounds)
        with pytest.raises(limits.CheckOverBudget, match="past the memory limit"):
            engine.sql("SELECT max(length(repeat(text, 200000))) FROM docs", timeout_s=120)
        assert engine.sql("SELECT count(*) FROM docs", timeout_s=120) == (60,)
