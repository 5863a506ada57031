"""The checkpoint gate's look: the job's (through its :class:`~.follow.Follower`), then the checkpoints', and
the verdict. One code for the sensor's ``poke`` (in the worker) and its trigger (in the triggerer).

The checkpoint records, not the job's exit code, are the truth: the gate opens when every unit has one
(or a quorum of them), whatever backend ran the job, and also for a job launched by someone else. The
job's state only makes a wait final: a job that ended before the look has written everything it ever
will, so "ended and still incomplete" fails the gate, unless the run may still be relaunched.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_curation.jobs.follow import Follower, Look
from airflow_curation.jobs.progress import CheckpointWatcher, Progress
from airflow_curation.jobs.run import RunRecord
from airflow_curation.jobs.status import JobState, JobStatus


@dataclass
class GateLook:
    """:param progress: the checkpoints (None when this look relaunched the job: the next look reads the
        reopened run). :param job: the job's look (None without a job). :param new_units: units verified by
    this look, with their counts. :param verdict: the gate's event, or None to keep waiting."""

    progress: Progress | None
    job: Look | None = None
    new_units: dict[str, dict[str, Any]] = field(default_factory=dict)
    verdict: dict[str, Any] | None = None


class CheckpointGate:
    """:param manifest_uri: / :param max_failed_fraction: / :param not_before: see :class:`CheckpointWatcher`.
    :param backend: with ``job``, the run to watch for its end (and to relaunch, with ``relaunch``).
    :param quorum: fraction of units that opens the gate (1.0: all). Only a full gate relaunches the
        job (or, in a trigger, asks its task to: a ``relaunch`` verdict); a quorum gate follows the
        relaunch the full gate makes.
    :param relaunch: whether this look may relaunch (in the worker), or only report it due (a trigger).
    :param log_offset: where the job's log streaming goes on from.
    """

    def __init__(
        self,
        manifest_uri: str,
        max_failed_fraction: float | None = None,
        not_before: float | None = None,
        *,
        backend: Any = None,
        job: RunRecord | Mapping[str, Any] | None = None,
        quorum: float = 1.0,
        relaunch: bool = False,
        log_offset: int = 0,
    ) -> None:
        self.manifest_uri = manifest_uri
        self.max_failed_fraction = max_failed_fraction
        self.not_before = not_before
        self.quorum = quorum
        self.full = quorum >= 1.0
        self.follower = (
            Follower(backend, job, log_offset, relaunch=relaunch and self.full) if backend is not None and job else None
        )
        self.watcher = self._watcher()

    def _watcher(self) -> CheckpointWatcher:
        return CheckpointWatcher(self.manifest_uri, self.max_failed_fraction, self.not_before)

    def look(self) -> GateLook:
        job = self.follower.look() if self.follower is not None else None
        if job is not None and job.relaunched:
            self.watcher = self._watcher()  # it holds the failed attempt's final manifest: read the reopened one
            return GateLook(None, job)
        progress = self.watcher.look()
        look = GateLook(progress, job, dict(self.watcher.new_units))
        if job is not None and job.relaunch_due:
            if self.full:  # the task (in the worker) relaunches, and gates the new attempt
                look.verdict = {
                    "status": "relaunch",
                    "reason": job.status.message,
                    "job": job.record.to_dict(),
                    "manifest_uri": self.manifest_uri,
                    "log_offset": self.follower.log_offset,  # the worker's look goes on from there
                }
                return look
            # A quorum gate: the full gate relaunches; until then the run goes on.
            going = JobStatus(JobState.RUNNING, "a relaunch is due")
            look.verdict = gate_verdict(progress, going, self.quorum, lambda: True)
            return look
        status = job.status if job is not None else None
        look.verdict = gate_verdict(progress, status, self.quorum, self.follower and self.follower.attempts_left)
        return look


def gate_verdict(
    progress: Progress,
    job_status: JobStatus | None = None,
    quorum: float = 1.0,
    may_relaunch: Callable[[], bool] | None = None,
) -> dict[str, Any] | None:
    """A checkpoint gate's verdict for one look, or None to keep waiting. Shared by its trigger and ``poke``.

    :param job_status: the job's status at this look (read BEFORE the checkpoints: a job that ended before
        the look has written everything it ever will, so "ended and still incomplete" is final).
    :param quorum: fraction of units whose checkpoints open the gate (1.0: all of them). Below 1, a
        downstream stage that polls the upstream checkpoints itself can start while the rest finish.
    :param may_relaunch: whether the run may still be relaunched: then failed units of a job still
        running are not final (a relaunch reopens them), and the job's end decides.
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
