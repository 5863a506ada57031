"""Gate on a stage's per-shard checkpoints: done when every unit of a manifest has one.

The checkpoint records, not the job's exit code, are the truth: a record with the manifest's
fingerprint and the unit's input checksum means that unit's outputs are complete. So the gate works
the same for every backend, and for a job that was launched by someone else.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_curation.core import storage
from airflow_curation.core.manifest import ManifestError
from airflow_curation.jobs.gate import CheckpointGate
from airflow_curation.jobs.gate import gate_verdict as decide
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
    * ``{"status": "relaunch", "job": ...}`` (a full gate only) when the job failed in a way its backend
      calls retryable and attempts remain: the sensor (in the worker) relaunches it and defers again. A
      quorum gate keeps waiting: it follows the attempt the full gate launches.

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
        gate = CheckpointGate(
            self.manifest_uri,
            self.max_failed_fraction,
            self.not_before,
            backend=backend,
            job=self.job,
            quorum=self.quorum,
            log_offset=self.log_offset,
        )
        last_line = None
        relay = JobLogRelay(self.log, str((self.job or {}).get("job_id", "?")))
        schedule = PollSchedule(self.poll_interval)
        tail = False
        while True:
            try:
                look = await asyncio.to_thread(gate.look)
            except ManifestError as e:
                yield TriggerEvent({"status": "failed", "reason": str(e), "manifest_uri": self.manifest_uri})
                return
            if gate.follower is not None:  # the newest attempt, also when another follower relaunched the job
                self.job, self.log_offset = gate.follower.handle, gate.follower.log_offset
            if look.job is not None:
                relay.feed(look.job.text)
                if look.job.status.state.finished:
                    relay.flush()
            progress = look.progress
            for unit_id, info in sorted(look.new_units.items()):
                self.log.info(unit_line(progress.stage, unit_id, info))
            if progress.line() != last_line:
                last_line = progress.line()
                self.log.info(last_line)
            if look.verdict is not None:
                yield TriggerEvent(look.verdict)
                return
            if not tail and progress.total and progress.done + progress.failed >= progress.total:
                # Every unit is accounted for: only the job's last step (collect, the final manifest) is
                # left, seconds as a rule; look again soon rather than a whole interval later.
                tail = True
                schedule.restart()
            await wait_for_look(schedule.next(), backend, self.job)
