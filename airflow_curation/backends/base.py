"""The backend interface: launchers with a read-only ``status``.

``launch(spec, groups) -> handle`` starts a job; ``status(handle)`` only reads; ``cancel(handle)`` is
idempotent; ``logs(handle, offset)`` streams by byte offsets. Whether a failed job runs again is decided
by the follower (operator or checkpoint sensor) through :meth:`Backend.settle`, never by polling. A
handle is a JSON-able dict: Airflow keeps it in the task state store, and a restarted worker or the
triggerer rebuilds the backend from ``options()`` and reconnects.
"""

from __future__ import annotations

import enum
import inspect
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from airflow_curation.core import storage
from airflow_curation.jobs import progress
from airflow_curation.jobs.result import JobResult
from airflow_curation.jobs.spec import JobSpec

log = logging.getLogger(__name__)
CANCELLED = "cancelled"  # the cancel marker's name

JobHandle = dict[str, Any]


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
    :param retryable: a failure that running the unfinished units again may cure (time limit, lost node,
        preemption, killed pods), not the stage's own error."""

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
    """For logs read whole: the text from byte ``offset``; a log that shrank (a pod went away) restarts."""
    offset = offset if offset <= len(data) else 0
    return data[offset:].decode("utf-8", "replace"), len(data)


def _attempt(handle: JobHandle) -> int:
    return int(handle.get("attempt", 1))


def beside_result(handle: JobHandle, name: str) -> str:
    """A file of the run in the folder of the attempt's result (the cancel marker, the newest attempt)."""
    return handle["result"].rsplit("/", 1)[0] + "/" + name


def current_uri(handle: JobHandle) -> str | None:
    """Where a run keeps its newest attempt's handle: beside the first attempt's result."""
    return handle.get("current") or (beside_result(handle, "current.json") if handle.get("result") else None)


