"""The backend interface: launchers with a read-only ``status``.

``launch(spec, groups) -> handle`` starts a job (all of a stage, or some of its groups followed by the
collect step); ``status(handle)`` only reads (polling a thousand times changes nothing anywhere);
``cancel(handle)`` stops it (idempotent); ``logs(handle, offset)`` streams its log by byte offsets.
Whether a failed job runs again is not the backend's call: :meth:`Backend.settle`, called by the
operator or the checkpoint sensor in the Airflow worker, relaunches the unfinished groups of a failure
the backend reports as ``retryable`` (a Slurm TIMEOUT, a lost node, a killed pod), at most
``max_resubmits`` times.

A handle is a plain JSON-able dict so that Airflow can keep it in the task state store and a restarted
worker (or the triggerer) can rebuild the backend and reconnect to the same job.
"""

from __future__ import annotations

import enum
import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from airflow_curation.jobs import progress
from airflow_curation.jobs.result import JobResult
from airflow_curation.jobs.spec import JobSpec

log = logging.getLogger(__name__)

JobHandle = dict[str, Any]
# The environment variables through which the Airflow layer hands a job the lake's storage options,
# credentials included (``CURATION_STORAGE_OPTIONS_<PROTOCOL>``, JSON): secrets by construction.
STORAGE_OPTIONS_ENV_PREFIX = "CURATION_STORAGE_OPTIONS_"


def is_storage_options_env(name: str) -> bool:
    """Whether environment variable ``name`` carries storage options (and so, credentials)."""
    return name.upper().startswith(STORAGE_OPTIONS_ENV_PREFIX)


class JobState(str, enum.Enum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"

    @property
    def finished(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


@dataclass
class JobStatus:
    """:param result: the job's :class:`JobResult` as a dict once it has finished.
    :param retryable: a failure that running the unfinished units again may well cure (infrastructure:
        time limit, lost node, preemption, a killed pod), as opposed to the stage's own error.
    """

    state: JobState
    message: str = ""
    result: dict[str, Any] | None = None
    retryable: bool = False


def status_from_result(result: JobResult | None, message: str = "") -> JobStatus | None:
    """The finished status a job's result file gives, or None without one."""
    if result is None:
        return None
    if result.succeeded:
        return JobStatus(JobState.SUCCEEDED, message or "completed", result.to_dict())
    return JobStatus(JobState.FAILED, result.error or message or "failed", result.to_dict())


def read_log(path: str, offset: int = 0) -> tuple[str, int]:
    """A local log file's text from byte ``offset`` and the next offset."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return "", offset
    return data.decode("utf-8", "replace"), offset + len(data)


def slice_log(data: bytes, offset: int) -> tuple[str, int]:
    """For logs read whole (APIs without offsets): the text from byte ``offset`` and the next offset. A
    log that shrank (a pod went away) restarts from 0 rather than losing text."""
    if offset > len(data):
        offset = 0
    return data[offset:].decode("utf-8", "replace"), len(data)


class Backend(ABC):
    """:param max_resubmits: how many times :meth:`settle` relaunches a ``retryable`` failure."""

    name: str = "base"
    max_resubmits: int = 0

    def submit(self, spec: JobSpec) -> JobHandle:
        """Launch the whole stage (every group, then collect): attempt 1."""
        return self.launch(spec)

    @abstractmethod
    def launch(self, spec: JobSpec, groups: Sequence[int] | None = None, *,
               previous: JobHandle | None = None) -> JobHandle:
        """Start a job and return a handle that identifies it across processes.

        :param groups: the groups to run (a relaunch); None: all of them. The collect step follows
            the groups (``jobs collect``); a one-group job is a plain ``jobs run``.
        :param previous: the handle of the attempt this one follows (a relaunch).
        """

    @abstractmethod
    def status(self, handle: JobHandle) -> JobStatus:
        """Current state of the job. Reads only: no file, object or queue entry changes."""

    @abstractmethod
    def cancel(self, handle: JobHandle) -> None:
        """Stop the job (idempotent)."""

    @abstractmethod
    def logs(self, handle: JobHandle, offset: int = 0) -> tuple[str, int]:
        """Log text from byte ``offset`` and the next byte offset, for streaming into the task log."""

    @abstractmethod
    def spec_of(self, handle: JobHandle) -> JobSpec:
        """The job spec the handle's job runs (what a relaunch launches again)."""

    def options(self) -> dict[str, Any]:
        """Constructor options, so that a trigger can rebuild the backend in the triggerer."""
        return {}

    def current(self, handle: JobHandle) -> JobHandle:
        """The latest attempt of the job ``handle`` names (a backend that records relaunches follows them)."""
        return handle

    def release(self, handle: JobHandle) -> None:
        """The run is over and will not be relaunched: drop what was kept for a relaunch."""

    def can_relaunch(self, handle: JobHandle, status: JobStatus) -> bool:
        return (status.state == JobState.FAILED and status.retryable
                and int(self.current(handle).get("attempt", 1)) <= self.max_resubmits)

    def relaunch(self, handle: JobHandle) -> JobHandle:
        """Launch the next attempt of a finished run: reopen its manifest (``jobs reopen``), then run only
        the groups with a unit that lacks a checkpoint (every group's finished units are skipped anyway)."""
        handle = self.current(handle)
        state = self.status(handle).state
        if not state.finished:  # two attempts on the same units would only race each other
            raise RuntimeError(f"attempt {handle.get('attempt', 1)} of job {handle.get('job_id')} is still "
                               f"{state.value}; cancel it before relaunching")
        groups = int(handle.get("groups", 1))
        todo = progress.unfinished_groups(handle["manifest_uri"], groups) if groups > 1 else None
        reopened = progress.reopen(handle["manifest_uri"])
        if reopened:
            log.info("attempt %d runs again: %s", int(handle.get("attempt", 1)) + 1,
                     "; ".join(f"{u}: {e}" for u, e in sorted(reopened.items())[:20]))
        return self.launch(self.spec_of(handle), todo, previous=handle)

    def settle(self, handle: JobHandle, status: JobStatus) -> JobHandle | None:
        """The follower's decision once ``status`` is finished: the next attempt's handle when the
        failure is retryable and attempts remain, else None (after :meth:`release`)."""
        if self.can_relaunch(handle, status):
            try:
                return self.relaunch(handle)
            except Exception as e:  # noqa: BLE001 - reported as the run's end, like any other failure
                log.warning("relaunch of job %s failed: %s", handle.get("job_id"), e)
                status.message = f"{status.message}; relaunch failed: {e}"
        self.release(handle)
        return None
