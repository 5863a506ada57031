"""The backend interface: launchers with a read-only ``status``.

``launch(spec, groups) -> handle`` starts a job; ``status(handle)`` only reads; ``cancel(handle)`` is
idempotent; ``logs(handle, offset)`` streams by byte offsets. That is all a backend does: which attempt
is the newest and whether a failed job runs again is the jobs layer's (:mod:`airflow_curation.jobs.attempts`,
followed by :class:`airflow_curation.jobs.follow.Follower`), never a side effect of polling. A handle is a
JSON-able dict (typed by :class:`~airflow_curation.jobs.run.RunRecord`): Airflow keeps it in the task state
store, and a restarted worker or the triggerer rebuilds the backend from ``options()`` and reconnects.
"""

from __future__ import annotations

import inspect
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from airflow_curation.jobs.result import JobResult
from airflow_curation.jobs.run import LakeFiles, RunFiles
from airflow_curation.jobs.spec import JobSpec
from airflow_curation.jobs.status import JobState, JobStatus, status_from_result

log = logging.getLogger(__name__)
CANCELLED = "cancelled"  # the cancel marker's name

JobHandle = dict[str, Any]

__all__ = ["CANCELLED", "Backend", "JobHandle", "JobState", "JobStatus", "read_log", "slice_log", "status_from_result"]


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


def beside_result(handle: JobHandle, name: str) -> str:
    """A file of the run in the folder of the attempt's result (the cancel marker)."""
    return handle["result"].rsplit("/", 1)[0] + "/" + name


class Backend(ABC):
    """:param max_resubmits: how many times a follower relaunches a ``retryable`` failure
    (:func:`airflow_curation.jobs.attempts.settle`)."""

    name: str = "base"
    max_resubmits: int = 0
    # How often a gate may read :meth:`status` between its looks, where that read is cheap (None: it is a
    # scheduler or API call, read once a look): the gate then opens within this step of the job's end.
    status_poll_s: float | None = None

    def submit(self, spec: JobSpec) -> JobHandle:
        """Launch the whole stage (every group, then collect): attempt 1, once the stage's settings pass its
        :meth:`~airflow_curation.stages.base.Stage.check_config` (whoever submits: an operator, ``curation
        <stage> --backend``), after its :meth:`~airflow_curation.stages.base.Stage.new_launch` (ingest forgets
        a killed launch's plan)."""
        from airflow_curation.stages import stage_class

        stage = stage_class(spec.stage)
        stage.check_config({**stage.SETTINGS.defaults, **stage.SETTINGS.coerce(spec.config, spec.stage)})
        stage.new_launch(spec.lake_obj, spec.run_id)
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

    # -- the run's files beside its results: on the lake's storage here, in the job folder for Slurm --
    def run_files(self) -> RunFiles:
        """Where the run's files (results, the cancel marker, the jobs layer's bookkeeping) are read and written."""
        return LakeFiles()

    def _result(self, handle: JobHandle) -> JobResult | None:
        """The attempt's result, or None while there is none (an unreadable one is logged, not raised)."""
        try:
            data = self.run_files().read_json(handle["result"])
            return JobResult.from_dict(data) if data is not None else None
        except Exception as e:  # noqa: BLE001 - reported as a job without a result
            log.warning("cannot read job result %s: %s", handle["result"], e)
            return None

    def _mark_cancelled(self, handle: JobHandle) -> None:
        """Leave the marker that tells :meth:`status` a job's end was a cancel."""
        try:
            self.run_files().write_json(beside_result(handle, CANCELLED), {"at": time.time()})
        except Exception as e:  # noqa: BLE001 - the marker only refines status(); stopping the job matters
            log.warning("cannot write the cancel marker: %s", e)

    def _was_cancelled(self, handle: JobHandle) -> bool:
        try:
            return self.run_files().read_json(beside_result(handle, CANCELLED)) is not None
        except Exception:  # noqa: BLE001 - unreadable: no verdict from the marker
            return False

    def release(self, handle: JobHandle) -> None:
        """The run is over (no relaunch follows): drop what was kept for one."""
