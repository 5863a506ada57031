"""Who relaunches a retryable failure: the operator (after its trigger's event, or polling) and the
checkpoint sensor, through the jobs layer's follower (``jobs.attempts.settle``); never ``status``, which stays
read-only."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import TaskDeferred
from curation_airflow_helpers import MemoryTaskStateStore, task_context

from airflow_curation.backends import BACKENDS, Backend, JobState, JobStatus
from airflow_curation.jobs import attempts
from airflow_curation.jobs.spec import JobSpec
from airflow_curation.operators.base import CurationStageOperator
from airflow_curation.sensors.shard_checkpoint import ShardCheckpointSensor

pytestmark = pytest.mark.airflow
LAUNCHES: list[dict] = []


class FlakyBackend(Backend):
    """Attempt 1 fails retryably (a time limit, say); every later attempt succeeds."""

    name = "flaky"

    def __init__(self, max_resubmits: int = 1) -> None:
        self.max_resubmits = max_resubmits

    def launch(self, spec, groups=None, *, previous=None):
        attempt = (previous or {}).get("attempt", 0) + 1
        handle = {
            "backend": self.name,
            "job_id": f"j{attempt}",
            "attempt": attempt,
            "groups": 1,
            "manifest_uri": spec.manifest_uri,
            "spec": spec.to_json(),
        }
        LAUNCHES.append(handle)
        return handle

    def status(self, handle):
        if handle["attempt"] == 1:
            return JobStatus(JobState.FAILED, "TIMEOUT: hit its time limit", retryable=True)
        return JobStatus(
            JobState.SUCCEEDED,
            "completed",
            {"manifest_uri": handle["manifest_uri"], "rows": 7, "shards": 1, "bytes": 10},
        )

    def cancel(self, handle):
        pass

    def logs(self, handle, offset=0):
        return "", offset

    def spec_of(self, handle):
        import json

        return JobSpec.from_dict(json.loads(handle["spec"]))


@pytest.fixture(autouse=True)
def flaky(monkeypatch):
    monkeypatch.setitem(BACKENDS, "flaky", f"{__name__}:FlakyBackend")
    LAUNCHES.clear()


def _operator(tmp_path, **kw):
    return CurationStageOperator(
        task_id="t", stage="ingest", lake=str(tmp_path / "lake"), dataset="d", backend="flaky", poll_interval=0.01, **kw
    )


def test_the_operator_relaunches_after_its_triggers_event_and_defers_again(tmp_path):
    store = MemoryTaskStateStore()
    ctx = task_context(store)
    op = _operator(tmp_path)
    with pytest.raises(TaskDeferred) as first:
        op.execute(ctx)
    handle = first.value.trigger.handle
    st = op._backend.status(handle)  # what the trigger saw: read-only, retryable
    event = {
        "status": st.state.value,
        "message": st.message,
        "result": None,
        "retryable": st.retryable,
        "handle": handle,
        "log_offset": 0,
    }
    with pytest.raises(TaskDeferred) as again:
        _operator(tmp_path).execute_complete(ctx, event)
    new = again.value.trigger.handle
    assert new["attempt"] == 2 and store.get("curation_job")["attempt"] == 2  # a retry reconnects to it
    assert new["backend_options"] == handle["backend_options"]
    done = {"status": "succeeded", "message": "", "result": {"rows": 7}, "handle": new, "log_offset": 0}
    assert _operator(tmp_path).execute_complete(ctx, done)["rows"] == 7
    assert [h["attempt"] for h in LAUNCHES] == [1, 2]


def test_the_polling_operator_relaunches_once_then_reports_the_end(tmp_path):
    out = _operator(tmp_path, deferrable=False).execute(task_context(MemoryTaskStateStore()))
    assert out["rows"] == 7 and [h["attempt"] for h in LAUNCHES] == [1, 2]


def test_no_attempts_left_fails_the_task(tmp_path):
    op = _operator(tmp_path, deferrable=False, backend_options={"max_resubmits": 0})
    with pytest.raises(Exception, match="TIMEOUT"):
        op.execute(task_context(MemoryTaskStateStore()))
    assert len(LAUNCHES) == 1


def test_the_checkpoint_sensor_relaunches_then_keeps_gating(tmp_path):
    spec = JobSpec("ingest", {"root": str(tmp_path / "lake"), "dataset": "d", "snapshot": None}, "r1")
    job = {**FlakyBackend().launch(spec), "backend_options": {"max_resubmits": 1}}
    sensor = ShardCheckpointSensor(task_id="gate", manifest_uri=spec.manifest_uri, job=job, deferrable=False)
    assert sensor.poke({}) is False  # relaunched; the manifest is not there yet: keep waiting
    assert sensor.job["attempt"] == 2 and sensor.job["backend_options"] == {"max_resubmits": 1}
    assert [h["attempt"] for h in LAUNCHES] == [1, 2]


def test_only_the_full_gate_relaunches(tmp_path):
    """A quorum gate on the same job waits for the relaunch that the full gate makes (one decision per run)."""
    spec = JobSpec("ingest", {"root": str(tmp_path / "lake"), "dataset": "d", "snapshot": None}, "r1")
    job = {**FlakyBackend().launch(spec), "backend_options": {"max_resubmits": 1}}
    first = ShardCheckpointSensor(
        task_id="first_shards", manifest_uri=spec.manifest_uri, job=job, quorum=0.5, deferrable=False
    )
    assert first.poke({}) is False and first.job["attempt"] == 1  # waits; relaunches nothing
    assert [h["attempt"] for h in LAUNCHES] == [1]
    full = ShardCheckpointSensor(task_id="gate", manifest_uri=spec.manifest_uri, job=job, deferrable=False)
    assert full.poke({}) is False and full.job["attempt"] == 2
    assert [h["attempt"] for h in LAUNCHES] == [1, 2]


def test_a_relaunch_by_the_gate_is_followed_by_every_later_reader_of_the_launch_handle(
    airflow_db, tmp_path, monkeypatch
):
    """A real dag.test(): the launch task's XCom keeps attempt 1's handle; the gate relaunches it; the
    later reader (a second gate on the same XCom) follows attempt 2 instead of relaunching again."""
    import importlib.util
    import os
    from datetime import datetime, timezone
    from pathlib import Path

    from curation_airflow_helpers import job_dirs

    from airflow_curation.backends import get_backend
    from airflow_curation.core.manifest import Manifest
    from airflow_curation.stages import STAGES

    repo = Path(__file__).resolve().parents[3]
    site = repo / "tests" / "backends" / "slurm" / "site"
    spec = importlib.util.spec_from_file_location("curation_slurm_test_stage", site / "curation_slurm_test_stage.py")
    stage_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stage_module)
    monkeypatch.setitem(STAGES, "slurmtest", stage_module.SleepyStage)  # this process; jobs: site/sitecustomize.py
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(repo)]))
    monkeypatch.setitem(BACKENDS, "relaunchable_local", "curation_airflow_helpers:RelaunchableLocalBackend")
    dag_spec = importlib.util.spec_from_file_location(
        "curation_sensor_relaunch_under_test", repo / "tests" / "airflow" / "dags" / "curation_sensor_relaunch.py"
    )
    dag_module = importlib.util.module_from_spec(dag_spec)
    dag_spec.loader.exec_module(dag_module)
    flag, jobs = tmp_path / "broken", tmp_path / "jobs"
    flag.touch()

    dag_run = dag_module.dag.test(
        logical_date=datetime(2026, 11, 25, tzinfo=timezone.utc),
        run_conf={"lake": str(tmp_path / "lake"), "jobs": str(jobs), "flag": str(flag)},
    )
    assert dag_run.state == "success", dag_run.state

    from test_airflow_dag import _xcoms

    xcoms = _xcoms(dag_run)
    launched = xcoms[("slurmtest", "return_value")]["job"]
    assert launched["attempt"] == 1  # what the launch task stored: never rewritten
    assert len(job_dirs(jobs)) == 2, "a reader of the first attempt's handle relaunched it again"
    backend = get_backend("relaunchable_local", **launched["backend_options"])
    newest = attempts.latest(backend, launched)
    assert newest.attempt == 2 and backend.status(newest.to_dict()).state.value == "succeeded"
    assert xcoms[("later_reader", "return_value")]["rows"] == 15 == xcoms[("gate", "return_value")]["rows"]
    assert Manifest.read(launched["manifest_uri"]).status == "complete"
