"""A job's state as a backend reports it: what every follower (operator, gate, trigger, CLI) reads."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from airflow_curation.jobs.result import JobResult


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
