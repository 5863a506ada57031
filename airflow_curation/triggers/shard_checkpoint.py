"""Gate on a stage's per-shard checkpoints: done when every unit of a manifest has one.

The checkpoint records, not the job's exit code, are the truth: a record with the manifest's
fingerprint and the unit's input checksum means that unit's outputs are complete. So the gate works
the same for every backend, and for a job that was launched by someone else.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Callable
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_curation.backends.base import JobState
from airflow_curation.core import storage
from airflow_curation.core.manifest import ManifestError
from airflow_curation.jobs.progress import CheckpointWatcher, Progress
from airflow_curation.triggers.job_log import JobLogRelay, unit_line
from airflow_curation.triggers.polling import PollSchedule, interruptible_inline, wait_for_look

__all__ = ["CheckpointWatcher", "Progress", "ShardCheckpointTrigger", "decide"]


class ShardCheckpointTrigger(BaseTrigger):
    """Polls a manifest's checkpoints; logs progress whenever it changes; fires one event:

    * ``{"status": "done", "summary": {...}, ...}`` once every unit is checkpointed (or failed within
      the budget);
    * ``{"status": "failed", "reason": ...}`` as soon as failed units exceed the failure budget, the
      manifest says the run failed, or the job (when a handle is given) ended before all units were
      checkpointed;
    * ``{"status": "relaunch", "job": ...}`` when the job failed in a way its backend calls retryable
      and attempts remain: the sensor (in the worker) relaunches it and defers again.

    :param manifest_uri: the manifest to gate on.
    :param max_failed_fraction: failure budget; ``None`` means the manifest's own.
    :param backend: backend name, with ``backend_options`` and ``job``: the job to watch for death.
    :param not_before: see :class:`CheckpointWatcher`.
    :param curation_conn_id: optional ``curation`` connection for storage credentials, resolved in the
        triggerer and in effect for this gate only (:func:`~airflow_curation.core.storage_map.using`).
    :param quorum: fraction of units that opens the gate (default 1.0: all); see :func:`decide`.
    :param poll_interval: the longest wait between looks: the first look is at once, the next ones after
        0.5 s, doubling up to ``poll_interval`` (:class:`~.polling.PollSchedule`), and 0.5 s again once every
        unit is accounted for.
    :param log_offset: where streaming the job's log starts (with ``job``): its lines go to the task
        log at their own level, a traceback once at ERROR, and each unit's counts when it is checkpointed.
    """

    def __init__(
        self,
        manifest_uri: str,
        max_failed_fraction: float | None = None,
        backend: str | None = None,
        backend_options: dict[str, Any] | None = None,
        job: dict[str, Any] | None = None,
        not_before: float | None = None,
        curation_conn_id: str | None = None,
        quorum: float = 1.0,
        poll_interval: float = 10.0,
        log_offset: int = 0,
    ) -> None:
        super().__init__()
        self.log_offset = log_offset
        self.quorum = quorum
        self.not_before = not_before
        self.curation_conn_id = curation_conn_id
        self.manifest_uri = manifest_uri
        self.max_failed_fraction = max_failed_fraction
        self.backend = backend
        self.backend_options = backend_options or {}
        self.job = job
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "manifest_uri": self.manifest_uri,
                "max_failed_fraction": self.max_failed_fraction,
                "backend": self.backend,
                "backend_options": self.backend_options,
                "job": self.job,
                "not_before": self.not_before,
                "curation_conn_id": self.curation_conn_id,
                "quorum": self.quorum,
                "poll_interval": self.poll_interval,
                "log_offset": self.log_offset,
            },
        )

    def _connect(self):
        """Resolve the connections here, in the triggerer (blocking: call it in a thread): the connection's
        storage map, and the backend of the job to watch (None without one)."""
        from airflow_curation.hooks.factory import backend_for, curation_settings

        conn_id = self.curation_conn_id or (self.job or {}).get("curation_conn_id")
        smap = curation_settings(conn_id).storage
        if self.job is None:
            return smap, None
        return smap, backend_for(self.backend or self.job.get("backend", "local"), self.backend_options)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        smap, backend = await asyncio.to_thread(self._connect)
        # In effect for this gate's task only (its threads copy the context): two gates in one triggerer
        # each read their lake with their own connection's options, and nothing outlives the gate.
        with storage.using(smap), interruptible_inline():
            async for event in self._follow(backend):
                yield event

    async def _follow(self, backend) -> AsyncIterator[TriggerEvent]:
        watcher = CheckpointWatcher(self.manifest_uri, self.max_failed_fraction, self.not_before)
        last_line = None
        relay = JobLogRelay(self.log, str((self.job or {}).get("job_id", "?")))
        schedule = PollSchedule(self.poll_interval)
        tail = False
        while True:
            # The job's state is read BEFORE the checkpoints: a job that ended before this look has
            # written everything it ever will, so "ended and still incomplete" is final.
            if backend is not None:  # the newest attempt, also when another follower relaunched the job
                self.job = await asyncio.to_thread(backend.current, self.job)
            job_status = await asyncio.to_thread(backend.status, self.job) if backend else None
            if backend is not None:
                await asyncio.to_thread(self._stream_log, backend, relay, job_status)
            try:
                progress = await asyncio.to_thread(watcher.look)
            except ManifestError as e:
                yield TriggerEvent({"status": "failed", "reason": str(e), "manifest_uri": self.manifest_uri})
                return
            for unit_id, info in sorted(watcher.new_units.items()):
                self.log.info(unit_line(progress.stage, unit_id, info))
            if progress.line() != last_line:
                last_line = progress.line()
                self.log.info(last_line)
            if (
                job_status is not None
                and job_status.state == JobState.FAILED
                and await asyncio.to_thread(backend.can_relaunch, self.job, job_status)
            ):
                yield TriggerEvent(
                    {
                        "status": "relaunch",
                        "reason": job_status.message,
                        "job": self.job,
                        "manifest_uri": self.manifest_uri,
                    }
                )
                return
            event = decide(progress, job_status, self.quorum, lambda: backend.attempts_left(self.job))
            if event is not None:
                yield TriggerEvent(event)
                return
            if not tail and progress.total and progress.done + progress.failed >= progress.total:
                # Every unit is accounted for: only the job's last step (collect, the final manifest) is
                # left, seconds as a rule; look again soon rather than a whole interval later.
                tail = True
                schedule.restart()
            await wait_for_look(schedule.next(), backend, self.job)

    def _stream_log(self, backend: Any, relay: JobLogRelay, job_status: Any) -> None:
        """The job's new log text into the task log; never fails the gate (the log is a courtesy)."""
        try:
            text, self.log_offset = backend.logs(self.job, self.log_offset)
        except Exception as e:  # noqa: BLE001
            self.log.debug("cannot read the job's log: %s", e)
            return
        relay.feed(text)
        if job_status is not None and job_status.state.finished:
            relay.flush()


