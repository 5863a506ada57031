"""The validate stage: a barrier (one unit) that gates the pipeline on declared checks and writes the
curation report beside the run's manifests.

It reads the upstream manifest, builds the curated view (shards joined with every attrs folder by
``id``, read in place), computes the metrics with its query engine (DuckDB or Daft), runs the checks, writes
``_manifests/<run_id>/report.{json,html}`` and fails with a readable summary when a check of severity
``error`` fails. Its manifest passes the upstream shards through, so a publish step can read it.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from dataclasses import replace
from functools import lru_cache
from typing import Any

import xxhash

from airflow_curation.core import storage
from airflow_curation.core.accounting import RowAccounting
from airflow_curation.core.checkpoint import CheckpointRecord, CheckpointStore
from airflow_curation.core.faults import fault_point
from airflow_curation.core.fingerprint import canonical_json
from airflow_curation.core.integrity import IntegrityError, shard_files, verify_files
from airflow_curation.core.manifest import Manifest, ManifestError, ManifestHead, ShardEntry, UnitEntry
from airflow_curation.stages.base import Stage, UnitResult, _attempt_unit
from airflow_curation.stages.mappers.budget import cpu_count
from airflow_curation.stages.settings import Setting, anything, size
from airflow_curation.stages.validate import checks as checks_mod
from airflow_curation.stages.validate import limits, partials
from airflow_curation.stages.validate.query_engines import IDS_PER_PASS, finite, make_engine
from airflow_curation.stages.validate.report import build_report, report_uris, write_report
from airflow_curation.stages.validate.view import CuratedView, row_groups, view_spec

log = logging.getLogger(__name__)

UNIT_ID = "validate"  # the merge's record: the verdict
PART_ROWS = 10_000_000  # rows of one part (a task of a split run) by default


def _read_manifest(uri: str) -> Manifest:
    """A manifest read whole once per process while its file is unchanged: every part (unit) of a split run
    plans from it, slices it and builds its view from it and its siblings, and a task runs many parts (each
    used to read them all again: 8 whole reads of a 50,000-shard manifest per part). Shared, never mutated."""
    version = storage.version(uri)
    if version is None:
        return Manifest.read(uri)
    return _read_cached(uri, version)


@lru_cache(maxsize=16)
def _read_cached(uri: str, version: tuple) -> Manifest:
    return Manifest.read(uri)


class ValidateStage(Stage):
    """Check a run's curated view and write its report (JSON + HTML).

    Runs the declared checks (and the default ones, whose thresholds are settings, so DAG params) over the
    shards joined with every stage's attrs, and fails when a check of severity error fails. See
    docs/validate.md.
    """

    name = "validate"
    UPSTREAM = ("enrich", "pii", "decontaminate", "quality", "dedup", "boilerplate", "preprocess", "ingest")
    AFTER_ALL = True
    # 2: sql checks run in the sandbox; a verdict reached without it is not reused. 3: metrics in bounded memory,
    # each shard joined with its own attrs files (a repeated id across shards no longer multiplies the rows). 4: split
    # into parts (units) merged by the collect step, the verdict recorded by the merge
    version = "4"
    SETTINGS = Stage.SETTINGS.extend(
        Setting(
            "query_engine",
            str,
            "duckdb",
            "what computes the metrics: duckdb (in process) or daft",
            choices=("duckdb", "daft"),
        ),
        Setting("daft_runner", str, "native", "daft: native (this machine) or ray", choices=("native", "ray")),
        Setting("checks", anything, [], "a list of check dicts, or YAML text (see docs/validate.md)", cli=False),
        Setting("checks_file", str, None, "YAML or JSON file of declared checks", flag="--checks"),
        Setting("min_rows", int, 1, "fewest curated rows allowed", minimum=0),
        Setting("max_null_rate", float, 0.0, "highest null rate of id and text", minimum=0, maximum=1),
        Setting(
            "max_duplicate_rate",
            float,
            None,
            "highest duplicate rate allowed (default: not checked)",
            minimum=0,
            maximum=1,
        ),
        Setting(
            "min_kept_fraction",
            float,
            None,
            "smallest curated/all ratio allowed (default: not checked)",
            minimum=0,
            maximum=1,
        ),
        Setting("signal_bounds", dict, {}, "JSON {column: {stat, min, max}}: bounds of signal statistics"),
        Setting("fail_on_error", bool, True, "fail when a check of severity error fails", off_flag="--warn-only"),
        Setting(
            "check_timeout_s",
            float,
            limits.DEFAULT_TIMEOUT_S,
            "seconds a sql check's query may run before it is stopped and the check fails (a check's timeout_s wins)",
            keep_old_fingerprint=True,
            minimum=0,
        ),
        Setting(
            "threads",
            int,
            None,
            "DuckDB threads and the files verified at once (default: the cores this process may use)",
            runtime=True,
            minimum=0,
        ),
        Setting(
            "memory_limit",
            str,
            None,
            "memory the queries may hold, e.g. 4GB (DuckDB spills beyond; a Daft sql check is stopped); "
            "default 60 percent of the memory available when the stage starts",
            runtime=True,
        ),
        Setting(
            "temp_dir",
            str,
            None,
            "where the queries' private temp folder goes (removed at the end); default: the working directory, "
            "the job's own folder on the local and Slurm backends",
            runtime=True,
        ),
        Setting(
            "max_temp_size",
            size,
            None,
            "most temp (spill) bytes the queries may write; default 16 GiB or half the free disk, if less",
            runtime=True,
        ),
        Setting(
            "group_rows",
            int,
            None,
            "DuckDB: rows of shards joined with their attrs per query (default 100000; 0: all at once)",
            runtime=True,
            minimum=0,
        ),
        Setting(
            "ids_per_pass",
            int,
            None,
            "DuckDB: ids per hash partition of the distinct-id and cluster counts (default 1000000; 0: one pass)",
            runtime=True,
            minimum=0,
        ),
        Setting(
            "part_rows",
            int,
            None,
            f"DuckDB: rows of one part, a unit (an array task) of the split run (default {PART_ROWS:,})",
            runtime=True,
            minimum=0,
        ),
        Setting(
            "ray_address",
            str,
            None,
            "Ray cluster for daft_runner ray: ray://host:10001 or host:6379 "
            "(default: $CURATION_RAY_ADDRESS, else a new local Ray)",
            runtime=True,
        ),
        renamed={"engine": "query_engine"},
    )

    @classmethod
    def check_config(cls, config: dict[str, Any]) -> None:
        super().check_config(config)
        checks = config.get("checks")
        if checks_mod.inline(checks):  # the checks given as such (a file's are read in the job)
            checks_mod.refuse_unsafe_sql(checks_mod.load_checks(checks), config["query_engine"])

    # --- inputs -----------------------------------------------------------------------------------

    @property
    def input_manifest_uri(self) -> str:
        uri = self.config.get("input_manifest")
        if not uri:
            raise ValueError("validate needs config['input_manifest'], the URI of the last stage's manifest")
        return uri

    def input_manifest(self) -> Manifest:
        m = _read_manifest(self.input_manifest_uri)
        if m.status != "complete":
            raise ManifestError(f"input manifest {self.input_manifest_uri} has status {m.status_text}, not 'complete'")
        return m

    def stage_manifests(self) -> dict[str, tuple[str, Manifest]]:
        """Every stage manifest of the input's run and of this run, by stage (this run's win)."""
        dirs = [self.input_manifest_uri.rsplit("/", 1)[0], self.manifest_uri.rsplit("/", 1)[0]]
        found: dict[str, tuple[str, Manifest]] = {}
        for d in dict.fromkeys(dirs):
            for uri in storage.listdir(d):
                name = uri.rsplit("/", 1)[-1]
                if not name.endswith(".json") or name in ("report.json", f"{self.name}.json"):
                    continue
                try:
                    m = _read_manifest(uri)
                except ManifestError:
                    continue
                found[m.stage] = (uri, m)
        m = self.input_manifest()
        found.setdefault(m.stage, (self.input_manifest_uri, m))
        return found

    def declared_checks(self) -> list[dict[str, Any]]:
        declared = checks_mod.load_checks(self.config.get("checks"))
        if self.config.get("checks_file"):
            declared += checks_mod.load_checks(self.config["checks_file"])
        # A run that mixed gets its mixture checked against the targets, unless a declared check does it.
        mixed = "mix" in self.stage_manifests() and not any(c.get("type") == "mixture" for c in declared)
        return checks_mod.default_checks(self.config) + ([{"type": "mixture"}] if mixed else []) + declared

    # --- the stage --------------------------------------------------------------------------------

    def _verdict_checksum(self, m: Manifest, checks: list[dict[str, Any]]) -> str:
        """What a verdict depends on: every shard and attrs file (checksums), the run's manifests, the checks."""
        others = {st: (mm.fingerprint, mm.status, mm.accounting) for st, (_, mm) in self.stage_manifests().items()}
        payload = {"shards": [_shard_key(s) for s in m.shards], "manifests": others, "checks": checks}
        return _xxh(canonical_json(payload))

    def plan(self) -> list[UnitEntry]:
        """One unit per slice of consecutive shards of about ``part_rows`` rows (Daft: one slice, the whole
        view: Daft spreads it over its own workers): each checks its files and computes the slice's partial
        counts (:mod:`.partials`); :meth:`collect` merges them, runs the checks and writes the report.

        Each unit names its block of the input's shards (:func:`_shard_range`), and the layout every part
        shares (the view's, the key partitions) is left in :meth:`_plan_uri`: a task of an array plans from
        those, its own unit pages and the input's head (:meth:`plan_group`)."""
        m = self.input_manifest()
        checks = self.declared_checks()  # fail early on a malformed check, before any work
        checks_mod.refuse_unsafe_sql(checks, self.config["query_engine"])
        rows = None if self.config["query_engine"] != "duckdb" else self.config.get("part_rows") or PART_ROWS
        slices = row_groups([s.rows for s in m.shards], rows)
        if not slices:  # nothing to validate: the merge says so (CuratedView)
            return []
        spec, parts = self._layout(m)
        pages = _pages_ident(ManifestHead.read(self.input_manifest_uri))
        if pages is not None and self.config["query_engine"] == "duckdb" and self.shard_group is not None:
            # A task of an array (group 0): the other tasks plan from this. A whole run needs none.
            doc = {"input_manifest": self.input_manifest_uri, "shard_pages": pages, "spec": spec, "partitions": parts}
            storage.write_json(self._plan_uri(), doc)
        return [
            UnitEntry(
                unit_id=f"part-{k:05d}",
                inputs=[self.input_manifest_uri, _range_ref(self.input_manifest_uri, idx, pages)],
                input_checksum=_xxh(canonical_json({"shards": [_shard_key(m.shards[i]) for i in idx], "p": parts})),
            )
            for k, idx in enumerate(slices)
        ]

    def plan_group(self, index: int, count: int) -> list[UnitEntry]:
        """Group ``index`` of ``count`` (a task of an array that is not group 0) from its slice: the units of its
        block of this run's manifest pages (group 0 wrote them), the layout the whole plan left and the input
        manifest's head; its parts then read their own shards' pages (:meth:`_unit_shards`). What it reads
        grows with its own parts, not with the run's shards. Before group 0 planned (or where anything differs:
        another plan, the input rewritten since), the whole plan, as before."""
        units = self._plan_from_pages(index, count)
        return units if units is not None else super().plan_group(index, count)

    def _plan_from_pages(self, index: int, count: int) -> list[UnitEntry] | None:
        if self.config["query_engine"] != "duckdb":
            return None
        try:
            own = ManifestHead.read(self.manifest_uri)
            head = ManifestHead.read(self.input_manifest_uri)
            doc = storage.read_json(self._plan_uri())
        except (ManifestError, FileNotFoundError, ValueError):
            return None
        pages = _pages_ident(head)
        if (
            own.run_id != self.run_id
            or own.fingerprint != self.fingerprint
            or head.status != "complete"
            or pages is None
            or doc.get("input_manifest") != self.input_manifest_uri
            or doc.get("shard_pages") != pages
        ):
            return None
        units = own.units(index, count)
        if any(_shard_range(u, pages) is None for u in units):  # planned from another version of the input
            return None
        for u in units:
            u.status, u.error = "pending", None
        self._part = (head, pages, doc["spec"], int(doc["partitions"]))
        log.info("validate: group %d/%d: %d parts planned from their pages", index, count, len(units))
        return units

    def _plan_uri(self) -> str:
        """Where the whole plan leaves the layout its parts share, for the tasks of this run's array."""
        return self.lake.path("_work", "validate", self.fingerprint, f"{self.run_id}.plan.json")

    def _layout(self, m: Manifest) -> tuple[dict[str, Any], int]:
        """The view's layout (:func:`~.view.view_spec`) and the key partitions of ``m``, once per manifest read."""
        cached = getattr(self, "_layout_of", None)
        if cached is None or cached[0] is not m:
            spec = view_spec(m, related=[mm for _, mm in self.stage_manifests().values()])
            cached = self._layout_of = (m, spec, self._key_partitions(m))
        return cached[1], cached[2]

    def _key_partitions(self, m: Manifest) -> int:
        return partials.partition_count(m.rows, int(self.config.get("ids_per_pass") or IDS_PER_PASS))

    def _unit_shards(self, unit: UnitEntry) -> tuple[list[ShardEntry], dict[str, Any], int]:
        """The shards of part ``unit`` with the view's layout and the key partitions: from the pages of its
        block of the input manifest in a task that planned from its slice, else from the manifest read whole."""
        part = getattr(self, "_part", None)
        if part is not None:
            head, pages, spec, parts = part
            block = _shard_range(unit, pages)
            if block is not None:
                return head.shards_at(block), spec, parts
        m = self.input_manifest()
        spec, parts = self._layout(m)
        block = _shard_range(unit, _pages_ident(ManifestHead.read(self.input_manifest_uri)))
        if block is None:
            units = self.plan()
            block = _shard_range(units[[u.unit_id for u in units].index(unit.unit_id)], None)
        return m.shards[block.start : block.stop], spec, parts

    def keys_uri(self, unit_id: str, kind: str) -> str:
        """Where part ``unit_id`` leaves its ``kind`` keys (ids, clusters) for the merge."""
        return self.lake.path("_work", "validate", self.fingerprint, f"{unit_id}.{kind}.parquet")

    def verify_inputs(self, m: Manifest, idx: list[int] | None = None) -> None:
        """Re-hash every shard and attrs file the view reads (of the shards ``idx``) against the checksums
        ``m`` recorded (:class:`~airflow_curation.core.integrity.IntegrityError` names the first that differs):
        a verdict is reached, or reused, only over the bytes the stages wrote. One streamed pass per file, on
        ``threads`` threads."""
        self._verify_shards(m.shards if idx is None else [m.shards[i] for i in idx])

    def _verify_shards(self, shards: list[ShardEntry]) -> None:
        threads = int(self.config.get("threads") or cpu_count())
        verify_files((f for s in shards for f in shard_files(s)), threads)

    def reusable(self, unit: UnitEntry, record: CheckpointRecord) -> bool:
        """A part stands only while the files it read are unchanged (its checkpoint matches the manifests'
        checksums, not the files) and its keys are still there for the merge. Checked once per run: the
        record then says so, so that the collect step does not read every file again."""
        if record.extra.get("verified_in") == self.run_id:
            return True
        try:
            self._verify_shards(self._unit_shards(unit)[0])
        except IntegrityError as e:
            log.warning("validate: not reusing part %s: %s", unit.unit_id, e)
            return False
        if self.config["query_engine"] == "duckdb" and not all(
            storage.exists(self.keys_uri(unit.unit_id, kind)) for kind in record.extra.get("keys", [])
        ):
            m = self.input_manifest()
            verdict = self._verdict_store().is_done(
                UNIT_ID, self._verdict_checksum(m, self.declared_checks()), self.fingerprint
            )
            if verdict is None:
                return False  # its keys were merged and removed, and that verdict is not this run's to reuse
        self.checkpoints.commit(replace(record, extra={**record.extra, "verified_in": self.run_id}))
        return True

    def process_unit(self, unit: UnitEntry) -> UnitResult:
        shards, spec, parts = self._unit_shards(unit)
        self._verify_shards(shards)
        extra: dict[str, Any] = {"verified_in": self.run_id}
        if self.config["query_engine"] == "duckdb":
            # The part's own shards, laid out as the whole view: its counts are what the whole view's
            # query over them gives, whichever task runs it.
            view = CuratedView.from_shards(shards, spec)
            with limits.scratch(self.config) as bounds, tempfile.TemporaryDirectory(dir=bounds.temp_dir) as tmp:
                engine = make_engine(view, self.config, bounds, views=False)
                try:
                    keys = {kind: os.path.join(tmp, f"{kind}.parquet") for kind in ("ids", "clusters")}
                    extra["partial"] = engine.partial(list(range(len(shards))), parts, keys)
                finally:
                    engine.close()
                extra["keys"] = [k for k, path in keys.items() if os.path.exists(path)]
                for kind in extra["keys"]:
                    with open(keys[kind], "rb") as src, storage.atomic_open(self.keys_uri(unit.unit_id, kind)) as dst:
                        shutil.copyfileobj(src, dst, 8 << 20)
        acc = RowAccounting()
        acc.keep(sum(s.rows for s in shards))
        return UnitResult(
            outputs=[ShardEntry(**{**s.__dict__, "attrs": dict(s.attrs)}) for s in shards], accounting=acc, extra=extra
        )

    def _verdict_store(self):
        """The merge's record (the verdict and its report), beside the parts' checkpoints."""
        return CheckpointStore(storage.join(self.checkpoints.directory, "_verdict"), self.checkpoints.root)

    def _verdict(self, m: Manifest, checksum: str) -> dict[str, Any]:
        """The merge: the parts' counts added, the keys counted across them, the signals' statistics, the
        checks, the report; recorded as the verdict of ``checksum``."""
        started = time.time()
        manifests = self.stage_manifests()
        view = CuratedView.from_manifest(m, related=[mm for _, mm in manifests.values()])
        declared = self.declared_checks()
        curated = checks_mod.curated_signal_columns(declared, view)
        units = self.plan()
        with limits.scratch(self.config) as bounds:
            engine = make_engine(view, self.config, bounds)
            try:
                if self.config["query_engine"] == "duckdb":
                    records = [self.checkpoints.load(u.unit_id) for u in units]
                    if any(r is None or "partial" not in r.extra for r in records):
                        raise RuntimeError("validate: a part has no checkpoint with its counts; run the parts first")
                    kinds = records[0].extra.get("keys", [])
                    uris = {k: [self.keys_uri(u.unit_id, k) for u in units] for k in kinds}
                    metrics = engine.finish(
                        partials.merge([r.extra["partial"] for r in records]),
                        partials.distinct_ids(uris["ids"], engine.threads),
                        partials.cluster_sizes(uris["clusters"], engine.threads) if "clusters" in uris else None,
                        curated,
                    )
                else:
                    metrics = engine.metrics(curated_signals=curated)
                fault_point("validate.during_query")  # the engine is open, the checks' queries still to run
                ctx = checks_mod.Context(
                    view=view,
                    metrics=metrics,
                    manifests={k: v[1] for k, v in manifests.items()},
                    input_manifest=m,
                    engine=engine,
                    timeout_s=bounds.timeout_s,
                )
                results = checks_mod.run_checks(declared, ctx)
            finally:
                engine.close()
        # What the run delivers first (the funnel's last step, by the stage's name), then the checks.
        summary = f"{curated_sentence(metrics['funnel'])}; {checks_mod.summary(results)}"
        log.info("validate: %s", summary)
        report = build_report(
            lake=self.lake,
            run_id=self.run_id,
            input_manifest_uri=self.input_manifest_uri,
            manifests=manifests,
            metrics=_json_safe(metrics),
            checks=_json_safe([r.to_dict() for r in results]),
            summary=summary,
            columns=view.columns_by_stage(),
            seconds=time.time() - started,
            run_context=self.config.get("run_context"),
        )
        fault_point("validate.before_report")
        json_uri, html_uri = write_report(report, self.lake, self.run_id)
        log.info("validate: report %s", html_uri)
        extra = {
            "status": report["status"],
            "summary": summary,
            "failed_checks": [r.name for r in results if r.status == "fail"],
            "report_json": json_uri,
            "report_html": html_uri,
            "funnel": metrics["funnel"],
            "query_engine": metrics["query_engine"],
            "run_id": self.run_id,
        }
        self._verdict_store().commit(
            CheckpointRecord(
                unit_id=UNIT_ID,
                stage=self.name,
                fingerprint=self.fingerprint,
                input_checksum=checksum,
                started_at=started,
                extra=extra,
            )
        )
        for u in units:  # merged: the keys are not needed again (a rerun reuses the verdict)
            for kind in ("ids", "clusters"):
                storage.remove(self.keys_uri(u.unit_id, kind))
        return extra

    def _rerun(self, m: Manifest, checksum: str) -> dict[str, Any]:
        """The verdict again, from here: first the parts whose keys the last merge removed."""
        if self.config["query_engine"] == "duckdb":
            for u in self.plan():
                rec = self.checkpoints.load(u.unit_id)
                kinds = rec.extra.get("keys", []) if rec else []
                if rec is None or not kinds or not all(storage.exists(self.keys_uri(u.unit_id, k)) for k in kinds):
                    status, payload = _attempt_unit(self, u, int(self.config.get("max_attempts", 2)))
                    if status != "done":
                        raise RuntimeError(f"validate: part {u.unit_id} failed again: {payload['error']}")
        return self._verdict(m, checksum)

    def collect(self, manifest: Manifest) -> None:
        storage.remove(self._plan_uri())  # every part is done: no task plans from it again
        m = self.input_manifest()
        checksum = self._verdict_checksum(m, self.declared_checks())
        rec = self._verdict_store().is_done(UNIT_ID, checksum, self.fingerprint)
        json_uri, html_uri = report_uris(self.lake, self.run_id)
        if rec is None:
            extra = self._verdict(m, checksum)
        else:
            extra = rec.extra
            if extra.get("report_json") and extra["report_json"] != json_uri:
                extra = self._report_reused_verdict(extra, m, checksum)
        manifest.config = {
            **manifest.config,
            "report_json": json_uri,
            "report_html": html_uri,
            "validation": extra.get("status"),
        }
        if extra.get("status") == "failed" and self.config.get("fail_on_error", True):
            manifest.status = "failed"
            manifest.write(self.manifest_uri)
            raise checks_mod.ValidationFailed(
                f"validation of {self.lake.dataset}"
                f"{'/snapshot=' + self.lake.snapshot if self.lake.snapshot else ''} failed: "
                f"{extra.get('summary')}\nreport: {html_uri}"
            )

    def _report_reused_verdict(self, extra: dict[str, Any], m: Manifest, checksum: str) -> dict[str, Any]:
        """This run found another run's verdict (same shards, manifests and checks): it still gets a
        report of its own (its run id, manifests and params), with that run's metrics and checks and a
        line saying whose verdict it is. A verdict whose report is gone is computed again (its parts' keys
        are gone too: the parts run again first)."""
        src_uri = extra["report_json"]
        try:
            src = storage.read_json(src_uri)
        except (FileNotFoundError, ValueError) as e:
            log.warning("validate: the reused verdict's report %s is unreadable (%s): checking again", src_uri, e)
            return self._rerun(m, checksum)
        verdict_of = src.get("verdict_of") or {
            "run_id": src["run_id"],
            "created_at": src["created_at"],
            "report": src_uri,
        }
        log.info(
            "validate: %s (verdict of run %s: same shards, manifests and checks)", src["summary"], verdict_of["run_id"]
        )
        report = build_report(
            lake=self.lake,
            run_id=self.run_id,
            input_manifest_uri=self.input_manifest_uri,
            manifests=self.stage_manifests(),
            metrics=src["metrics"],
            checks=src["checks"],
            summary=src["summary"],
            columns=src.get("columns", {}),
            seconds=src.get("seconds", 0.0),
            run_context=self.config.get("run_context"),
            verdict_of=verdict_of,
        )
        write_report(report, self.lake, self.run_id)
        return extra


