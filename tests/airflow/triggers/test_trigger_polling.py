"""The gates look at once, then again after a short wait that doubles up to ``poll_interval``, and soon
again once every unit is accounted for: a stage of seconds is not rounded up to a whole interval."""

from __future__ import annotations

import asyncio

import pytest
from curation_airflow_helpers import Run, _first_event

from airflow_curation.triggers import shard_checkpoint, stage_job
from airflow_curation.triggers.polling import PollSchedule

pytestmark = pytest.mark.airflow


def test_schedule_starts_short_doubles_to_the_interval_and_restarts():
    s = PollSchedule(5.0)
    assert [s.next() for _ in range(7)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0]
    s.restart()
    assert [s.next() for _ in range(2)] == [0.5, 1.0]
    tiny = PollSchedule(0.01)  # an interval under the first wait: never longer than the interval
    assert [tiny.next() for _ in range(3)] == [0.01, 0.01, 0.01]
    zero = PollSchedule(0)
    assert [zero.next() for _ in range(2)] == [0, 0]


def _record_sleeps(monkeypatch, module, on_sleep=None) -> list[float]:
    waits: list[float] = []
    real = asyncio.sleep

    async def fake(seconds, *args, **kwargs):
        waits.append(seconds)
        if on_sleep is not None:
            on_sleep(len(waits))
        await real(0)

    monkeypatch.setattr(module.asyncio, "sleep", fake)
    return waits


def test_checkpoint_gate_looks_at_once_then_soon_and_soon_again_in_the_tail(tmp_path, monkeypatch):
    run = Run(tmp_path, 2)
    run.auto_finish = False
    steps = {1: lambda: run.commit(0), 2: lambda: run.commit(1), 3: lambda: _complete(run)}
    waits = _record_sleeps(monkeypatch, shard_checkpoint, lambda n: steps[n]() if n in steps else None)
    trigger = shard_checkpoint.ShardCheckpointTrigger(manifest_uri=run.uri, poll_interval=30.0)
    event = _first_event(trigger)
    assert event["status"] == "done"
    # first look at once (nothing yet), then 0.5 s (unit 0), 1 s (unit 1: every unit accounted, the job's
    # final manifest still to come), then 0.5 s again rather than 2 s, never the 30 s interval
    assert waits == [0.5, 1.0, 0.5]


def test_checkpoint_gate_on_a_finished_stage_does_not_wait(tmp_path, monkeypatch):
    run = Run(tmp_path, 2)
    run.commit(0)
    run.commit(1)
    waits = _record_sleeps(monkeypatch, shard_checkpoint)
    event = _first_event(shard_checkpoint.ShardCheckpointTrigger(manifest_uri=run.uri, poll_interval=30.0))
    assert event["status"] == "done" and waits == []


def _complete(run: Run) -> None:
    run.manifest.status = "complete"
    run.manifest.write(run.uri)


def test_job_trigger_polls_at_once_then_after_a_short_wait(monkeypatch):
    from airflow_curation.backends.base import JobState, JobStatus

    states = iter([JobState.RUNNING, JobState.RUNNING, JobState.SUCCEEDED])

    class Backend:
        def status(self, handle):
            return JobStatus(next(states), "")

        def logs(self, handle, offset):
            return "", offset

    payload, waits = _run_job_trigger(monkeypatch, Backend())
    assert payload["status"] == JobState.SUCCEEDED.value
    assert waits == [0.5, 1.0]


def _run_job_trigger(monkeypatch, backend) -> tuple[dict, list[float]]:
    """A job trigger (30 s interval) over ``backend`` to its first event: (its payload, the waits)."""
    waits = _record_sleeps(monkeypatch, stage_job)
    trigger = stage_job.StageJobTrigger(backend="local", backend_options={}, handle={"job_id": "j"}, poll_interval=30)
    monkeypatch.setattr(trigger, "_connect", lambda: (None, backend))

    async def go():
        async for event in trigger.run():
            return event.payload

    return asyncio.run(go()), waits


def test_a_gate_on_a_cheap_status_backend_opens_at_the_jobs_end_not_the_interval(monkeypatch):
    """The local backend's status is a /proc read: between looks the gate reads it every 0.5 s and looks
    as soon as the job has finished, instead of sleeping out the rest of a 30 s wait."""
    from airflow_curation.backends.base import JobState, JobStatus
    from airflow_curation.backends.local import LocalBackend

    reads: list[str] = []
    # look 1, then the 0.5 s wait (one step, no read), look 2, then the 1 s wait: a read after its first
    # step sees the job finished, and the gate looks at once (its third look) instead of 0.5 s later
    states = iter([JobState.RUNNING, JobState.RUNNING, JobState.SUCCEEDED, JobState.SUCCEEDED])

    class Backend:
        status_poll_s = LocalBackend.status_poll_s

        def status(self, handle):
            state = next(states)
            reads.append(state.value)
            return JobStatus(state, "")

        def logs(self, handle, offset):
            return "", offset

    payload, waits = _run_job_trigger(monkeypatch, Backend())
    assert payload["status"] == JobState.SUCCEEDED.value
    assert waits == [0.5, 0.5] and reads == ["running", "running", "succeeded", "succeeded"]
    assert LocalBackend.status_poll_s == 0.5


def test_a_backend_whose_status_is_a_remote_call_waits_the_whole_step(monkeypatch):
    from airflow_curation.backends.base import Backend
    from airflow_curation.triggers.polling import wait_for_look

    waits = _record_sleeps(monkeypatch, stage_job)

    class Remote:
        status_poll_s = Backend.status_poll_s  # None: Slurm, Kubernetes

        def status(self, handle):  # pragma: no cover - must not be called between looks
            raise AssertionError("status read between looks")

    asyncio.run(wait_for_look(4.0, Remote(), {"job_id": "j"}))
    assert waits == [4.0]
