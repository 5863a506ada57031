"""The one way every stage runs: plan units, skip those already checkpointed, process the rest with
retries, commit a checkpoint per unit, write the manifest, enforce the failure budget.

A stage is a small class with two methods, :meth:`Stage.plan` and :meth:`Stage.process_unit`; the
engine (in-process, a process pool, Dask, Ray) only decides where ``process_unit`` runs.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_curation.core import redact, storage
from airflow_curation.core.accounting import AccountingError, RowAccounting
from airflow_curation.core.checkpoint import CheckpointRecord, CheckpointStore
from airflow_curation.core.fingerprint import config_fingerprint
from airflow_curation.core.integrity import IntegrityError, chain_problem
from airflow_curation.core.layout import Lake
from airflow_curation.core.lease import Lease
from airflow_curation.core.manifest import Manifest, ShardEntry, UnitEntry
from airflow_curation.jobs.progress import allowed_failures

log = logging.getLogger(__name__)


class StageFailed(RuntimeError):
    """More units failed than the failure budget allows."""


@dataclass
class UnitResult:
    outputs: list[ShardEntry]
    accounting: RowAccounting
    extra: dict[str, Any] = field(default_factory=dict)
    # Every file the unit wrote ({uri, bytes, checksum}): a rerun trusts the checkpoint only while they exist.
    files: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def attrs(cls, stage: str, entry: ShardEntry, uri: str, nbytes: int, checksum: str,
              accounting: RowAccounting, extra: dict[str, Any] | None = None) -> "UnitResult":
        """The result of an attrs stage: ``entry`` handed on with ``stage``'s additive-columns file."""
        return cls(outputs=[entry.with_attrs(stage, uri, checksum)], accounting=accounting,
                   extra={"attrs_uri": uri, **(extra or {})}, files=[file_record(uri, nbytes, checksum)])


def file_record(uri: str, nbytes: int, checksum: str) -> dict[str, Any]:
    return {"uri": uri, "bytes": int(nbytes), "checksum": checksum}


# Failures that a second attempt cannot fix: the unit fails at once, with the message as it is.
NOT_RETRIED = (IntegrityError, AccountingError)


class Stage:
    """Base class of a stage.

    :param lake: where the dataset lives.
    :param config: the stage's settings; all of them enter the fingerprint except ``RUNTIME_KEYS``.
    :param run_id: names the run's manifest.
    """

    name: str = "stage"
    version: str = "1"
    # Settings that change how a run executes but not what it produces: kept out of the fingerprint.
    RUNTIME_KEYS: frozenset[str] = frozenset({"workers", "max_attempts", "max_failed_fraction", "inputs",
                                              "input_manifest", "scheduler_address", "lease_wait_s"})
    DEFAULTS: dict[str, Any] = {}

    def __init__(self, lake: Lake, config: dict[str, Any], run_id: str) -> None:
        unknown = set(config) - set(self.DEFAULTS) - self.RUNTIME_KEYS
        if unknown:
            raise ValueError(f"{self.name}: unknown settings {sorted(unknown)}; known: {sorted(self.DEFAULTS)}")
        self.lake = lake
        self.config = {**self.DEFAULTS, **config}
        self.run_id = run_id

    @property
    def fingerprint(self) -> str:
        fp_config = {k: v for k, v in self.config.items() if k not in self.RUNTIME_KEYS}
        return config_fingerprint(self.name, fp_config, self.version)

    @property
    def checkpoints(self) -> CheckpointStore:
        return CheckpointStore(self.lake.checkpoint_dir(self.name, self.fingerprint))

    @property
    def manifest_uri(self) -> str:
        return self.lake.manifest_uri(self.run_id, self.name)

    def plan(self) -> list[UnitEntry]:
        raise NotImplementedError

    def process_unit(self, unit: UnitEntry) -> UnitResult:
        raise NotImplementedError

    def finalize(self, manifest: Manifest) -> None:
        """Runs once after every unit is checkpointed (global steps, clean-up)."""

    def upstream_manifest(self) -> Manifest | None:
        """The complete manifest this run reads (its ``input_manifest``), for the cross-stage row check."""
        uri = self.config.get("input_manifest")
        return Manifest.read(uri) if uri else None

    def work_dirs(self) -> list[str]:
        """Folders swept at the start of a run for temp files that killed writers left (a live writer's,
        of any stage, are kept): the dataset snapshot, and the output folder of plain-file runs."""
        return [self.lake.base, *([self.config["output_dir"]] if self.config.get("output_dir") else [])]

    def default_mapper(self) -> "UnitMapper":
        """Where units run when the caller names no mapper: in-process, or a process pool of
        ``workers``. Engine stages (Dask, Ray) override this."""
        return local_mapper(int(self.config.get("workers", 1)))


