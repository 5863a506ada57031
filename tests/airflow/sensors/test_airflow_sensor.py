"""ShardCheckpointTrigger and ShardCheckpointSensor against real manifests and checkpoint records.

The trigger's ``run()`` async generator is driven directly, as the triggerer would.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import structlog
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred
from curation_airflow_helpers import FP, Run, _first_event

from airflow_curation.backends import get_backend
from airflow_curation.core.checkpoint import CheckpointRecord
from airflow_curation.core.layout import Lake
from airflow_curation.jobs.spec import JobSpec
from airflow_curation.sensors.shard_checkpoint import ShardCheckpointSensor
from airflow_curation.triggers.shard_checkpoint import ShardCheckpointTrigger

pytestmark = pytest.mark.airflow


def _trigger(run: Run, **kwargs) -> ShardCheckpointTrigger:
    trigger = ShardCheckpointTrigger(manifest_uri=run.uri, poll_interval=0.01, **kwargs)
    classpath, kw = trigger.serialize()  # what the triggerer gets
    assert classpath == "airflow_curation.triggers.shard_checkpoint.ShardCheckpointTrigger"
    return ShardCheckpointTrigger(**kw)


def test_done_when_every_unit_is_checkpointed(tmp_path):
    run = Run(tmp_path, 3)
    for i in range(3):
        run.commit(i, rows=10 + i)
    event = _first_event(_trigger(run))
    assert event["status"] == "done"
    assert event["summary"] == {"manifest_uri": run.uri, "shards": 3, "rows": 33, "bytes": 3300}


def test_not_done_until_the_run_writes_its_final_manifest(tmp_path):
    """Every unit checkpointed is not enough: a global step (dedup's components) or the gather of an
    array/sweep runs after the last unit, and downstream stages need the complete manifest."""
    run = Run(tmp_path, 2)
    run.auto_finish = False
    run.commit(0)
    run.commit(1)
    trigger = _trigger(run)

    async def first_event_within(seconds: float):
        async def go():
            async for event in trigger.run():
                return event.payload

        try:
            return await asyncio.wait_for(go(), seconds)
        except asyncio.TimeoutError:
            return None

    assert asyncio.run(first_event_within(0.5)) is None
    run.manifest.status = "complete"
    run.manifest.write(run.uri)
    assert asyncio.run(first_event_within(10))["status"] == "done"


def test_progress_is_logged_and_done_fires_only_after_the_last_unit(tmp_path):
    run = Run(tmp_path, 3)
    run.commit(0)
    trigger = _trigger(run)

    async def go(captured: list[dict]):
        gen = trigger.run()
        pending = asyncio.ensure_future(gen.__anext__())

        async def until_logged(text: str) -> None:
            while not any(text in str(e.get("event")) for e in captured):
                assert not pending.done(), f"fired early: {pending.result().payload}"
                await asyncio.sleep(0.005)

        await until_logged("1/3 units checkpointed")
        run.commit(1)
        await until_logged("2/3 units checkpointed")
        assert not pending.done()
        run.commit(2)
        event = await pending
        await gen.aclose()
        return event.payload

    # The trigger logs through structlog (the triggerer routes it to the task's log).
    with structlog.testing.capture_logs() as captured:
        event = asyncio.run(go(captured))
    assert event["status"] == "done" and event["done"] == 3
    assert any("3/3 units checkpointed" in str(e.get("event")) for e in captured)


def test_a_record_for_other_input_does_not_count(tmp_path):
    run = Run(tmp_path, 2)
    run.commit(0)
    run.commit(1, checksum="stale")  # same config, different input: not this run's output
    trigger = _trigger(run)

    async def go():
        gen = trigger.run()
        pending = asyncio.ensure_future(gen.__anext__())
        for _ in range(20):  # let it look many times
            await asyncio.sleep(0.01)
        assert not pending.done()
        run.commit(1)
        return (await pending).payload

    assert asyncio.run(go())["status"] == "done"


def test_fails_as_soon_as_failures_exceed_the_budget(tmp_path):
    run = Run(tmp_path, 8, budget=0.25)  # 2 of 8 allowed
    run.commit(0)
    run.fail(1)
    run.fail(2)
    run.fail(3)  # 3 failed, 4 units still running: fail now, not when they finish
    event = _first_event(_trigger(run))
    assert event["status"] == "failed"
    assert "3 of 8 units failed, budget allows 2" in event["reason"]


def test_failures_within_budget_still_complete(tmp_path):
    run = Run(tmp_path, 4, budget=0.25)
    for i in (0, 1, 2):
        run.commit(i)
    run.fail(3)
    event = _first_event(_trigger(run))
    assert event["status"] == "done" and event["failed"] == 1
    assert event["summary"]["shards"] == 3
    # The sensor's own budget overrides the manifest's.
    assert _first_event(_trigger(run, max_failed_fraction=0.0))["status"] == "failed"


def test_stale_failure_markers_from_an_earlier_run_are_ignored(tmp_path):
    run = Run(tmp_path, 2)
    run.fail(1)
    # The job is rerun: a new plan, later than the marker. The marker no longer counts.
    time.sleep(0.01)
    run.auto_finish = False  # the rerun finishes its manifest itself, below
    run.manifest.created_at = time.time()
    run.manifest.status = "planned"
    run.manifest.write(run.uri)
    run.commit(0)
    trigger = _trigger(run)

    async def go():
        gen = trigger.run()
        pending = asyncio.ensure_future(gen.__anext__())
        for _ in range(20):
            await asyncio.sleep(0.01)
        assert not pending.done()
        run.commit(1)
        run.manifest.status = "complete"
        run.manifest.write(run.uri)
        return (await pending).payload

    assert asyncio.run(go())["status"] == "done"


def test_fails_when_the_job_died_before_checkpointing_everything(tmp_path):
    lake = Lake(str(tmp_path / "lake"), "web")
    backend = get_backend("local", work_dir=str(tmp_path / "jobs"))
    # A real job that fails at once: its input does not exist.
    handle = backend.submit(
        JobSpec(stage="ingest", lake=lake.to_dict(), run_id="r1", config={"inputs": [str(tmp_path / "missing")]})
    )
    trigger = ShardCheckpointTrigger(
        manifest_uri=handle["manifest_uri"],
        backend="local",
        backend_options=backend.options(),
        job=handle,
        poll_interval=0.05,
    )
    with structlog.testing.capture_logs() as captured:
        event = _first_event(trigger)
    assert event["status"] == "failed"
    assert "failed before writing its manifest" in event["reason"]
    # The job's log reached the gate's log: its traceback once, at ERROR, as one record.
    tracebacks = [e for e in captured if "Traceback" in str(e.get("event"))]
    assert len(tracebacks) == 1 and tracebacks[0]["log_level"] == "error", captured
    assert "does not exist" in str(tracebacks[0]["event"]).splitlines()[-1]
    # A failed gate cannot be fixed by running the gate again: no retries.
    sensor = ShardCheckpointSensor(task_id="ingest_checkpoints", manifest_uri=handle["manifest_uri"])
    with pytest.raises(AirflowFailException, match="ingest gate: job failed before writing its manifest"):
        sensor.execute_complete({}, event)


def test_the_gate_logs_each_units_counts_when_it_is_checkpointed(tmp_path):
    run = Run(tmp_path, 2)
    rec_acc = {"read": 12, "kept": 9, "dropped": {"too_short": 1}, "quarantined": {"bad_json": 2}}
    for i in range(2):
        unit = run.units[i]
        out = {
            "shard_id": unit.unit_id,
            "uri": f"/x/{unit.unit_id}.parquet",
            "rows": 9,
            "bytes": 900,
            "checksum": "s",
            "unit_id": unit.unit_id,
        }
        run.store.commit(
            CheckpointRecord(
                unit_id=unit.unit_id,
                stage="preprocess",
                fingerprint=FP,
                input_checksum=unit.input_checksum,
                outputs=[out],
                accounting=rec_acc,
            )
        )
    run.manifest.status = "complete"
    run.manifest.write(run.uri)
    with structlog.testing.capture_logs() as captured:
        event = _first_event(_trigger(run))
    assert event["status"] == "done" and event["stage"] == "preprocess"
    lines = [str(e["event"]) for e in captured if "checkpointed:" in str(e.get("event"))]
    assert lines == [
        f"preprocess: unit part-0000{i} checkpointed: 9 rows in 1 shards; read 12, kept 9; "
        "dropped 1 (too_short=1); quarantined 2 (bad_json=2)"
        for i in range(2)
    ]


def test_job_log_relay_keeps_levels_and_joins_a_traceback_split_across_reads():
    from airflow_curation.triggers.job_log import JobLogRelay

    records: list[tuple[str, str]] = []

    class Log:
        def __getattr__(self, level):
            return lambda fmt, *args: records.append((level, fmt % args))

    relay = JobLogRelay(Log(), "j1")
    relay.feed("2026-11-30 10:00:00,000 INFO stage: unit 1 done\n2026-11-30 10:00:01,000 WARNING stage: un")
    relay.feed('it 2 attempt 1/2 failed\nTraceback (most recent call last):\n  File "x.py", line 1\n')
    relay.feed('    boom()\nValueError: boom\n{"status": "failed"}')
    relay.flush()
    assert [level for level, _ in records] == ["info", "warning", "error", "info"]
    assert records[1][1].endswith("unit 2 attempt 1/2 failed")
    assert records[2][1].startswith("[job j1] Traceback") and records[2][1].endswith("ValueError: boom")
    assert records[3][1] == '[job j1] {"status": "failed"}'  # not a job result: relayed as it is


def test_job_log_relay_says_the_job_result_in_words():
    from airflow_curation.jobs.result import JobResult
    from airflow_curation.triggers.job_log import JobLogRelay

    records: list[tuple[str, str]] = []

    class Log:
        def __getattr__(self, level):
            return lambda fmt, *args: records.append((level, fmt % args))

    ok = JobResult(
        kind="run",
        status="succeeded",
        returncode=0,
        manifest_uri="s3://l/m.json",
        shards=3,
        rows=1200,
        seconds=12.34,
        accounting={"read": 1250, "kept": 1200, "dropped": {"too_short": 40}, "quarantined": {"bad_json": 10}},
    )
    bad = JobResult(kind="group", status="failed", returncode=1, group="2/3", error="StageFailed: 1 of 4 units failed")
    relay = JobLogRelay(Log(), "j1")
    relay.feed(json.dumps(ok.to_dict(), sort_keys=True) + "\n" + json.dumps(bad.to_dict()) + "\n")
    assert records == [
        (
            "info",
            "[job j1] job result: run succeeded in 12.3 s: 1,200 rows in 3 shards (read 1,250, kept 1,200, "
            "dropped 40, quarantined 10); manifest s3://l/m.json",
        ),
        ("error", "[job j1] job result: group 2/3 failed (exit 1): StageFailed: 1 of 4 units failed"),
    ]


def test_sensor_returns_at_once_when_already_done_and_defers_otherwise(tmp_path):
    run = Run(tmp_path, 2)
    sensor = ShardCheckpointSensor(task_id="gate", manifest_uri=run.uri, poll_interval=0.01)
    with pytest.raises(TaskDeferred) as d:
        sensor.execute({})
    assert isinstance(d.value.trigger, ShardCheckpointTrigger)
    run.commit(0)
    run.commit(1)
    assert sensor.execute({}) == {"manifest_uri": run.uri, "shards": 2, "rows": 20, "bytes": 2000}
    with pytest.raises(AirflowException, match="budget"):
        sensor.execute_complete({}, {"status": "failed", "reason": "3 of 8 units failed, budget allows 2"})


def test_sensor_poke_mode(tmp_path):
    run = Run(tmp_path, 2, budget=0.5)
    sensor = ShardCheckpointSensor(task_id="gate", manifest_uri=run.uri, deferrable=False, poll_interval=0.01)
    assert sensor.poke({}) is False
    run.commit(0)
    run.fail(1)
    result = sensor.poke({})
    assert result.is_done and result.xcom_value["shards"] == 1


def test_a_quorum_opens_the_gate_before_the_last_units(tmp_path):
    run = Run(tmp_path, 4)
    run.commit(0)
    run.commit(1)
    run.commit(2)
    event = _first_event(_trigger(run, quorum=0.75))
    assert event["status"] == "done" and event["partial"] is True
    assert event["summary"]["shards"] == 3
    # Without a quorum the same state keeps the gate shut; the sensor refuses a quorum of 0.
    sensor = ShardCheckpointSensor(task_id="gate", manifest_uri=run.uri, deferrable=False)
    assert sensor.poke({}) is False
    with pytest.raises(ValueError, match="quorum"):
        ShardCheckpointSensor(task_id="g", manifest_uri=run.uri, quorum=0, deferrable=False).poke({})


def test_sensor_takes_the_job_as_rendered_text(tmp_path):
    run = Run(tmp_path, 1)
    assert ShardCheckpointSensor(task_id="g", manifest_uri=run.uri, job="None", deferrable=False).poke({}) is False
    backend = get_backend("local", work_dir=str(tmp_path / "jobs"))
    lake = Lake(str(tmp_path / "lake2"), "web")
    handle = backend.submit(
        JobSpec(stage="ingest", lake=lake.to_dict(), run_id="r1", config={"inputs": [str(tmp_path / "missing")]})
    )
    handle = {**handle, "backend": "local", "backend_options": backend.options()}
    sensor = ShardCheckpointSensor(
        task_id="g", manifest_uri=handle["manifest_uri"], job=json.dumps(handle), deferrable=False
    )
    while backend.status(handle).state.value == "running":  # a Jinja-rendered handle is JSON text
        time.sleep(0.05)
    with pytest.raises(AirflowException, match="before writing its manifest"):
        sensor.poke({})