class Backend(ABC):
    """:param max_resubmits: how many times :meth:`settle` relaunches a ``retryable`` failure."""

    name: str = "base"
    max_resubmits: int = 0
    # How often a gate may read :meth:`status` between its looks, where that read is cheap (None: it is a
    # scheduler or API call, read once a look): the gate then opens within this step of the job's end.
    status_poll_s: float | None = None

    def submit(self, spec: JobSpec) -> JobHandle:
        """Launch the whole stage (every group, then collect): attempt 1."""
        return self.launch(spec)

    @abstractmethod
    def launch(
        self, spec: JobSpec, groups: Sequence[int] | None = None, *, previous: JobHandle | None = None
    ) -> JobHandle:
        """Start the groups (None: all; a list: a relaunch of those) and the collect step after them;
        return a handle. :param previous: the handle of the attempt this one follows."""

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

    _unshared_options: tuple[str, ...] = ()  # constructor arguments never handed on (tokens, clients)

    def options(self) -> dict[str, Any]:
        """Constructor options (each argument's attribute, JSON-able), so the triggerer rebuilds the backend."""
        out = {}
        for name in list(inspect.signature(type(self).__init__).parameters)[1:]:
            if name not in self._unshared_options:
                value = getattr(self, name)
                out[name] = (
                    value.to_dict()
                    if hasattr(value, "to_dict")
                    else (list(value) if isinstance(value, tuple) else value)
                )
        return out

    def current(self, handle: JobHandle) -> JobHandle:
        """The newest attempt of the job ``handle`` names. Each relaunch records its handle in the run's
        ``current.json`` (beside the first attempt's result), so whoever holds an older handle (the launch
        task's XCom, a retried sensor) follows the newest attempt; the holder's own keys stay."""
        uri = current_uri(handle)
        latest = self._read_json(uri) if uri else None
        if not latest or _attempt(latest) < _attempt(handle):
            return handle
        return {**handle, **latest}

    # -- the run's files beside its results: on the lake's storage here, in the job folder for Slurm --
    def _read_json(self, uri: str) -> dict[str, Any] | None:
        """A JSON file, or None while it does not exist (or is not whole yet)."""
        try:
            return storage.read_json(uri)
        except (FileNotFoundError, ValueError):
            return None

    def _write_json(self, uri: str, obj: dict[str, Any]) -> None:
        storage.write_json(uri, obj)

    def _result(self, handle: JobHandle) -> JobResult | None:
        """The attempt's result, or None while there is none (an unreadable one is logged, not raised)."""
        try:
            data = self._read_json(handle["result"])
            return JobResult.from_dict(data) if data is not None else None
        except Exception as e:  # noqa: BLE001 - reported as a job without a result
            log.warning("cannot read job result %s: %s", handle["result"], e)
            return None

    def _mark_cancelled(self, handle: JobHandle) -> None:
        """Leave the marker that tells :meth:`status` a job's end was a cancel."""
        try:
            self._write_json(beside_result(handle, CANCELLED), {"at": time.time()})
        except Exception as e:  # noqa: BLE001 - the marker only refines status(); stopping the job matters
            log.warning("cannot write the cancel marker: %s", e)

    def _was_cancelled(self, handle: JobHandle) -> bool:
        try:
            return self._read_json(beside_result(handle, CANCELLED)) is not None
        except Exception:  # noqa: BLE001 - unreadable: no verdict from the marker
            return False

    def release(self, handle: JobHandle) -> None:
        """The run is over: drop what was kept for a relaunch."""

    def attempts_left(self, handle: JobHandle) -> bool:
        """Whether a failure of the job's newest attempt may still be relaunched."""
        return _attempt(self.current(handle)) <= self.max_resubmits

    def can_relaunch(self, handle: JobHandle, status: JobStatus) -> bool:
        """Whether :meth:`settle` gives a next attempt: a retryable failure with attempts left, or an
        older attempt's failure that another follower relaunched already."""
        newer = _attempt(self.current(handle)) > _attempt(handle)
        return status.state == JobState.FAILED and (newer or (status.retryable and self.attempts_left(handle)))

    def relaunch(self, handle: JobHandle) -> JobHandle:
        """The next attempt of a finished run: ``jobs reopen``, then only the groups with unfinished units."""
        handle = self.current(handle)
        state = self.status(handle).state
        if not state.finished:  # two attempts on the same units would only race each other
            raise RuntimeError(
                f"attempt {handle.get('attempt', 1)} of job {handle.get('job_id')} is still "
                f"{state.value}; cancel it before relaunching"
            )
        groups = int(handle.get("groups", 1))
        todo = progress.unfinished_groups(handle["manifest_uri"], groups) if groups > 1 else None
        reopened = progress.reopen(handle["manifest_uri"])
        log.info(
            "relaunching %s: %s", handle.get("job_id"), "; ".join(f"{u}: {e}" for u, e in sorted(reopened.items())[:20])
        )
        new = self.launch(self.spec_of(handle), todo, previous=handle)
        uri = current_uri(handle)
        if uri and _attempt(new) > _attempt(handle):  # not a reconnect to a rival's attempt
            new["current"] = uri
            self._write_json(uri, new)
        return new

    def settle(self, handle: JobHandle, status: JobStatus) -> JobHandle | None:
        """The follower's decision once ``status`` is finished: the next attempt's handle when the
        failure is retryable and attempts remain, else None (after :meth:`release`). An older attempt's
        follower gets the newest attempt, which another follower launched. ``status.message`` then says
        what was decided (relaunched, attempt n of m; or why not), for the follower's log."""
        latest = self.current(handle)
        if _attempt(latest) > _attempt(handle):
            status.message = f"{status.message}; relaunched by another follower, attempt {_attempt(latest)}"
            return latest
        if self.can_relaunch(handle, status):
            try:
                new = self.relaunch(handle)
            except Exception as e:  # noqa: BLE001 - reported as the run's end, like any other failure
                status.message = f"{status.message}; relaunch failed: {e}"
            else:
                status.message = f"{status.message}; relaunched, attempt {_attempt(new)} of {self.max_resubmits + 1}"
                return new
        elif status.state == JobState.FAILED and status.retryable:
            spent = _attempt(self.current(handle))
            status.message = (
                f"{status.message}; not relaunched: attempt {spent} of {self.max_resubmits + 1} was the last "
                f"(max_resubmits={self.max_resubmits})"
            )
        self.release(handle)
        return None
