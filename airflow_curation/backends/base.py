"""The backend interface: ``submit(spec) -> handle``, ``status(handle)``, ``cancel(handle)``, ``logs(handle)``.

A handle is a plain JSON-able dict so that Airflow can keep it in the task state store and a restarted
worker (or the triggerer) can rebuild the backend and reconnect to the same job.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from airflow_curation.jobs.spec import JobSpec

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
    state: JobState
    message: str = ""
    result: dict[str, Any] | None = None  # the job's result JSON once it has finished


class Backend(ABC):
    name: str = "base"

    @abstractmethod
    def submit(self, spec: JobSpec) -> JobHandle:
        """Start the job; return a handle that identifies it across processes."""

    @abstractmethod
    def status(self, handle: JobHandle) -> JobStatus:
        """Current state of the job."""

    @abstractmethod
    def cancel(self, handle: JobHandle) -> None:
        """Stop the job (idempotent)."""

    @abstractmethod
    def logs(self, handle: JobHandle, offset: int = 0) -> tuple[str, int]:
        """Log text from byte ``offset`` and the next offset, for streaming into the task log."""

    def options(self) -> dict[str, Any]:
        """Constructor options, so that a trigger can rebuild the backend in the triggerer."""
        return {}
