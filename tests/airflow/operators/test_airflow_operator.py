"""The stage operator with real jobs on the local backend: deferral, durable reconnect, cancel, XCom.

``execute()`` is called the way the task runner calls it, with a context that holds a task state
store. The store here is a plain in-memory one with the task state store's ``get``/``set`` API, shared
between two operator instances to play a worker that died and a retry that starts on a new one.
"""

from __future__ import annotations

import asyncio
import json
import os
from datetime import datetime, timezone
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred
from curation_airflow_helpers import RUN_ID, MemoryTaskStateStore, job_dirs, pid_alive
from curation_airflow_helpers import task_context as _context

from airflow_curation.backends import JobState, get_backend
from airflow_curation.core import storage
from airflow_curation.core.manifest import Manifest
from airflow_curation.operators.ingest import IngestOperator
from airflow_curation.triggers.stage_job import StageJobTrigger

pytestmark = pytest.mark.airflow


def _operator(lake: Path, inputs: Path, backend_options: dict, **kwargs) -> IngestOperator:
    return IngestOperator(
        task_id="ingest",
        inputs=str(inputs),
        lake=str(lake),
        dataset="web",
        snapshot="2026-11-30",
        backend_options=backend_options,
        poll_interval=0.05,
        config={"target_shard_bytes": 2048, "row_group_rows": 16},
        **kwargs,
    )


def _run_trigger(trigger: StageJobTrigger) -> dict:
    async def first_event():
        async for event in trigger.run():
            return event.payload

    return asyncio.run(first_event())


def test_defers_then_returns_only_the_summary(tmp_path, small_input):
    work = tmp_path / "jobs"
    op = _operator(tmp_path / "lake", small_input, {"work_dir": str(work)})
    ctx = {**_context(MemoryTaskStateStore()), "task": op}
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    trigger = deferred.value.trigger
    assert isinstance(trigger, StageJobTrigger)
    assert deferred.value.method_name == "execute_complete"
    # The trigger is rebuilt in the triggerer from its serialized form: it must hold only JSON.
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_curation.triggers.stage_job.StageJobTrigger"
    event = _run_trigger(StageJobTrigger(**kwargs))
    assert event["status"] == "succeeded", event

    summary = op.execute_complete(ctx, event)
    assert set(summary) == {"manifest_uri", "shards", "rows", "bytes"}
    manifest = Manifest.read(summary["manifest_uri"])
    assert manifest.status == "complete"
    assert summary["rows"] == manifest.rows == 60
    assert summary["shards"] == len(manifest.shards) > 1
    assert all(storage.exists(s.uri) for s in manifest.shards)
    # The run id is the snapshot and the run's kind (not Airflow's due time), under the snapshot partition.
    assert RUN_ID == "scheduled__2026-12-01T00:00:00+00:00"
    assert summary["manifest_uri"] == str(
        tmp_path / "lake" / "web" / "snapshot=2026-11-30" / "_manifests" / "2026-11-30__scheduled" / "ingest.json"
    )
    # What the manifest link serves (through the curation plugin), recorded at run time.
    assert ctx["ti"].pushed["curation_links"]["manifest"] == summary["manifest_uri"]


def test_restarted_worker_reconnects_instead_of_submitting_again(tmp_path, small_input, gate):
    work = tmp_path / "jobs"
    store = MemoryTaskStateStore()
    first = _operator(tmp_path / "lake", small_input, gate.backend_options(work))
    with pytest.raises(TaskDeferred) as d1:
        first.execute(_context(store))
    handle = store.get("curation_job")
    assert handle is not None and pid_alive(handle["pid"])
    assert d1.value.trigger.handle["job_id"] == handle["job_id"]
    assert [p.name for p in job_dirs(work)] == [handle["job_id"]]

    # The worker dies; a retry runs on a fresh operator instance with the same task state store.
    second = _operator(tmp_path / "lake", small_input, gate.backend_options(work))
    with pytest.raises(TaskDeferred) as d2:
        second.execute(_context(store))
    assert d2.value.trigger.handle["job_id"] == handle["job_id"]
    assert d2.value.trigger.handle["pid"] == handle["pid"]
    assert len(job_dirs(work)) == 1, "a second job was submitted"

    gate.open()
    event = _run_trigger(d2.value.trigger)
    assert event["status"] == "succeeded", event
    summary = second.execute_complete(_context(store), event)
    assert summary["rows"] == 60

    # A later retry finds the job succeeded: it returns the result without submitting or deferring.
    third = _operator(tmp_path / "lake", small_input, gate.backend_options(work))
    assert third.execute(_context(store)) == summary
    assert len(job_dirs(work)) == 1


