"""The run record: one typed handle on a launched job, whoever follows it (operator, gate, trigger, CLI).

A backend's ``launch`` returns a plain dict (its own keys: a pid, a Slurm job folder, a Kubernetes object
name); the record types the keys every follower reads and keeps the backend's under ``extra``. It travels
as that same flat dict (:meth:`RunRecord.to_dict`): XCom, the task state store and trigger kwargs hold
it, and :meth:`RunRecord.from_dict` reads what earlier versions stored there (the flat handle dict), so a
task deferred before an upgrade resumes after it.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Protocol

from airflow_curation.core import storage


@dataclass(frozen=True)
class RunRecord:
    """:param backend: the backend's name (``local``, ``slurm``...), what rebuilds it with ``backend_options``.
    :param job_id: the attempt's job id (a Slurm job id, a Kubernetes object name...).
    :param attempt: 1 for the first launch, n for the (n-1)th relaunch.
    :param manifest_uri: the stage run's manifest.
    :param result: where the attempt writes its :class:`~airflow_curation.jobs.result.JobResult`; its folder
        holds the run's bookkeeping (``current.json``, ``attempt-<n>.lock``, the cancel marker).
    :param current: where the newest attempt is recorded (default beside the first attempt's result).
    :param log: / :param url: where a person reads the job's log (a file, a dashboard).
    :param backend_options: the backend's constructor options (connection ids, no secrets).
    :param curation_conn_id: / :param lake_root: / :param submitted_at: what the launching task knew.
    :param extra: the backend's own keys, handed back to it as they came.
    """

    backend: str
    job_id: str
    attempt: int = 1
    manifest_uri: str | None = None
    result: str | None = None
    current: str | None = None
    log: str | None = None
    url: str | None = None
    backend_options: Mapping[str, Any] = field(default_factory=dict)
    curation_conn_id: str | None = None
    lake_root: str | None = None
    submitted_at: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    # Keys of the launching side that a later attempt's record (written by a backend) does not carry.
    HOLDER_KEYS = ("backend_options", "curation_conn_id", "lake_root", "submitted_at")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | RunRecord) -> RunRecord:
        """A record from its dict form (a backend's handle, XCom, trigger kwargs, ``current.json``)."""
        if isinstance(d, RunRecord):
            return d
        if not isinstance(d, Mapping) or "job_id" not in d:
            raise ValueError(f"not a job run record (no job_id): {d!r}"[:300])
        named = {f.name for f in fields(cls)} - {"extra"}
        kw = {k: d[k] for k in named if d.get(k) is not None}
        kw.setdefault("backend", "local")
        kw["job_id"] = str(d["job_id"])
        kw["attempt"] = int(d.get("attempt") or 1)
        kw["backend_options"] = dict(d.get("backend_options") or {})
        return cls(**kw, extra={k: v for k, v in d.items() if k not in named})

    def to_dict(self) -> dict[str, Any]:
        """The flat, JSON-able form (what a backend takes, and what XCom and triggers hold)."""
        named = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        return {**self.extra, **{k: v for k, v in named.items() if v is not None}}

    def with_holder(self, **kw: Any) -> RunRecord:
        """The record with the launching side's keys set (``backend_options``, ``submitted_at``...)."""
        return replace(self, **kw)

    def next(self, handle: Mapping[str, Any] | RunRecord) -> RunRecord:
        """A later attempt's record (a backend's handle or ``current.json``), keeping this holder's keys."""
        new = RunRecord.from_dict(handle)
        return replace(new, **{k: getattr(self, k) for k in self.HOLDER_KEYS if not _given(handle, k)})

    @property
    def run_dir(self) -> str | None:
        """The folder of the run's bookkeeping, or None for a backend that writes no result file."""
        if self.current:
            return self.current.rsplit("/", 1)[0]
        return self.result.rsplit("/", 1)[0] if self.result else None

    def beside(self, name: str) -> str | None:
        """A file of the run's bookkeeping (``current.json``, ``attempt-2.lock``, the cancel marker)."""
        return f"{self.run_dir}/{name}" if self.run_dir else None

    @property
    def current_uri(self) -> str | None:
        return self.current or self.beside("current.json")

    @property
    def where(self) -> str:
        """Where a person follows the job: its dashboard, its log, its folder."""
        return self.url or self.log or str(self.extra.get("job_dir") or "no log location")


def _given(handle: Mapping[str, Any] | RunRecord, key: str) -> bool:
    if isinstance(handle, RunRecord):
        return bool(getattr(handle, key))
    return handle.get(key) not in (None, {})


class RunFiles(Protocol):
    """Where a run's bookkeeping files live (the lake's storage; Slurm's job folder, maybe over SSH)."""

    def read_json(self, uri: str) -> dict[str, Any] | None: ...

    def write_json(self, uri: str, obj: dict[str, Any]) -> None: ...

    def create_exclusive(self, uri: str) -> bool: ...


class LakeFiles:
    """Run files on the lake's storage (a local folder or an object store)."""

    def read_json(self, uri: str) -> dict[str, Any] | None:
        """A JSON file, or None while it does not exist (or is not whole yet)."""
        try:
            return storage.read_json(uri)
        except (FileNotFoundError, ValueError):
            return None

    def write_json(self, uri: str, obj: dict[str, Any]) -> None:
        storage.write_json(uri, obj)

    def create_exclusive(self, uri: str) -> bool:
        """Create ``uri`` unless it exists; True for the one caller that did. Local: ``O_EXCL``. An object
        store has no exclusive create here: written, then read back (the last writer wins, the other sees
        a token not its own), which parts followers that do not write within the same moment."""
        if storage.is_local(uri):
            path = storage.local_path(uri)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            try:
                os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return False
            return True
        if storage.exists(uri):
            return False
        token = uuid.uuid4().hex
        storage.write_bytes(uri, json.dumps({"token": token}).encode())
        return (self.read_json(uri) or {}).get("token") == token