_RANGE = "#shards="


def _pages_ident(head: ManifestHead) -> str | None:
    """What names the input's shard list as written (its pages' checksums, which its head records); None for
    a format-1 manifest (no pages)."""
    meta = head.data["index"].get("shards") or {}
    if "checksums" not in meta:
        return None
    return _xxh("|".join([str(meta["count"]), *meta["checksums"]]))


def _range_ref(uri: str, idx: list[int], pages: str | None) -> str:
    """A part's block of the input's shards, as a unit input: ``<manifest>#shards=<start>:<stop>:<pages>``."""
    return f"{uri}{_RANGE}{idx[0]}:{idx[-1] + 1}:{pages or ''}"


def _shard_range(unit: UnitEntry, pages: str | None) -> range | None:
    """The block of the input's shards part ``unit`` reads, where it was planned from the input whose shard
    pages are ``pages`` (None: any), else None."""
    for ref in unit.inputs[1:]:
        if _RANGE in ref:
            start, stop, planned = ref.rsplit(_RANGE, 1)[1].split(":", 2)
            if pages is None or planned == pages:
                return range(int(start), int(stop))
    return None


def _shard_key(s: ShardEntry) -> tuple:
    return (s.shard_id, s.checksum, s.rows, sorted(s.attrs.items()), sorted(s.attrs_checksums.items()))


def _xxh(payload: str) -> str:
    return f"xxh64:{xxhash.xxh64(payload.encode()).hexdigest()}"


def _json_safe(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        try:
            return finite(x.item())
        except (AttributeError, ValueError):
            pass
    return finite(x)


def curated_sentence(funnel: list[dict[str, Any]]) -> str:
    """``1,234 curated rows of 2,000 ingested (after pii scanned)``: the funnel's last step against its first."""
    first, last = funnel[0], funnel[-1]
    return f"{last['rows']:,} curated rows of {first['rows']:,} ingested (after {last['label']})"
