"""The relaunch policy: which attempt of a run is the newest, and whether a failed run gets another.

A backend launches, reports, streams and cancels; what happens after a failure is decided here, once, for
every backend and every follower. A run's bookkeeping lies beside its first attempt's result (the folder
:attr:`RunRecord.run_dir`, on the backend's :class:`~airflow_curation.jobs.run.RunFiles`):

* ``current.json``: the newest attempt's record. Whoever holds an older record (the launch task's XCom, a
  retried gate, a trigger deferred before the relaunch) follows the newest attempt (:func:`latest`).
* ``attempt-<n>.lock``: created exclusively before attempt *n* is launched, so two followers that see
  the same failure launch one attempt *n* (the other follows it).

A relaunch (:func:`relaunch`) reopens the manifest (``jobs reopen``) and launches only the groups with a
unit lacking a checkpoint. It is decided by a follower in the worker (:func:`settle`), never by a status
poll: polling stays free of side effects.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from airflow_curation.jobs import progress
from airflow_curation.jobs.run import LakeFiles, RunFiles, RunRecord
from airflow_curation.jobs.spec import JobSpec
from airflow_curation.jobs.status import JobState, JobStatus

log = logging.getLogger(__name__)


class Launcher(Protocol):
    """What the policy needs of a backend (:class:`airflow_curation.backends.base.Backend` has it)."""

    name: str
    max_resubmits: int

    def launch(
        self, spec: JobSpec, groups: Sequence[int] | None = None, *, previous: dict[str, Any] | None = None
    ) -> dict[str, Any]: ...

    def status(self, handle: dict[str, Any]) -> JobStatus: ...

    def cancel(self, handle: dict[str, Any]) -> None: ...

    def spec_of(self, handle: dict[str, Any]) -> JobSpec: ...

    def release(self, handle: dict[str, Any]) -> None: ...


def _files(backend: Any) -> RunFiles:
    files = getattr(backend, "run_files", None)
    return files() if callable(files) else LakeFiles()


def _record(record: RunRecord | Mapping[str, Any]) -> RunRecord:
    return RunRecord.from_dict(record)


def latest(backend: Any, record: RunRecord | Mapping[str, Any]) -> RunRecord:
    """The newest attempt of the run ``record`` names (its own keys of the launching side kept)."""
    record = _record(record)
    uri = record.current_uri
    newest = _files(backend).read_json(uri) if uri else None
    if not newest or int(newest.get("attempt") or 1) < record.attempt:
        return record
    return record.next({**record.to_dict(), **newest})


def attempts_left(backend: Any, record: RunRecord | Mapping[str, Any]) -> bool:
    """Whether a failure of the run's newest attempt may still be relaunched."""
    return latest(backend, record).attempt <= int(getattr(backend, "max_resubmits", 0))


def can_relaunch(backend: Any, record: RunRecord | Mapping[str, Any], status: JobStatus) -> bool:
    """Whether :func:`settle` gives a next attempt: a retryable failure with attempts left, or an older
    attempt's failure that another follower relaunched already."""
    record = _record(record)
    newer = latest(backend, record).attempt > record.attempt
    return status.state == JobState.FAILED and (newer or (status.retryable and attempts_left(backend, record)))


def lock_uri(record: RunRecord, attempt: int) -> str | None:
    return record.beside(f"attempt-{attempt}.lock")


def bookkeeping(record: RunRecord | Mapping[str, Any], attempts: int) -> list[str]:
    """The run's bookkeeping files up to attempt ``attempts`` (what a fresh launch into a reused folder,
    a deleted Kubernetes run's of the same name, must clear)."""
    record = _record(record)
    uris = [record.current_uri, *(lock_uri(record, n) for n in range(2, attempts + 1))]
    return [u for u in uris if u]


