"""The one way every stage runs: plan units, skip those already checkpointed, process the rest with
retries, commit a checkpoint per unit, write the manifest, enforce the failure budget.

A stage is a small class with two methods, :meth:`Stage.plan` and :meth:`Stage.process_unit`; the
mapper (in-process, a process pool, Dask, Ray) only decides where ``process_unit`` runs. Stages that add
columns to every shard derive from :class:`airflow_curation.stages.attrs.AttrsStage` instead, which does
the unit plumbing and leaves one method, ``compute``.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from airflow_curation.core import redact, storage
from airflow_curation.core.accounting import AccountingError, RowAccounting, allowed_failures
from airflow_curation.core.allocator import use_small_pages
from airflow_curation.core.checkpoint import CheckpointRecord, CheckpointStore
from airflow_curation.core.faults import fault_point
from airflow_curation.core.fingerprint import config_fingerprint
from airflow_curation.core.integrity import IntegrityError, chain_problem, input_manifest_uris
from airflow_curation.core.layout import Lake
from airflow_curation.core.lease import Lease
from airflow_curation.core.manifest import Manifest, ManifestHead, ShardEntry, UnitEntry, group_range
from airflow_curation.core.schema import BadRows
from airflow_curation.core.tally import TallyWriter
from airflow_curation.core.tally import entry as tally_entry
from airflow_curation.stages.settings import Setting, Settings, anything

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
    def attrs(
        cls,
        stage: str,
        entry: ShardEntry,
        uri: str,
        nbytes: int,
        checksum: str,
        accounting: RowAccounting,
        extra: dict[str, Any] | None = None,
        columns: list[str] | None = None,
        files: dict[str, dict[str, Any]] | None = None,
    ) -> "UnitResult":
        """The result of an attrs stage: ``entry`` handed on with ``stage``'s additive-columns file.

        :param columns: that file's columns, recorded in the entry (later plans read no footer for them).
        :param files: the unit's other files for the shard, by role, recorded in the entry too."""
        return cls(
            outputs=[entry.with_attrs(stage, uri, checksum, columns, files)],
            accounting=accounting,
            extra={"attrs_uri": uri, **(extra or {})},
            files=[file_record(uri, nbytes, checksum)]
            + [file_record(f["uri"], f["bytes"], f["checksum"]) for f in (files or {}).values()],
        )


def file_record(uri: str, nbytes: int, checksum: str) -> dict[str, Any]:
    """What a checkpoint records of a file its unit wrote (complete, in place): with its stamp as it is now,
    so that a rerun finding the same stamp need not re-hash it (:meth:`CheckpointRecord.files_intact`)."""
    return {"uri": uri, "bytes": int(nbytes), "checksum": checksum, "stamp": storage.stat(uri)[1]}


# Failures that a second attempt cannot fix: the unit fails at once, with the message as it is.
NOT_RETRIED = (IntegrityError, AccountingError, BadRows)


def _legacy_settings(base: Settings, defaults: dict[str, Any], runtime_keys: Any) -> Settings:
    """Settings of a stage declared the older way (a ``DEFAULTS`` dict and ``RUNTIME_KEYS``): untyped."""
    runtime = set(runtime_keys)
    added = []
    for key, value in defaults.items():
        if key in base:
            added.append(replace(base[key], default=value, runtime=base[key].runtime or key in runtime))
        else:
            added.append(Setting(key, anything, value, runtime=key in runtime, cli=False))
    added += [
        Setting(key, anything, None, runtime=True, cli=False)
        for key in sorted(runtime)
        if key not in base and key not in defaults
    ]
    return base.extend(*added)


