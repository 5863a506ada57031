"""Validate under Airflow retries and beside another run of the same snapshot (real ``dag.test()``).

A finished deferred task that Airflow marks up for retry must not submit its job again: the retry takes
the verdict the job reached. Two runs of one snapshot each get a report of their own, which says whose
verdict it reuses and with which params the run was launched.
"""

from __future__ import annotations

import importlib.util
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from curation_airflow_helpers import write_jsonl

from airflow_curation.core.layout import Lake, curation_run_id

pytestmark = pytest.mark.airflow
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def retry_dag(airflow_db):
    spec = importlib.util.spec_from_file_location(
        "curation_validate_retry_under_test", REPO / "tests" / "airflow" / "dags" / "curation_validate_retry.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def _validate_ti(dag_run):
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return session.scalars(
            select(TaskInstance).where(TaskInstance.run_id == dag_run.run_id, TaskInstance.task_id == "validate")
        ).one()


def _report_xcom(dag_run):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.scalars(XComModel.get_many(run_id=dag_run.run_id, dag_ids=dag_run.dag_id)).all()
        return next(XComModel.deserialize_value(r) for r in rows if r.key == "curation_report")


def _xcom(dag_run, task_id: str, key: str):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.scalars(XComModel.get_many(run_id=dag_run.run_id, dag_ids=dag_run.dag_id)).all()
        return next(XComModel.deserialize_value(r) for r in rows if (r.task_id, r.key) == (task_id, key))


def _job_dirs(lake: Lake, dag_run) -> list[Path]:
    jobs = Path(lake.jobs_dir(curation_run_id(dag_run.run_id, lake.snapshot), "validate"))
    return [p for p in jobs.iterdir() if p.is_dir()]


@pytest.mark.parametrize("min_rows, passes", [(1, True), (10**9, False)])
def test_a_retried_validate_takes_its_jobs_verdict_and_submits_one_job(retry_dag, tmp_path, min_rows, passes):
    write_jsonl(tmp_path / "in" / "a.jsonl", 20)
    lake_root = tmp_path / "lake"
    day = datetime(2026, 11, 20, tzinfo=timezone.utc)
    dag_run = retry_dag.test(
        logical_date=day, run_conf={"input": str(tmp_path / "in"), "lake": str(lake_root), "min_rows": min_rows}
    )
    assert dag_run.state == ("success" if passes else "failed")
    ti = _validate_ti(dag_run)
    assert ti.try_number == 2, "the first try was meant to die after its job ended"
    assert ti.state == ("success" if passes else "failed")
    lake = Lake(str(lake_root), "web", "2026-11-20")
    assert len(_job_dirs(lake, dag_run)) == 1, "the retry submitted a second validate job"
    # The retry published the verdict its job reached.
    pushed = _report_xcom(dag_run)
    assert pushed["status"] == ("passed" if passes else "failed")
    report = json.loads(Path(pushed["json"]).read_text())
    assert report["run_id"] == curation_run_id(dag_run.run_id, lake.snapshot)
    assert report["run_context"]["params"]["min_rows"] == min_rows
    if passes:  # the task's summary speaks in curated rows, beside the rows validate read
        summary = _xcom(dag_run, "validate", "return_value")
        last = report["metrics"]["funnel"][-1]
        assert (summary["curated_rows"], summary["curated_by"]) == (last["rows"], last["label"])
        assert (summary["curated_rows"], summary["curated_by"]) == (20, "ingested")  # this DAG only ingests


def test_two_runs_of_one_snapshot_each_get_their_own_report(retry_dag, tmp_path):
    """A manual run beside the scheduled one: the second reuses the first's verdict (same data and checks)
    but its report, its manifest and its params are its own, and say so."""
    write_jsonl(tmp_path / "in" / "a.jsonl", 15)
    conf = {"input": str(tmp_path / "in"), "lake": str(tmp_path / "lake"), "snapshot": "2026-11-21"}
    first = retry_dag.test(logical_date=datetime(2026, 11, 21, tzinfo=timezone.utc), run_conf=conf)
    second = retry_dag.test(logical_date=datetime(2026, 11, 22, tzinfo=timezone.utc), run_conf=conf)
    assert first.state == second.state == "success"
    reports = [_report_xcom(r) for r in (first, second)]
    assert reports[0]["json"] != reports[1]["json"]
    one, two = (json.loads(Path(r["json"]).read_text()) for r in reports)
    # Both ids start with the snapshot and say the runs were manual; a digest, not a time, tells them apart.
    assert one["run_id"] == curation_run_id(first.run_id, "2026-11-21")
    assert two["run_id"] == curation_run_id(second.run_id, "2026-11-21") != one["run_id"]
    assert all(r["run_id"].startswith("2026-11-21__manual-") for r in (one, two))
    assert one["verdict_of"] is None
    assert two["verdict_of"]["run_id"] == one["run_id"]  # it says whose verdict it shows
    assert two["checks"] == one["checks"] and two["metrics"] == one["metrics"]
    assert two["run_context"]["airflow_run_id"] == second.run_id != one["run_context"]["airflow_run_id"]
    assert two["stages"]["ingest"]["manifest_uri"] != one["stages"]["ingest"]["manifest_uri"]
    page = Path(reports[1]["html"]).read_text()
    assert one["run_id"] in page and 'id="verdict-of"' in page and 'id="run-context"' in page


def test_conf_values_airflow_did_not_apply_are_shown(tmp_path):
    """A run whose conf differs from the params it used (a backfill without "override parameters"): the
    run context names each value that was not applied, and the report shows them."""
    from airflow_curation.core.storage_map import StorageMap
    from airflow_curation.hooks.factory import CurationSettings
    from airflow_curation.operators.base import run_context
    from airflow_curation.stages.validate.report import _run_context_html

    class Run:
        dag_id, run_type, conf = "d", "backfill", {"min_rows": 50, "dataset": "web"}

    rc = run_context(
        {"dag_run": Run(), "params": {"min_rows": 1, "dataset": "web"}, "run_id": "backfill__x"},
        CurationSettings(lake="/l", backend="local", storage=StorageMap({"s3": {"secret": "hidden"}})),
        "curation_default",
        Lake("/l", "web"),
        None,
    )
    assert rc["conf_not_applied"] == {"min_rows": {"conf": 50, "used": 1}}
    assert "hidden" not in json.dumps(rc)  # storage options are never recorded
    page = "\n".join(_run_context_html(rc))
    assert 'id="conf-not-applied"' in page and "min_rows" in page and "curation_default" in page
