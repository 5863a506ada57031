"""Gate on a stage's per-shard checkpoints: done when every unit of a manifest has one.

The checkpoint records, not the job's exit code, are the truth: a record with the manifest's
fingerprint and the unit's input checksum means that unit's outputs are complete. So the gate works
the same for every backend, and for a job that was launched by someone else.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_curation.backends.base import JobState
from airflow_curation.core.manifest import ManifestError
from airflow_curation.jobs.progress import CheckpointWatcher, Progress

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
    :param curation_conn_id: optional ``curation`` connection for storage credentials.
    :param quorum: fraction of units that opens the gate (default 1.0: all); see :func:`decide`.
    :param poll_interval: seconds between looks.
    """

    def __init__(self, manifest_uri: str, max_failed_fraction: float | None = None,
                 backend: str | None = None, backend_options: dict[str, Any] | None = None,
                 job: dict[str, Any] | None = None, not_before: float | None = None,
                 curation_conn_id: str | None = None, quorum: float = 1.0,
                 poll_interval: float = 10.0) -> None:
        super().__init__()
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
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"manifest_uri": self.manifest_uri, "max_failed_fraction": self.max_failed_fraction,
                 "backend": self.backend, "backend_options": self.backend_options, "job": self.job,
                 "not_before": self.not_before, "curation_conn_id": self.curation_conn_id,
                 "quorum": self.quorum,
                 "poll_interval": self.poll_interval})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        if self.curation_conn_id:
            from airflow_curation.hooks.curation import CurationHook

            await asyncio.to_thread(CurationHook(self.curation_conn_id).apply_storage_options)
        watcher = CheckpointWatcher(self.manifest_uri, self.max_failed_fraction, self.not_before)
        backend = None
        if self.job is not None:
            from airflow_curation.backends import get_backend

            backend = get_backend(self.backend or self.job.get("backend", "local"), **self.backend_options)
        last_line = None
        while True:
            # The job's state is read BEFORE the checkpoints: a job that ended before this look has
            # written everything it ever will, so "ended and still incomplete" is final.
            job_status = await asyncio.to_thread(backend.status, self.job) if backend else None
            try:
                progress = await asyncio.to_thread(watcher.look)
            except ManifestError as e:
                yield TriggerEvent({"status": "failed", "reason": str(e), "manifest_uri": self.manifest_uri})
                return
            if progress.line() != last_line:
                last_line = progress.line()
                self.log.info(last_line)
            if job_status is not None and job_status.state == JobState.FAILED \
                    and await asyncio.to_thread(backend.can_relaunch, self.job, job_status):
                yield TriggerEvent({"status": "relaunch", "reason": job_status.message, "job": self.job,
                                    "manifest_uri": self.manifest_uri})
                return
            event = decide(progress, job_status, self.quorum)
            if event is not None:
                yield TriggerEvent(event)
                return
            await asyncio.sleep(self.poll_interval)


def decide(progress: Progress, job_status=None, quorum: float = 1.0) -> dict[str, Any] | None:
    """The gate's verdict for one look, or None to keep waiting. Shared by the trigger and ``poke``.

    :param quorum: fraction of units whose checkpoints open the gate (1.0: all of them). Below 1, a
        downstream stage that polls the upstream checkpoints itself can start while the rest finish.
    """
    base = {"manifest_uri": progress.manifest_uri, "done": progress.done, "total": progress.total,
            "failed": progress.failed, "allowed_failures": progress.allowed_failures}
    if progress.over_budget:
        return {**base, "status": "failed",
                "reason": f"{progress.failed} of {progress.total} units failed, budget allows "
                          f"{progress.allowed_failures}: {progress.failed_units[:5]}"}
    if progress.manifest_status == "failed":
        return {**base, "status": "failed", "reason": f"the {progress.stage} run's manifest says it failed"}
    if progress.books:
        return {**base, "status": "failed", "reason": f"row accounting: {progress.books}"}
    if progress.complete:
        return {**base, "status": "done", "partial": False, "summary": progress.summary()}
    if quorum < 1.0 and progress.manifest_status != "missing" and progress.total \
            and progress.done >= math.ceil(quorum * progress.total):
        return {**base, "status": "done", "partial": True, "summary": progress.summary()}
    if job_status is not None and job_status.state.finished:
        missing = progress.total - progress.done - progress.failed
        if progress.manifest_status == "missing":
            what = "before writing its manifest"
        elif missing > 0:
            what = f"with {missing} of {progress.total} units not checkpointed"
        else:
            what = "before completing its manifest (every unit is checkpointed: a rerun only finishes it)"
        return {**base, "status": "failed",
                "reason": f"job {job_status.state.value} {what}: {job_status.message}".rstrip(": ")}
    return None