class Stage:
    """Base class of a stage.

    A stage declares its settings once, in ``SETTINGS`` (:mod:`airflow_curation.stages.settings`): its
    defaults, which settings stay out of the fingerprint, the ``curation <stage>`` flags and the
    operators' config check all come from there.

    :param lake: where the dataset lives.
    :param config: the stage's settings; all of them enter the fingerprint except the ``runtime`` ones.
    :param run_id: names the run's manifest.
    """

    name: str = "stage"
    version: str = "1"
    # What a run reads, for ``curation <stage>``: "raw" (input files: ingest), "manifest" (an upstream
    # manifest: validate) or "manifest_or_files" (an upstream manifest, or plain Parquet files).
    INPUTS: str = "manifest"
    # What the stage reads: the stages whose output is its input, nearest first. In a pipeline
    # (:class:`airflow_curation.pipeline.Pipeline`) its input is the manifest of the first of these that ran, and
    # its place and wiring follow from it; ``curation <stage> --lake`` reads the newest complete manifest of any
    # of them when none is named (None: any stage but this one; in a pipeline, the first stage).
    UPSTREAM: tuple[str, ...] | None = None
    # The setting without which the stage has nothing to do (a model, a tokenizer, evaluation sets): a pipeline
    # carries the stage and skips it where that setting is empty. None: the stage always runs.
    OPTIONAL_WITHOUT: str | None = None
    # Whether the stage can start on single upstream shards as their checkpoints land (a pipeline then starts
    # it on its upstream's first shards); False: it starts on the complete upstream.
    STREAMS: bool = False
    # A stage that reports on the whole run (validate): in a pipeline it runs after every other stage.
    AFTER_ALL: bool = False
    # What validate's funnel calls the rows this stage keeps (None: the stage's attrs name).
    FUNNEL_LABEL: str | None = None
    # Manifest URIs this run replaces (``ingest --replace``), set by ``plan``; the run's manifest records them.
    supersedes: tuple[str, ...] = ()
    # The part of the run this process does, ``(i, n)`` for one task of an array (None: all of it), set by
    # the runner before it plans: a stage whose planning does work of its own (dedup's signatures) does
    # only this task's share of it.
    shard_group: tuple[int, int] | None = None
    collecting = False  # a collect step (StageRunner): it plans every unit and runs none
    SETTINGS: Settings = Settings(
        Setting("workers", int, 1, "parallel workers", runtime=True, minimum=0),
        Setting("max_attempts", int, 2, "attempts per unit before it counts as failed", runtime=True, minimum=1),
        Setting(
            "max_failed_fraction",
            float,
            0.0,
            "failure budget: the fraction of units that may fail",
            runtime=True,
            minimum=0,
            maximum=1,
        ),
        Setting(
            "lease_wait_s",
            float,
            0.0,
            "seconds to wait while another run holds this stage on the snapshot",
            runtime=True,
            minimum=0,
        ),
        Setting(
            "min_units",
            int,
            1,
            "plan at least this many units where the input allows (a backend running N array tasks sets N)",
            runtime=True,
            cli=False,
            minimum=1,
        ),
        Setting("inputs", list, None, "input files", runtime=True, cli=False),
        Setting("input_manifest", str, None, "URI of the upstream manifest", runtime=True, cli=False),
        Setting("scheduler_address", str, None, "run units on this Dask scheduler", runtime=True, cli=False),
        Setting(
            "run_context",
            dict,
            None,
            "who launched the run with what (Airflow params, connection, rendered task fields): recorded only",
            runtime=True,
            cli=False,
        ),
    )
    # Derived from SETTINGS (read-only views, for code that reads them).
    DEFAULTS: dict[str, Any] = SETTINGS.defaults
    RUNTIME_KEYS: frozenset[str] = SETTINGS.runtime_keys

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__
        if "SETTINGS" not in own and ("DEFAULTS" in own or "RUNTIME_KEYS" in own):
            cls.SETTINGS = _legacy_settings(cls.SETTINGS, own.get("DEFAULTS", {}), own.get("RUNTIME_KEYS", ()))
        cls.DEFAULTS = cls.SETTINGS.defaults
        cls.RUNTIME_KEYS = cls.SETTINGS.runtime_keys
        if "finalize" in own:  # a hook that would silently never run
            raise TypeError(f"{cls.__name__}: Stage.finalize was renamed to Stage.collect")

    def __init__(self, lake: Lake, config: dict[str, Any], run_id: str) -> None:
        self.lake = lake
        self.config = {**self.SETTINGS.defaults, **self.SETTINGS.coerce(config, self.name)}
        self.run_id = run_id
        self.check_config(self.config)

    @classmethod
    def check_config(cls, config: dict[str, Any]) -> None:
        """Refuse what the settings alone make impossible: a required setting left out, a rule on a signal no
        setting computes, an unknown format. ``config`` is coerced, with the defaults.

        The submitting task runs it before any job (``CurationStageOperator.build_config``), so a typo fails
        the Airflow task at once, not every task of a Slurm array after the queue; the job runs it again. It
        must read no file, model or connection: where a run is launched may reach none of them (those are
        checked by the stage's constructor, in the job). A stage that overrides it calls this one first."""
        missing = [s.name for s in cls.SETTINGS if s.required and config.get(s.name) in (None, "")]
        if missing:
            raise ValueError(f"{cls.name}: no {', '.join(missing)} given")

    @property
    def fingerprint(self) -> str:
        return config_fingerprint(self.name, self.SETTINGS.fingerprint_config(self.config), self.version)

    @property
    def checkpoints(self) -> CheckpointStore:
        return self.lake.checkpoints(self.name, self.fingerprint)

    @property
    def manifest_uri(self) -> str:
        return self.lake.manifest_uri(self.run_id, self.name)

    def plan(self) -> list[UnitEntry]:
        raise NotImplementedError

    def plan_group(self, index: int, count: int) -> list[UnitEntry]:
        """The units of group ``index`` of ``count`` (the block of :meth:`plan` that :func:`group_range` gives):
        what one task of an array runs. Stages that can plan a group without the whole plan (attrs stages: only
        the upstream shards of that block, from the manifest pages that hold them) override it."""
        units = self.plan()
        block = group_range(len(units), index, count)
        return units[block.start : block.stop]

    def process_unit(self, unit: UnitEntry) -> UnitResult:
        raise NotImplementedError

    def reusable(self, unit: UnitEntry, record: CheckpointRecord) -> bool:
        """Whether ``unit``'s matching checkpoint (its outputs verified) may stand for this run. A stage whose
        record vouches for what it read rather than only for what it wrote (validate's verdict) re-verifies
        its inputs here; False runs the unit again."""
        return True

    @classmethod
    def new_launch(cls, lake: Lake, run_id: str) -> None:
        """What a new launch of run ``run_id`` (attempt 1, not a relaunch of some of its tasks) does before any
        task starts: forget what an earlier, killed launch of the same run shared among its tasks. Nothing by
        default."""

    def collect(self, manifest: Manifest) -> None:
        """The collect step: runs once after every unit is checkpointed (checks across units, clean-up),
        before the final manifest is written; :class:`StageFailed` fails the run."""

    def upstream_manifests(self) -> list[ManifestHead]:
        """The heads of the manifests this run reads (``input_manifest``, and ``manifests`` where a stage takes
        several), for the cross-stage row check."""
        return [ManifestHead.read(u) for u in input_manifest_uris(self.config)]

    def work_dirs(self) -> list[str]:
        """Folders swept at the start of a run for temp files that killed writers left (a live writer's,
        of any stage, are kept): the dataset snapshot, and the output folder of plain-file runs."""
        return [self.lake.base, *([self.config["output_dir"]] if self.config.get("output_dir") else [])]

    def default_mapper(self) -> "UnitMapper":
        """Where units run when the caller names no mapper: in-process, or a process pool of
        ``workers``. Stages with a ``mapper`` setting (``dask``) override this."""
        return local_mapper(int(self.config.get("workers", 1)))