def decide(
    progress: Progress, job_status=None, quorum: float = 1.0, may_relaunch: Callable[[], bool] | None = None
) -> dict[str, Any] | None:
    """The gate's verdict for one look, or None to keep waiting. Shared by the trigger and ``poke``.

    :param quorum: fraction of units whose checkpoints open the gate (1.0: all of them). Below 1, a
        downstream stage that polls the upstream checkpoints itself can start while the rest finish.
    :param may_relaunch: whether the job's backend may still relaunch it: then failed units of a job
        still running are not final (a relaunch reopens them), and the job's end decides.
    """
    base = {
        "manifest_uri": progress.manifest_uri,
        "stage": progress.stage,
        "done": progress.done,
        "total": progress.total,
        "failed": progress.failed,
        "allowed_failures": progress.allowed_failures,
    }
    failing = progress.over_budget or progress.manifest_status == "failed"
    if failing and job_status is not None and not job_status.state.finished and may_relaunch and may_relaunch():
        return None
    if progress.over_budget:
        return {
            **base,
            "status": "failed",
            "reason": f"{progress.failed} of {progress.total} units failed, budget allows "
            f"{progress.allowed_failures}: {progress.failed_units[:5]}",
        }
    if progress.manifest_status == "failed":
        return {**base, "status": "failed", "reason": f"the {progress.stage} run's manifest says it failed"}
    if progress.books:
        return {**base, "status": "failed", "reason": f"row accounting: {progress.books}"}
    if progress.complete:
        return {**base, "status": "done", "partial": False, "summary": progress.summary()}
    if (
        quorum < 1.0
        and progress.manifest_status != "missing"
        and progress.total
        and progress.done >= math.ceil(quorum * progress.total)
    ):
        return {**base, "status": "done", "partial": True, "summary": progress.summary()}
    if job_status is not None and job_status.state.finished:
        missing = progress.total - progress.done - progress.failed
        if progress.manifest_status == "missing":
            what = "before writing its manifest"
        elif missing > 0:
            what = f"with {missing} of {progress.total} units not checkpointed"
        else:
            what = "before completing its manifest (every unit is checkpointed: a rerun only finishes it)"
        return {
            **base,
            "status": "failed",
            "reason": f"job {job_status.state.value} {what}: {job_status.message}".rstrip(": "),
        }
    return None
