"""Gate on a stage's per-shard checkpoints: done when every unit of a manifest has one.

The checkpoint records, not the job's exit code, are the truth: a record with the manifest's
fingerprint and the unit's input checksum means that unit's outputs are complete. So the gate works
the same for every backend, and for a job that was launched by someone else.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_curation.core import storage
from airflow_curation.core.checkpoint import CheckpointStore
from airflow_curation.core.integrity import chain_problem
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest, ManifestError
from airflow_curation.triggers.job_log import JobLogRelay, unit_line


@dataclass
class Progress:
    """One look at a manifest's checkpoints."""

    manifest_uri: str
    stage: str = ""
    total: int = 0
    done: int = 0
    failed: int = 0
    allowed_failures: int = 0
    rows: int = 0
    bytes: int = 0
    shards: int = 0
    manifest_status: str = "missing"
    failed_units: list[str] = field(default_factory=list)
    books: str | None = None  # why the run's rows disagree with its upstream manifest's, if they do

    @property
    def over_budget(self) -> bool:
        return self.failed > self.allowed_failures

    @property
    def complete(self) -> bool:
        """Every unit is accounted for (checkpointed, or failed within the budget) and the run has
        written its final manifest: a stage's global step (dedup's components, ingest's clean-up) and
        the gather of a Slurm array or Kubernetes sweep run after the last unit."""
        return self.manifest_status == "complete" and self.done + self.failed >= self.total \
            and not self.over_budget

    def line(self) -> str:
        if self.manifest_status == "missing":
            return f"waiting for the manifest {self.manifest_uri} (the job has not planned its units yet)"
        return (f"{self.stage or '?'}: {self.done}/{self.total} units checkpointed, {self.failed} failed "
                f"(budget {self.allowed_failures}), {self.rows} rows in {self.shards} shards")

    def summary(self) -> dict[str, Any]:
        """What XCom carries: a pointer and counts."""
        return {"manifest_uri": self.manifest_uri, "shards": self.shards, "rows": self.rows,
                "bytes": self.bytes}


class CheckpointWatcher:
    """Reads a manifest and its stage's checkpoint folder; remembers verified records between looks.

    :param manifest_uri: the stage run's manifest (written by the job when it plans its units).
    :param max_failed_fraction: failure budget as a fraction of units; ``None``: the one in the
        manifest's config (what the job itself enforces), else 0.
    :param not_before: epoch seconds; a manifest planned before this (an earlier attempt's, about to be
        rewritten by the job just submitted) counts as not written yet.
    """

    # Clocks of the Airflow worker and of the job's machine may differ a little.
    CLOCK_SLACK_S = 5.0

    def __init__(self, manifest_uri: str, max_failed_fraction: float | None = None,
                 not_before: float | None = None) -> None:
        self.manifest_uri = manifest_uri
        self.max_failed_fraction = max_failed_fraction
        self.not_before = not_before
        self._verified: dict[str, dict[str, Any]] = {}  # unit id -> record outputs summary
        self._manifest: Manifest | None = None
        self._manifest_version: tuple | None = None
        self._books: str | None = None
        self._books_checked = False
        #: Units verified by the latest :meth:`look` and not before, with their counts (for progress lines).
        self.new_units: dict[str, dict[str, Any]] = {}

    def _check_books(self, manifest: Manifest) -> str | None:
        """Once, for a complete manifest: does it read every row its upstream manifest hands on?"""
        if not self._books_checked:
            upstream_uri = manifest.config.get("input_manifest")
            if upstream_uri:
                try:
                    self._books = chain_problem(manifest, Manifest.read(upstream_uri))
                except ManifestError as e:
                    self._books = f"cannot check its rows against the upstream manifest: {e}"
            self._books_checked = True
        return self._books

    def _load_manifest(self) -> Manifest | None:
        # The planned manifest never changes its units; only re-read while it may still be missing.
        if self._manifest is None or self._manifest.status == "planned":
            # Parsing a 10,000-unit manifest every poll costs more than the rest of a look: only when
            # the file changed (the job rewrites it once, at the end).
            version = _version(self.manifest_uri)
            if version is not None and version == self._manifest_version:
                return self._manifest
            try:
                manifest = Manifest.read(self.manifest_uri)
            except ManifestError as e:
                if "not found" not in str(e):
                    raise
                return None
            if self.not_before is not None and manifest.created_at < self.not_before - self.CLOCK_SLACK_S:
                return None
            self._manifest = manifest
            self._manifest_version = version
        return self._manifest

    def look(self) -> Progress:
        manifest = self._load_manifest()
        if manifest is None:
            return Progress(self.manifest_uri)
        units = {u.unit_id: u for u in manifest.units}
        budget = self.max_failed_fraction
        if budget is None:
            budget = float(manifest.config.get("max_failed_fraction", 0.0) or 0.0)
        store = CheckpointStore(Lake.from_dict(manifest.lake).checkpoint_dir(manifest.stage,
                                                                              manifest.fingerprint))
        done_ids, failed_ids = store.scan()
        self.new_units = {}
        for unit_id in done_ids - set(self._verified):
            unit = units.get(unit_id)
            if unit is None:
                continue  # a unit of another run with the same config
            rec = store.is_done(unit_id, unit.input_checksum, manifest.fingerprint)
            if rec is not None:
                self._verified[unit_id] = {"rows": sum(o.get("rows", 0) for o in rec.outputs),
                                           "bytes": sum(o.get("bytes", 0) for o in rec.outputs),
                                           "shards": len(rec.outputs)}
                self.new_units[unit_id] = {**self._verified[unit_id], "accounting": rec.accounting}
        failed = []
        for unit_id in sorted(failed_ids & set(units)):
            if unit_id in self._verified:
                continue
            info = store.failure(unit_id)
            # A marker older than this run's plan is from an earlier run, which this run retries.
            if info is not None and float(info.get("at", 0)) >= manifest.created_at:
                failed.append(unit_id)
        verified = [v for k, v in self._verified.items() if k in units]
        return Progress(
            manifest_uri=self.manifest_uri, stage=manifest.stage, total=len(units), done=len(verified),
            failed=len(failed), allowed_failures=math.floor(budget * len(units)),
            rows=sum(v["rows"] for v in verified), bytes=sum(v["bytes"] for v in verified),
            shards=sum(v["shards"] for v in verified), manifest_status=manifest.status,
            failed_units=failed, books=self._check_books(manifest) if manifest.status == "complete" else None)