def _attempt_unit(stage: Stage, unit: UnitEntry, max_attempts: int) -> tuple[str, dict]:
    """Process one unit with retries. Returns ("done", record) or ("failed", error); never raises."""
    store = stage.checkpoints
    error = ""
    use_small_pages()  # in whichever process runs the unit (core.allocator)
    for attempt in range(1, max_attempts + 1):
        started = time.time()
        try:
            fault_point(f"{stage.name}.before_unit")
            result = stage.process_unit(unit)
            where = f"{stage.name} unit {unit.unit_id}"
            result.accounting.check(where)
            if unit.rows is not None and result.accounting.read != unit.rows:
                # "read" must be what the upstream manifest handed on, not what the outputs happen to hold.
                raise AccountingError(
                    f"row accounting in {where}: read {result.accounting.read} rows but the "
                    f"upstream manifest lists {unit.rows}"
                )
            record = CheckpointRecord(
                unit_id=unit.unit_id,
                stage=stage.name,
                fingerprint=stage.fingerprint,
                input_checksum=unit.input_checksum,
                outputs=[asdict(o) for o in result.outputs],
                accounting=result.accounting.to_dict(),
                attempt=attempt,
                started_at=started,
                finished_at=time.time(),
                # which run did the work (a unit done while streaming is "skipped" in that run's final manifest)
                extra={**result.extra, "run_id": stage.run_id},
                files=result.files,
            )
            fault_point(f"{stage.name}.before_commit")
            store.commit(record)
            fault_point(f"{stage.name}.after_commit")
            return "done", asdict(record)
        except Exception as e:  # noqa: BLE001 - a unit's failure is recorded, not fatal to the run
            # The error reaches the failure record, the manifest and the logs: bounded, secrets masked.
            error = redact.scrub(f"{type(e).__name__}: {e}")
            log.warning("%s unit %s attempt %d/%d failed: %s", stage.name, unit.unit_id, attempt, max_attempts, error)
            log.debug("%s", redact.scrub(traceback.format_exc(), limit=redact.TRACEBACK_LIMIT))
            if isinstance(e, NOT_RETRIED):
                break
    try:
        store.mark_failed(unit.unit_id, error, attempt)
    except Exception as e:  # noqa: BLE001 - the marker is a courtesy; the failure is reported either way
        # (the disk that failed the unit may be full: one unit's marker must not end every other unit's work)
        log.warning("%s unit %s: its failure marker was not written: %s", stage.name, unit.unit_id, e)
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

    def run(
        self, shard_group: tuple[int, int] | None = None, collect: bool = False, relaunchable: bool = False
    ) -> Manifest:
        """Runs under the stage's lease (one run per stage and snapshot; ``lease_wait_s`` to wait for another).

        :param shard_group: ``(i, n)``: process only group ``i`` of ``n`` (the block of the plan that
            ``group_range`` gives, e.g. one task of a Slurm array); the manifest is not written and any failed unit raises.
        :param collect: process nothing: gather the checkpoints that shard groups left, count the rest
            as failed, then finish the run as usual (manifest, failure budget, :meth:`Stage.collect`).
        :param relaunchable: (collect) the run's follower may relaunch this attempt: when the run fails with
            units lost (neither checkpoint nor failure marker: their task was cancelled, preempted or killed),
            its manifest says a relaunch is pending (``Manifest.relaunch``), which the follower resolves.
        """
        if shard_group is not None and not collect:
            # Array tasks of one run run side by side: the run's launcher, not each task, holds the lease.
            return self._run(shard_group, collect, relaunchable)
        lease = Lease(
            self.stage.lake.path("_locks", f"{self.stage.name}.lease"),
            f"{self.stage.name} on {self.stage.lake.base}",
            wait_s=float(self.stage.config.get("lease_wait_s") or 0),
        )
        with lease:
            return self._run(shard_group, collect, relaunchable)

    def _run(self, shard_group: tuple[int, int] | None, collect: bool, relaunchable: bool = False) -> Manifest:
        stage = self.stage
        fp = stage.fingerprint
        if shard_group is not None:
            index, count = shard_group
            if not 0 <= index < count:
                raise ValueError(f"shard group {index}/{count} out of range")
        # Group 0 of an array plans every unit: it writes the planned manifest for all groups, so that
        # sensors can gate on it at once. Any other group reads only its own part of the upstream manifest
        # and leaves the sweep of the lake to group 0 and the collect step: nothing it does grows with
        # the run's other units.
        whole = shard_group is None or collect or shard_group[0] == 0
        stage.shard_group = None if collect else shard_group
        stage.collecting = collect
        for folder in stage.work_dirs() if whole else []:
            for path in storage.remove_stale_temps(folder):
                log.info("%s: removed %s (a temp file its killed writer left)", stage.name, path)
        units = stage.plan() if whole else stage.plan_group(*shard_group)
        manifest = Manifest(
            dataset=stage.lake.dataset,
            stage=stage.name,
            run_id=stage.run_id,
            fingerprint=fp,
            lake=stage.lake.to_dict(),
            units=units,
            config={k: v for k, v in stage.config.items()},
            supersedes=list(stage.supersedes),
            tallies=True,
        )
        block = group_range(len(units), *shard_group) if shard_group is not None and whole else None
        scope = units[block.start : block.stop] if block is not None else units
        if shard_group is None or (shard_group[0] == 0 and not collect):
            manifest.write(stage.manifest_uri)
        group = f" (group {shard_group[0]}/{shard_group[1]})" if shard_group is not None and not whole else ""
        log.info(
            "%s: %d units planned%s, fingerprint %s, manifest %s", stage.name, len(units), group, fp, stage.manifest_uri
        )

        store = stage.checkpoints
        records: dict[str, dict] = {}
        todo = []
        for unit in scope:
            rec = store.is_done(unit.unit_id, unit.input_checksum, fp)
            if rec is not None and stage.reusable(unit, rec):
                records[unit.unit_id] = asdict(rec)
                unit.status = "skipped"
            else:
                todo.append(unit)
        log.info(
            "%s: %d units already done (checkpoint matches), %d to run", stage.name, len(scope) - len(todo), len(todo)
        )
        # What a gate reads while the run goes (a look costs what changed, not a listing of every record).
        tally = None if collect else TallyWriter(stage.manifest_uri, fp, [u.unit_id for u in scope])
        if tally is not None:
            tally.ended({uid: tally_entry("skipped", rec) for uid, rec in records.items()})
        lost = 0  # units whose task ended before they did (no failure of their own): a relaunch reruns them
        if collect:
            for unit in todo:
                failure = store.failure(unit.unit_id) or {}
                lost += not failure
                unit.status = "failed"
                unit.error = failure.get("error") or "no checkpoint: its shard group did not finish it"
            todo = []

        max_attempts = int(stage.config.get("max_attempts", 2))
        by_id = {u.unit_id: u for u in units}
        done = 0
        for unit_id, (status, payload) in zip(
            [u.unit_id for u in todo], self.mapper(_attempt_unit, ((stage, u, max_attempts) for u in todo))
        ):
            unit = by_id[unit_id]
            done += 1
            if status == "done":
                unit.status = "done"
                records[unit_id] = payload
            else:
                unit.status, unit.error = "failed", payload["error"]
            if tally is not None:
                tally.ended({unit_id: tally_entry(unit.status, records.get(unit_id), unit.error)})
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
                raise StageFailed(
                    f"{stage.name}: shard group {shard_group[0]}/{shard_group[1]}: "
                    f"{len(failed)} of {len(scope)} units failed. First: {details}"
                )
            return manifest
        budget = float(stage.config.get("max_failed_fraction", 0.0))
        allowed = allowed_failures(budget, len(units))
        manifest.status = "failed" if len(failed) > allowed else "complete"
        if manifest.status == "failed" and relaunchable and lost:
            manifest.relaunch = {"pending": True, "lost_units": lost}
        upstreams = stage.upstream_manifests() if manifest.status == "complete" else []
        broken = chain_problem(manifest, *upstreams) if upstreams else None
        if broken:
            manifest.status = "failed"
            manifest.write(stage.manifest_uri)
            raise StageFailed(f"{stage.name}: {broken}")
        if manifest.status == "complete":
            try:
                stage.collect(manifest)
            except StageFailed:  # a check across all units failed: the manifest says so before the run does
                manifest.status = "failed"
                manifest.write(stage.manifest_uri)
                raise
        fault_point(f"{stage.name}.before_manifest")
        manifest.write(stage.manifest_uri)
        if manifest.status == "failed":
            details = "; ".join(f"{u.unit_id}: {u.error}" for u in failed[:5])
            raise StageFailed(
                f"{stage.name}: {len(failed)} of {len(units)} units failed, budget allows "
                f"{allowed} (max_failed_fraction={budget}). First: {details}"
            )
        return manifest