def test_failed_job_is_resubmitted_on_retry_and_reported(tmp_path, small_input):
    work = tmp_path / "jobs"
    store = MemoryTaskStateStore()
    # What only the job finds out (the operator checks settings and that inputs exist): an input
    # folder with no file in it. The job fails.
    empty = tmp_path / "empty"
    empty.mkdir()
    op = _operator(tmp_path / "lake", empty, {"work_dir": str(work)}, deferrable=False)
    with pytest.raises(AirflowException, match="ingest job .* failed"):
        op.execute(_context(store))
    # A retry sees a job in a terminal failed state and submits a fresh one (which fails again).
    op2 = _operator(tmp_path / "lake", empty, {"work_dir": str(work)}, deferrable=False)
    with pytest.raises(AirflowException):
        op2.execute(_context(store))
    assert len(job_dirs(work)) == 2


def test_a_missing_input_fails_the_launch_before_any_job_without_retries(tmp_path, small_input):
    work = tmp_path / "jobs"
    missing = tmp_path / "does-not-exist"
    for inputs, message in (
        (missing, f"ingest: input not found: {missing}"),
        (f"{small_input},{tmp_path}/nothing-*.jsonl", "input not found: .*nothing-"),
        ("", "ingest: no input given"),
    ):
        op = _operator(tmp_path / "lake", inputs, {"work_dir": str(work)}, wait=False)
        with pytest.raises(AirflowFailException, match=message) as e:
            op.execute(_context(MemoryTaskStateStore()))
        assert "\n" not in str(e.value)
    assert not work.exists() or not job_dirs(work)


def test_no_lake_anywhere_fails_at_once(tmp_path, small_input, monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_CURATION_DEFAULT", raising=False)
    op = IngestOperator(
        task_id="ingest",
        inputs=str(small_input),
        lake="",
        dataset="web",
        curation_conn_id="curation_default",
        wait=False,
    )
    with pytest.raises(AirflowFailException, match="no lake given"):
        op.execute(_context(MemoryTaskStateStore()))


def test_wait_false_launches_and_returns_the_handle(tmp_path, small_input, gate):
    work = tmp_path / "jobs"
    op = _operator(tmp_path / "lake", small_input, gate.backend_options(work), wait=False)
    store = MemoryTaskStateStore()
    out = op.execute(_context(store))
    assert set(out) == {"manifest_uri", "job"}
    assert out["job"]["job_id"] == store.get("curation_job")["job_id"]
    backend = get_backend(out["job"]["backend"], **out["job"]["backend_options"])
    assert backend.status(out["job"]).state == JobState.RUNNING
    # A retry of the launch task does not launch twice either.
    again = _operator(tmp_path / "lake", small_input, gate.backend_options(work), wait=False).execute(_context(store))
    assert again["job"]["job_id"] == out["job"]["job_id"] and len(job_dirs(work)) == 1
    backend.cancel(out["job"])


def test_on_kill_cancels_the_job(tmp_path, small_input, gate):
    work = tmp_path / "jobs"
    op = _operator(tmp_path / "lake", small_input, gate.backend_options(work))
    with pytest.raises(TaskDeferred):
        op.execute(_context(MemoryTaskStateStore()))
    handle = op._handle
    assert pid_alive(handle["pid"])
    op.on_kill()
    backend = get_backend("local", **handle["backend_options"])
    assert backend.status(handle).state == JobState.CANCELLED
    assert not pid_alive(handle["pid"]) or _is_zombie(handle["pid"])
    assert not os.path.exists(handle["result"])


def test_killing_the_deferred_task_cancels_the_job_from_the_trigger(tmp_path, small_input, gate):
    op = _operator(tmp_path / "lake", small_input, gate.backend_options(tmp_path / "jobs"))
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(_context(MemoryTaskStateStore()))
    trigger = StageJobTrigger(**deferred.value.trigger.serialize()[1])  # as rebuilt in the triggerer
    handle = trigger.handle
    backend = get_backend("local", **handle["backend_options"])
    assert backend.status(handle).state == JobState.RUNNING
    asyncio.run(trigger.on_kill())
    assert backend.status(handle).state == JobState.CANCELLED


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_synchronous_wait_without_a_triggerer(tmp_path, small_input):
    op = _operator(tmp_path / "lake", small_input, {"work_dir": str(tmp_path / "jobs")}, deferrable=False)
    summary = op.execute(_context(MemoryTaskStateStore()))
    assert set(summary) == {"manifest_uri", "shards", "rows", "bytes"} and summary["rows"] == 60


def test_templated_fields_and_run_id(tmp_path):
    op = IngestOperator(
        task_id="ingest", inputs="a.jsonl, b.jsonl", lake=str(tmp_path), dataset="web", max_failed_fraction="0.25"
    )
    for name in ("inputs", "lake", "dataset", "snapshot", "config", "backend"):
        assert name in op.template_fields
    spec = op.build_spec({"run_id": "manual__2026-11-30T10:00:00+00:00"})
    assert spec.run_id == "manual__2026-11-30T10:00:00+00:00"  # no snapshot: the Airflow run id, path-safe
    # With a snapshot, the run id a user sees starts with it, whatever the trigger time.
    dated = IngestOperator(task_id="ingest", inputs="a.jsonl", lake=str(tmp_path), dataset="web", snapshot="2026-11-29")
    midnight = datetime(2026, 11, 29, tzinfo=timezone.utc)
    backfill = {"run_id": "backfill__2026-11-30T00:00:00+00:00", "logical_date": midnight}
    assert dated.build_spec(backfill).run_id == "2026-11-29__backfill"
    assert dated.build_spec({"run_id": "manual__2026-12-03T06:12:25+00:00"}).run_id.startswith("2026-11-29__manual-")
    named = IngestOperator(task_id="i", inputs="a", lake=str(tmp_path), dataset="web", snapshot="s", run_id="mine/1")
    assert named.build_spec({"run_id": "manual__x"}).run_id == "mine_1"  # a given run_id wins
    assert spec.config["inputs"] == ["a.jsonl", "b.jsonl"]
    assert spec.config["max_failed_fraction"] == 0.25
    with pytest.raises(ValueError, match="invalid dataset"):
        IngestOperator(task_id="x", inputs="a", lake=str(tmp_path), dataset="../escape").build_spec({"run_id": "r"})


def test_a_second_ingest_of_other_inputs_fails_unless_it_replaces(tmp_path, small_input):
    """Issue 21: another run's inputs would overwrite the first run's shards; ``replace`` supersedes it."""
    first = _operator(tmp_path / "lake", small_input, {"work_dir": str(tmp_path / "jobs")}, deferrable=False)
    first.execute(_context(MemoryTaskStateStore(), run_id="first"))
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps({"text": f"another document {i}"}) + "\n" for i in range(5)))
    again = _operator(tmp_path / "lake", other, {"work_dir": str(tmp_path / "jobs2")}, deferrable=False)
    with pytest.raises(Exception, match=r"complete run 2026-11-30__manual-[0-9a-f]{8} .*--replace \(replace=True\)"):
        again.execute(_context(MemoryTaskStateStore(), run_id="second"))
    replacing = _operator(
        tmp_path / "lake", other, {"work_dir": str(tmp_path / "jobs3")}, deferrable=False, replace="true"
    )
    assert replacing.build_spec({"run_id": "third"}).config["replace"] is True
    summary = replacing.execute(_context(MemoryTaskStateStore(), run_id="third"))
    assert summary["rows"] == 5 and Manifest.read(summary["manifest_uri"]).supersedes


