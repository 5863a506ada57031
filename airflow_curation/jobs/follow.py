"""One follower for every caller that waits on a job: the stage operator (polling, or resumed from its
trigger), the checkpoint gate (poke, or its trigger) and the ``curation`` CLI.

A :meth:`Follower.look` is: the run's newest attempt (:func:`~.attempts.latest`), its read-only status,
the log text since the last look, and, once the attempt has failed, the relaunch decision
(:func:`~.attempts.settle`) where this follower may relaunch. Who may: the operator that waits for its job,
the full checkpoint gate and the CLI; a quorum gate and the triggers only watch (a trigger hands the
decision to its task in the worker, which looks again). Any follower that sees a failure no one will relaunch
tells the run's manifest (:func:`~.attempts.decline`), so that a downstream reader waiting for a relaunch stops
waiting (``docs/backends/slurm.md``). The checkpoint gate's own look, on top of this
one, is :class:`airflow_curation.jobs.gate.CheckpointGate`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_curation.jobs import attempts
from airflow_curation.jobs.run import RunRecord
from airflow_curation.jobs.status import JobState, JobStatus

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Look:
    """What one look saw.

    :param record: the attempt now followed (the new one, after a relaunch).
    :param status: the looked-at attempt's status (its message says what was decided after a failure).
    :param text: its log text since the previous look.
    :param relaunched: this look relaunched the run (or found another follower's relaunch).
    :param relaunch_due: the attempt failed and a relaunch is due, which this follower leaves to one that
        may relaunch.
    """

    record: RunRecord
    status: JobStatus
    text: str = ""
    relaunched: bool = False
    relaunch_due: bool = False

    @property
    def ended(self) -> bool:
        """The run is over: its attempt finished and no other attempt follows."""
        return self.status.state.finished and not (self.relaunched or self.relaunch_due)


class Follower:
    """Follows one run through its attempts.

    :param backend: the run's backend (anything with ``launch``/``status``/``logs``/``cancel``/``spec_of``).
    :param record: the run (any attempt's record: the newest is followed).
    :param log_offset: where the log streaming goes on from (a reconnect does not repeat what was shown).
    :param relaunch: whether this follower decides relaunches (see the module's docstring).
    """

    def __init__(
        self, backend: Any, record: RunRecord | Mapping[str, Any], log_offset: int = 0, relaunch: bool = True
    ) -> None:
        self.backend = backend
        self.record = RunRecord.from_dict(record)
        self.log_offset = int(log_offset or 0)
        self.relaunch = relaunch

    @property
    def handle(self) -> dict[str, Any]:
        return self.record.to_dict()

    def refresh(self) -> RunRecord:
        """Follow the newest attempt (another follower may have relaunched the run)."""
        self._follow(attempts.latest(self.backend, self.record))
        return self.record

    def _follow(self, record: RunRecord) -> None:
        if (record.log, record.url) != (self.record.log, self.record.url):
            self.log_offset = 0  # the new attempt logs elsewhere (its own job folder): from its start
        self.record = record

    def status(self) -> JobStatus:
        return self.backend.status(self.handle)

    def read_log(self) -> str:
        """The log text since the last read; never fails the follower (the log is a courtesy)."""
        try:
            text, self.log_offset = self.backend.logs(self.handle, self.log_offset)
        except Exception as e:  # noqa: BLE001
            log.debug("cannot read the log of job %s: %s", self.record.job_id, e)
            return ""
        return text

    def look(self) -> Look:
        """The newest attempt's status and new log text, and the decision once it has failed."""
        self.refresh()
        status = self.status()
        text = self.read_log()
        return self.conclude(status, text)

    def conclude(self, status: JobStatus, text: str = "") -> Look:
        """The decision on the current attempt's ``status`` (seen by this look or by a trigger): after a
        failure, relaunch where this follower may (the record then names the new attempt), or report a
        relaunch due."""
        looked = self.record
        if status.state != JobState.FAILED:
            return Look(looked, status, text)
        if not self.relaunch:
            due = attempts.can_relaunch(self.backend, looked, status)
            if not due:  # final: no follower will relaunch it (a reader of its manifest stops waiting)
                attempts.decline(looked, status.message)
            return Look(looked, status, text, relaunch_due=due)
        new = attempts.settle(self.backend, looked, status)
        if new is None:
            return Look(looked, status, text)
        self._follow(new)
        return Look(self.record, status, text, relaunched=True)

    def attempts_left(self) -> bool:
        return attempts.attempts_left(self.backend, self.record)

    def cancel(self) -> None:
        self.record = attempts.cancel(self.backend, self.record)