def relaunch(backend: Any, record: RunRecord | Mapping[str, Any]) -> RunRecord:
    """The next attempt of a finished run: ``jobs reopen``, then only the groups with unfinished units.
    A follower that loses the race for the attempt's lock gets the newest attempt instead."""
    record = latest(backend, record)
    handle = record.to_dict()
    state = backend.status(handle).state
    if not state.finished:  # two attempts on the same units would only race each other
        raise RuntimeError(
            f"attempt {record.attempt} of job {record.job_id} is still {state.value}; cancel it before relaunching"
        )
    prepare = getattr(backend, "prepare_relaunch", None)
    if prepare is not None:
        prepare(handle)  # raises to refuse, before the lock: a refusal must not block a later relaunch
    files, attempt = _files(backend), record.attempt + 1
    lock = lock_uri(record, attempt)
    if lock and not files.create_exclusive(lock):
        return latest(backend, record)  # another follower relaunched first
    groups = int(handle.get("groups", 1))
    todo = progress.unfinished_groups(record.manifest_uri, groups) if groups > 1 else None
    reopened = progress.reopen(record.manifest_uri)
    log.info("relaunching %s: %s", record.job_id, "; ".join(f"{u}: {e}" for u, e in sorted(reopened.items())[:20]))
    new = record.next(backend.launch(backend.spec_of(handle), todo, previous=handle))
    uri = record.current_uri
    if uri and new.attempt > record.attempt:
        new = new.with_holder(current=uri)
        files.write_json(uri, {k: v for k, v in new.to_dict().items() if k not in RunRecord.HOLDER_KEYS})
    return new


def settle(backend: Any, record: RunRecord | Mapping[str, Any], status: JobStatus) -> RunRecord | None:
    """A follower's decision once ``status`` (of ``record``'s attempt) is finished: the next attempt's record
    when the failure is retryable and attempts remain, else None (after the backend's ``release``). An
    older attempt's follower gets the newest attempt, which another follower launched. ``status.message``
    then says what was decided (relaunched, attempt n of m; or why not), for the follower's log."""
    record = _record(record)
    most = int(getattr(backend, "max_resubmits", 0)) + 1
    newest = latest(backend, record)
    if newest.attempt > record.attempt:
        status.message = f"{status.message}; relaunched by another follower, attempt {newest.attempt}"
        return newest
    if can_relaunch(backend, record, status):
        try:
            new = relaunch(backend, record)
        except Exception as e:  # noqa: BLE001 - reported as the run's end, like any other failure
            status.message = f"{status.message}; relaunch failed: {e}"
        else:
            status.message = f"{status.message}; relaunched, attempt {new.attempt} of {most}"
            return new
    elif status.state == JobState.FAILED and status.retryable:
        status.message = (
            f"{status.message}; not relaunched: attempt {newest.attempt} of {most} was the last "
            f"(max_resubmits={most - 1})"
        )
    if status.state == JobState.FAILED:
        decline(record, status.message)
    backend.release(record.to_dict())
    return None


def decline(record: RunRecord | Mapping[str, Any], why: str) -> None:
    """The run is over without another attempt: its failed manifest no longer says a relaunch is pending, so
    a downstream reader that waits for the reopen fails now, with ``why`` (never fails the follower)."""
    record = _record(record)
    try:
        if record.manifest_uri and progress.decline_relaunch(record.manifest_uri, why):
            log.info("%s: no relaunch; its manifest says so (%s)", record.job_id, why)
    except Exception as e:  # noqa: BLE001 - a courtesy to readers: they time out (upstream_wait_s) without it
        log.warning("cannot mark %s as not relaunched: %s", record.manifest_uri, e)


def cancel(backend: Any, record: RunRecord | Mapping[str, Any]) -> RunRecord:
    """Cancel the run's newest attempt (idempotent); returns the attempt cancelled."""
    record = latest(backend, record)
    backend.cancel(record.to_dict())
    decline(record, f"job {record.job_id} was cancelled")
    return record