def test_a_task_deferred_by_the_earlier_version_resumes(tmp_path, small_input):
    """The trigger kwargs the earlier operator serialized (its flat handle dict, built by hand here as it
    built it) run in today's triggerer, and today's operator and gate finish the task from their events."""
    import time

    from airflow_curation.jobs.spec import JobSpec
    from airflow_curation.sensors.shard_checkpoint import ShardCheckpointSensor
    from airflow_curation.triggers.shard_checkpoint import ShardCheckpointTrigger

    work = tmp_path / "jobs"
    op = _operator(tmp_path / "lake", small_input, {"work_dir": str(work)})
    ctx = {**_context(MemoryTaskStateStore()), "task": op}
    spec = op.build_spec(ctx)
    backend = get_backend("local", work_dir=str(work))
    handle = backend.submit(spec)
    old = {
        **handle,
        "backend": "local",
        "backend_options": {"work_dir": str(work), "python": backend.python},
        "curation_conn_id": None,
        "lake_root": spec.lake["root"],
        "manifest_uri": spec.manifest_uri,
        "submitted_at": time.time(),
    }
    stage_kwargs = {
        "backend": "local",
        "backend_options": old["backend_options"],
        "handle": old,
        "poll_interval": 0.05,
        "log_offset": 0,
        "curation_conn_id": None,
    }
    event = _run_trigger(StageJobTrigger(**stage_kwargs))
    assert event["status"] == "succeeded" and event["handle"]["job_id"] == old["job_id"], event
    assert op.execute_complete(ctx, event)["rows"] == 60

    gate_kwargs = {
        "manifest_uri": old["manifest_uri"],
        "max_failed_fraction": None,
        "backend": "local",
        "backend_options": old["backend_options"],
        "job": old,
        "not_before": old["submitted_at"],
        "curation_conn_id": None,
        "quorum": 1.0,
        "poll_interval": 0.05,
        "log_offset": 0,
    }
    gate_event = _run_trigger(ShardCheckpointTrigger(**gate_kwargs))
    assert gate_event["status"] == "done", gate_event
    gate = ShardCheckpointSensor(task_id="gate", manifest_uri=old["manifest_uri"], job=old)
    assert gate.execute_complete(ctx, gate_event)["rows"] == 60
    assert JobSpec.read(old["spec"]) == spec