def _attempt_unit(stage: Stage, unit: UnitEntry, max_attempts: int) -> tuple[str, dict]:
    """Process one unit with retries. Returns ("done", record) or ("failed", error); never raises."""
    store = stage.checkpoints
    error = ""
    for attempt in range(1, max_attempts + 1):
        started = time.time()
        try:
            result = stage.process_unit(unit)
            where = f"{stage.name} unit {unit.unit_id}"
            result.accounting.check(where)
            if unit.rows is not None and result.accounting.read != unit.rows:
                # "read" must be what the upstream manifest handed on, not what the outputs happen to hold.
                raise AccountingError(f"row accounting in {where}: read {result.accounting.read} rows but the "
                                      f"upstream manifest lists {unit.rows}")
            record = CheckpointRecord(
                unit_id=unit.unit_id, stage=stage.name, fingerprint=stage.fingerprint,
                input_checksum=unit.input_checksum, outputs=[asdict(o) for o in result.outputs],
                accounting=result.accounting.to_dict(), attempt=attempt, started_at=started,
                finished_at=time.time(), extra=result.extra, files=result.files)
            store.commit(record)
            return "done", asdict(record)
        except Exception as e:  # noqa: BLE001 - a unit's failure is recorded, not fatal to the run
            # The error reaches the failure record, the manifest and the logs: bounded, secrets masked.
            error = redact.scrub(f"{type(e).__name__}: {e}")
            log.warning("%s unit %s attempt %d/%d failed: %s", stage.name, unit.unit_id, attempt,
                        max_attempts, error)
            log.debug("%s", redact.scrub(traceback.format_exc(), limit=redact.TRACEBACK_LIMIT))
            if isinstance(e, NOT_RETRIED):
                break
    store.mark_failed(unit.unit_id, error, attempt)
    return "failed", {"error": error}


UnitMapper = Callable[[Callable[..., Any], Iterable[tuple]], Iterator[Any]]


def local_mapper(workers: int) -> UnitMapper:
    """In-process for one worker, a process pool for more."""

    def run(fn, arg_tuples):
        arg_tuples = list(arg_tuples)
        if workers <= 1 or len(arg_tuples) <= 1:
            for args in arg_tuples:
                yield fn(*args)
            return
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(fn, *args) for args in arg_tuples]
            for f in futures:
                yield f.result()

    return run