def _version(uri: str) -> tuple | None:
    """What changes when a file is rewritten (size, time, ETag), or None when it cannot be told."""
    try:
        fs, path = storage.filesystem(uri)
        info = fs.info(path)
    except (FileNotFoundError, OSError):
        return None
    version = (info.get("size"), info.get("mtime") or info.get("LastModified") or info.get("updated"),
               info.get("ETag") or info.get("etag"), info.get("ino"))
    return version if any(v is not None for v in version[1:]) else None


class ShardCheckpointTrigger(BaseTrigger):
    """Polls a manifest's checkpoints; logs progress whenever it changes; fires one event:

    * ``{"status": "done", "summary": {...}, ...}`` once every unit is checkpointed (or failed within
      the budget);
    * ``{"status": "failed", "reason": ...}`` as soon as failed units exceed the failure budget, the
      manifest says the run failed, or the job (when a handle is given) ended before all units were
      checkpointed.

    :param manifest_uri: the manifest to gate on.
    :param max_failed_fraction: failure budget; ``None`` means the manifest's own.
    :param backend: backend name, with ``backend_options`` and ``job``: the job to watch for death.
    :param not_before: see :class:`CheckpointWatcher`.
    :param curation_conn_id: optional ``curation`` connection for storage credentials, resolved in the
        triggerer and used for this gate's lake only (see :func:`~airflow_curation.hooks.factory.lake_root_for`).
    :param quorum: fraction of units that opens the gate (default 1.0: all); see :func:`decide`.
    :param poll_interval: seconds between looks.
    :param log_offset: where streaming the job's log starts (with ``job``): its lines go to the task
        log at their own level, a traceback once at ERROR, and each unit's counts when it is checkpointed.
    """

    def __init__(self, manifest_uri: str, max_failed_fraction: float | None = None,
                 backend: str | None = None, backend_options: dict[str, Any] | None = None,
                 job: dict[str, Any] | None = None, not_before: float | None = None,
                 curation_conn_id: str | None = None, quorum: float = 1.0,
                 poll_interval: float = 10.0, log_offset: int = 0) -> None:
        super().__init__()
        self.log_offset = log_offset
        self.quorum = quorum
        self.not_before = not_before
        self.curation_conn_id = curation_conn_id
        self.manifest_uri = manifest_uri
        self.max_failed_fraction = max_failed_fraction
        self.backend = backend
        self.backend_options = backend_options or {}
        self.job = job
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"manifest_uri": self.manifest_uri, "max_failed_fraction": self.max_failed_fraction,
                 "backend": self.backend, "backend_options": self.backend_options, "job": self.job,
                 "not_before": self.not_before, "curation_conn_id": self.curation_conn_id,
                 "quorum": self.quorum,
                 "poll_interval": self.poll_interval, "log_offset": self.log_offset})

    def _connect(self):
        """Resolve the connections here, in the triggerer (blocking: call it in a thread): storage options
        for the gate's lake, and the backend of the job to watch (None without one)."""
        from airflow_curation.hooks.factory import backend_for, curation_settings, lake_root_for, scope_storage

        conn_id = self.curation_conn_id or (self.job or {}).get("curation_conn_id")
        settings = curation_settings(conn_id)
        scope_storage(settings, lake_root_for(self.manifest_uri, self.job, settings))
        if self.job is None:
            return None
        return backend_for(self.backend or self.job.get("backend", "local"), self.backend_options)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        backend = await asyncio.to_thread(self._connect)
        watcher = CheckpointWatcher(self.manifest_uri, self.max_failed_fraction, self.not_before)
        last_line = None
        relay = JobLogRelay(self.log, str((self.job or {}).get("job_id", "?")))
        while True:
            # The job's state is read BEFORE the checkpoints: a job that ended before this look has
            # written everything it ever will, so "ended and still incomplete" is final.
            job_status = await asyncio.to_thread(backend.status, self.job) if backend else None
            if backend is not None:
                await asyncio.to_thread(self._stream_log, backend, relay, job_status)
            try:
                progress = await asyncio.to_thread(watcher.look)
            except ManifestError as e:
                yield TriggerEvent({"status": "failed", "reason": str(e), "manifest_uri": self.manifest_uri})
                return
            for unit_id, info in sorted(watcher.new_units.items()):
                self.log.info(unit_line(progress.stage, unit_id, info))
            if progress.line() != last_line:
                last_line = progress.line()
                self.log.info(last_line)
            event = decide(progress, job_status, self.quorum)
            if event is not None:
                yield TriggerEvent(event)
                return
            await asyncio.sleep(self.poll_interval)

    def _stream_log(self, backend: Any, relay: JobLogRelay, job_status: Any) -> None:
        """The job's new log text into the task log; never fails the gate (the log is a courtesy)."""
        try:
            text, self.log_offset = backend.logs(self.job, self.log_offset)
        except Exception as e:  # noqa: BLE001
            self.log.debug("cannot read the job's log: %s", e)
            return
        relay.feed(text)
        if job_status is not None and job_status.state.finished:
            relay.flush()


