"""Trigger that follows one backend job until it ends, streaming its log into the task log.

It runs in the triggerer, so it holds nothing but JSON: the backend's name and options (with the ids
of the connections they name) and the job handle. The triggerer resolves those connections itself,
through :func:`airflow_curation.hooks.factory.backend_for`, so no secret travels in the trigger's
kwargs; every look is a :class:`~airflow_curation.jobs.follow.Follower` look (the newest attempt, its
read-only ``status``, the new log text; blocking calls go to a thread). It only watches: a retryable
failure is reported in the event, and the operator decides on a relaunch.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_curation.core import storage
from airflow_curation.hooks.factory import backend_for, curation_settings
from airflow_curation.jobs.follow import Follower
from airflow_curation.triggers.job_log import JobLogRelay
from airflow_curation.triggers.polling import PollSchedule, interruptible_inline, wait_for_look


class StageJobTrigger(BaseTrigger):
    """Fires once when the job has finished, with ``{"status", "message", "result", "handle"}``.

    :param backend: backend name (``local``, ``slurm``...).
    :param backend_options: the backend's constructor options (``Backend.options()``).
    :param handle: the job handle returned by ``Backend.submit``.
    :param poll_interval: the longest wait between status polls (the first poll is at once, the next after
        0.5 s, doubling up to it: :class:`~.polling.PollSchedule`).
    :param log_offset: where log streaming starts (a reconnect does not repeat what was shown).
    :param curation_conn_id: optional ``curation`` connection: storage options for the job's lake
        (a backend may read its result there), resolved in the triggerer.
    """

    def __init__(
        self,
        backend: str,
        backend_options: dict[str, Any],
        handle: dict[str, Any],
        poll_interval: float = 5.0,
        log_offset: int = 0,
        curation_conn_id: str | None = None,
    ) -> None:
        super().__init__()
        self.backend = backend
        self.backend_options = backend_options
        self.handle = handle
        self.poll_interval = poll_interval
        self.log_offset = log_offset
        self.curation_conn_id = curation_conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "backend": self.backend,
                "backend_options": self.backend_options,
                "handle": self.handle,
                "poll_interval": self.poll_interval,
                "log_offset": self.log_offset,
                "curation_conn_id": self.curation_conn_id,
            },
        )

    def _connect(self):
        """The connection's storage map and the backend, resolved here (blocking: call it in a thread)."""
        conn_id = self.curation_conn_id or self.handle.get("curation_conn_id")
        return curation_settings(conn_id).storage, backend_for(self.backend, self.backend_options)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        smap, backend = await asyncio.to_thread(self._connect)
        # In effect for this trigger's task only (its threads copy the context): never process-wide.
        with storage.using(smap), interruptible_inline():
            async for event in self._follow(backend):
                yield event

    async def _follow(self, backend) -> AsyncIterator[TriggerEvent]:
        # Whether to relaunch is the operator's call (in the worker), not the triggerer's.
        follower = Follower(backend, self.handle, log_offset=self.log_offset, relaunch=False)
        relay = JobLogRelay(self.log, str(follower.record.job_id))
        schedule = PollSchedule(self.poll_interval)
        while True:
            look = await asyncio.to_thread(follower.look)
            self.handle, self.log_offset = follower.handle, follower.log_offset
            relay.feed(look.text)
            if look.status.state.finished:
                relay.flush()
                yield TriggerEvent(
                    {
                        "status": look.status.state.value,
                        "message": look.status.message,
                        "result": look.status.result,
                        "retryable": look.status.retryable,
                        "handle": self.handle,
                        "log_offset": self.log_offset,
                    }
                )
                return
            await wait_for_look(schedule.next(), backend, self.handle)

    async def on_kill(self) -> None:
        """The user killed the deferred task (mark failed/success, clear): cancel the job too.

        Not called when the triggerer restarts or hands the trigger to another one, so a rolling deploy
        never cancels running jobs.
        """
        smap, backend = await asyncio.to_thread(self._connect)
        self.log.info("Task killed while deferred: cancelling job %s", self.handle.get("job_id"))
        with storage.using(smap):  # the newest attempt: a gate may have relaunched the job
            await asyncio.to_thread(Follower(backend, self.handle, relaunch=False).cancel)