class StageRunner:
    """Runs a stage to completion and returns its manifest.

    :param stage: the stage to run.
    :param mapper: where units run; defaults to in-process or a process pool of ``workers``.
    """

    def __init__(self, stage: Stage, mapper: UnitMapper | None = None) -> None:
        self.stage = stage
        self.mapper = mapper or stage.default_mapper()

    def run(self, shard_group: tuple[int, int] | None = None, collect: bool = False) -> Manifest:
        """Runs under the stage's lease (one run per stage and snapshot; ``lease_wait_s`` to wait for another).

        :param shard_group: ``(i, n)``: process only group ``i`` of ``n`` (units ``i::n`` of the plan,
            e.g. one task of a Slurm array); the manifest is not written and any failed unit raises.
        :param collect: process nothing: gather the checkpoints that shard groups left, count the rest
            as failed, then finish the run as usual (manifest, failure budget, ``finalize``).
        """
        if shard_group is not None and not collect:
            # Array tasks of one run run side by side: the run's launcher, not each task, holds the lease.
            return self._run(shard_group, collect)
        lease = Lease(self.stage.lake.path("_locks", f"{self.stage.name}.lease"),
                      f"{self.stage.name} on {self.stage.lake.base}",
                      wait_s=float(self.stage.config.get("lease_wait_s") or 0))
        with lease:
            return self._run(shard_group, collect)

    def _run(self, shard_group: tuple[int, int] | None, collect: bool) -> Manifest:
        stage = self.stage
        fp = stage.fingerprint
        for folder in stage.work_dirs():
            for path in storage.remove_stale_temps(folder):
                log.info("%s: removed %s (a temp file its killed writer left)", stage.name, path)
        units = stage.plan()
        manifest = Manifest(dataset=stage.lake.dataset, stage=stage.name, run_id=stage.run_id,
                            fingerprint=fp, lake=stage.lake.to_dict(), units=units,
                            config={k: v for k, v in stage.config.items()})
        scope = units
        if shard_group is not None:
            index, count = shard_group
            if not 0 <= index < count:
                raise ValueError(f"shard group {index}/{count} out of range")
            scope = units[index::count]
        if shard_group is None or (shard_group[0] == 0 and not collect):
            # Written once at plan time so that sensors can gate on it; one group writes it for all.
            manifest.write(stage.manifest_uri)
        log.info("%s: %d units planned, fingerprint %s, manifest %s", stage.name, len(units), fp,
                 stage.manifest_uri)

        store = stage.checkpoints
        records: dict[str, dict] = {}
        todo = []
        for unit in scope:
            rec = store.is_done(unit.unit_id, unit.input_checksum, fp)
            if rec is not None:
                records[unit.unit_id] = asdict(rec)
                unit.status = "skipped"
            else:
                todo.append(unit)
        log.info("%s: %d units already done (checkpoint matches), %d to run", stage.name,
                 len(scope) - len(todo), len(todo))
        if collect:
            for unit in todo:
                failure = store.failure(unit.unit_id) or {}
                unit.status = "failed"
                unit.error = failure.get("error") or "no checkpoint: its shard group did not finish it"
            todo = []

        max_attempts = int(stage.config.get("max_attempts", 2))
        by_id = {u.unit_id: u for u in units}
        done = 0
        for unit_id, (status, payload) in zip(
                [u.unit_id for u in todo],
                self.mapper(_attempt_unit, ((stage, u, max_attempts) for u in todo))):
            unit = by_id[unit_id]
            done += 1
            if status == "done":
                unit.status = "done"
                records[unit_id] = payload
            else:
                unit.status, unit.error = "failed", payload["error"]
            log.info("%s: unit %s %s (%d/%d)", stage.name, unit_id, unit.status, done, len(todo))

        accounting = RowAccounting()
        for unit in scope:
            rec = records.get(unit.unit_id)
            if rec is None:
                if unit.rows:  # a failed unit's rows are known from upstream: counted, not lost
                    accounting.quarantine("failed_unit", unit.rows)
                continue
            accounting.merge(RowAccounting.from_dict(rec["accounting"]))
            manifest.shards.extend(ShardEntry(**o) for o in rec["outputs"])
        manifest.accounting = accounting.to_dict()
        failed = [u for u in scope if u.status == "failed"]
        if shard_group is not None and not collect:
            # A group reports on its own units only; the collect step owns the manifest and the budget.
            manifest.units = scope
            if failed:
                details = "; ".join(f"{u.unit_id}: {u.error}" for u in failed[:5])
                raise StageFailed(f"{stage.name}: shard group {shard_group[0]}/{shard_group[1]}: "
                                  f"{len(failed)} of {len(scope)} units failed. First: {details}")
            return manifest
        budget = float(stage.config.get("max_failed_fraction", 0.0))
        allowed = allowed_failures(budget, len(units))
        manifest.status = "failed" if len(failed) > allowed else "complete"
        upstream = stage.upstream_manifest() if manifest.status == "complete" else None
        broken = chain_problem(manifest, upstream) if upstream is not None else None
        if broken:
            manifest.status = "failed"
            manifest.write(stage.manifest_uri)
            raise StageFailed(f"{stage.name}: {broken}")
        if manifest.status == "complete":
            try:
                stage.finalize(manifest)
            except StageFailed:  # a check across all units failed: the manifest says so before the run does
                manifest.status = "failed"
                manifest.write(stage.manifest_uri)
                raise
        manifest.write(stage.manifest_uri)
        if manifest.status == "failed":
            details = "; ".join(f"{u.unit_id}: {u.error}" for u in failed[:5])
            raise StageFailed(f"{stage.name}: {len(failed)} of {len(units)} units failed, budget allows "
                              f"{allowed} (max_failed_fraction={budget}). First: {details}")
        return manifest