def decide(progress: Progress, job_status=None, quorum: float = 1.0) -> dict[str, Any] | None:
    """The gate's verdict for one look, or None to keep waiting. Shared by the trigger and ``poke``.

    :param quorum: fraction of units whose checkpoints open the gate (1.0: all of them). Below 1, a
        downstream stage that polls the upstream checkpoints itself can start while the rest finish.
    """
    base = {"manifest_uri": progress.manifest_uri, "stage": progress.stage, "done": progress.done,
            "total": progress.total,
            "failed": progress.failed, "allowed_failures": progress.allowed_failures}
    if progress.over_budget:
        return {**base, "status": "failed",
                "reason": f"{progress.failed} of {progress.total} units failed, budget allows "
                          f"{progress.allowed_failures}: {progress.failed_units[:5]}"}
    if progress.manifest_status == "failed":
        return {**base, "status": "failed", "reason": f"the {progress.stage} run's manifest says it failed"}
    if progress.books:
        return {**base, "status": "failed", "reason": f"row accounting: {progress.books}"}
    if progress.complete:
        return {**base, "status": "done", "partial": False, "summary": progress.summary()}
    if quorum < 1.0 and progress.manifest_status != "missing" and progress.total \
            and progress.done >= math.ceil(quorum * progress.total):
        return {**base, "status": "done", "partial": True, "summary": progress.summary()}
    if job_status is not None and job_status.state.finished:
        missing = progress.total - progress.done - progress.failed
        if progress.manifest_status == "missing":
            what = "before writing its manifest"
        elif missing > 0:
            what = f"with {missing} of {progress.total} units not checkpointed"
        else:
            what = "before completing its manifest (every unit is checkpointed: a rerun only finishes it)"
        return {**base, "status": "failed",
                "reason": f"job {job_status.state.value} {what}: {job_status.message}".rstrip(": ")}
    return None
