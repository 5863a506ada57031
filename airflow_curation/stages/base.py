"""The one way every stage runs: plan units, skip those already checkpointed, process the rest with
retries, commit a checkpoint per unit, write the manifest, enforce the failure budget.

A stage is a small class with two methods, :meth:`Stage.plan` and :meth:`Stage.process_unit`; the
engine (in-process, a process pool, Dask, Ray) only decides where ``process_unit`` runs.
"""

from __future__ import annotations

import logging
import math
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_curation.core.accounting import RowAccounting
from airflow_curation.core.checkpoint import CheckpointRecord, CheckpointStore
from airflow_curation.core.faults import fault_point
from airflow_curation.core.fingerprint import config_fingerprint
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest, ShardEntry, UnitEntry

log = logging.getLogger(__name__)


class StageFailed(RuntimeError):
    """More units failed than the failure budget allows."""


@dataclass
class UnitResult:
    outputs: list[ShardEntry]
    accounting: RowAccounting
    extra: dict[str, Any] = field(default_factory=dict)


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
                                              "input_manifest", "scheduler_address"})
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
            fault_point(f"{stage.name}.before_unit")
            result = stage.process_unit(unit)
            result.accounting.check(f"{stage.name} unit {unit.unit_id}")
            record = CheckpointRecord(
                unit_id=unit.unit_id, stage=stage.name, fingerprint=stage.fingerprint,
                input_checksum=unit.input_checksum, outputs=[asdict(o) for o in result.outputs],
                accounting=result.accounting.to_dict(), attempt=attempt, started_at=started,
                finished_at=time.time(), extra=result.extra)
            fault_point(f"{stage.name}.before_commit")
            store.commit(record)
            fault_point(f"{stage.name}.after_commit")
            return "done", asdict(record)
        except Exception as e:  # noqa: BLE001 - a unit's failure is recorded, not fatal to the run
            error = f"{type(e).__name__}: {e}"
            log.warning("%s unit %s attempt %d/%d failed: %s", stage.name, unit.unit_id, attempt,
                        max_attempts, error)
            log.debug("%s", traceback.format_exc())
    store.mark_failed(unit.unit_id, error, max_attempts)
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
        """:param shard_group: ``(i, n)``: process only group ``i`` of ``n`` (units ``i::n`` of the plan,
            e.g. one task of a Slurm array); the manifest is not written and any failed unit raises.
        :param collect: process nothing: gather the checkpoints that shard groups left, count the rest
            as failed, then finish the run as usual (manifest, failure budget, ``finalize``).
        """
        stage = self.stage
        fp = stage.fingerprint
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
        allowed = math.floor(budget * len(units))
        manifest.status = "failed" if len(failed) > allowed else "complete"
        if manifest.status == "complete":
            stage.finalize(manifest)
        fault_point(f"{stage.name}.before_manifest")
        manifest.write(stage.manifest_uri)
        if manifest.status == "failed":
            details = "; ".join(f"{u.unit_id}: {u.error}" for u in failed[:5])
            raise StageFailed(f"{stage.name}: {len(failed)} of {len(units)} units failed, budget allows "
                              f"{allowed} (max_failed_fraction={budget}). First: {details}")
        return manifest
