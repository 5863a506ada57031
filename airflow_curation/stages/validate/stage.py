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
import time
from typing import Any

from airflow_curation.core import storage
from airflow_curation.core.accounting import RowAccounting
from airflow_curation.core.checkpoint import CheckpointRecord
from airflow_curation.core.faults import fault_point
from airflow_curation.core.fingerprint import canonical_json
from airflow_curation.core.integrity import IntegrityError, shard_files, verify_files
from airflow_curation.core.manifest import Manifest, ManifestError, ShardEntry, UnitEntry
from airflow_curation.stages.base import Stage, UnitResult
from airflow_curation.stages.settings import Setting, anything, size
from airflow_curation.stages.validate import checks as checks_mod
from airflow_curation.stages.validate import limits
from airflow_curation.stages.validate.engines import finite, make_engine
from airflow_curation.stages.validate.report import build_report, report_uris, write_report
from airflow_curation.stages.validate.view import CuratedView

log = logging.getLogger(__name__)

UNIT_ID = "validate"


class ValidateStage(Stage):
    """Check a run's curated view and write its report (JSON + HTML).

    Runs the declared checks (and the default ones, whose thresholds are settings, so DAG params) over the
    shards joined with every stage's attrs, and fails when a check of severity error fails. See
    docs/validate.md.
    """

    name = "validate"
    # 2: sql checks run in the sandbox; a verdict reached without it is not reused. 3: metrics in bounded memory,
    # each shard joined with its own attrs files (a repeated id across shards no longer multiplies the rows)
    version = "3"
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
        Setting("min_rows", int, 1, "fewest curated rows allowed"),
        Setting("max_null_rate", float, 0.0, "highest null rate of id and text"),
        Setting("max_duplicate_rate", float, None, "highest duplicate rate allowed (default: not checked)"),
        Setting("min_kept_fraction", float, None, "smallest curated/all ratio allowed (default: not checked)"),
        Setting("signal_bounds", dict, {}, "JSON {column: {stat, min, max}}: bounds of signal statistics"),
        Setting("fail_on_error", bool, True, "fail when a check of severity error fails", off_flag="--warn-only"),
        Setting(
            "check_timeout_s",
            float,
            limits.DEFAULT_TIMEOUT_S,
            "seconds a sql check's query may run before it is stopped and the check fails (a check's timeout_s wins)",
            keep_old_fingerprint=True,
        ),
        Setting("threads", int, None, "DuckDB threads", runtime=True),
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
        ),
        Setting(
            "ids_per_pass",
            int,
            None,
            "DuckDB: ids per hash partition of the distinct-id and cluster counts (default 1000000; 0: one pass)",
            runtime=True,
        ),
        Setting("ray_address", str, None, "Ray cluster for daft_runner ray (default: a local Ray)", runtime=True),
        renamed={"engine": "query_engine"},
    )

    # --- inputs -----------------------------------------------------------------------------------

    @property
    def input_manifest_uri(self) -> str:
        uri = self.config.get("input_manifest")
        if not uri:
            raise ValueError("validate needs config['input_manifest'], the URI of the last stage's manifest")
        return uri

    def input_manifest(self) -> Manifest:
        m = Manifest.read(self.input_manifest_uri)
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
                    m = Manifest.read(uri)
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
        return checks_mod.default_checks(self.config) + declared

    # --- the stage --------------------------------------------------------------------------------

    def plan(self) -> list[UnitEntry]:
        m = self.input_manifest()
        checks = self.declared_checks()  # fail early on a malformed check, before any work
        checks_mod.refuse_unsafe_sql(checks, self.config["query_engine"])
        others = {st: (mm.fingerprint, mm.status, mm.accounting) for st, (_, mm) in self.stage_manifests().items()}
        payload = canonical_json(
            {
                "shards": [
                    (s.shard_id, s.checksum, s.rows, sorted(s.attrs.items()), sorted(s.attrs_checksums.items()))
                    for s in m.shards
                ],
                "manifests": others,
                "checks": checks,
            }
        )
        import xxhash

        return [
            UnitEntry(
                unit_id=UNIT_ID,
                inputs=[self.input_manifest_uri],
                input_checksum=f"xxh64:{xxhash.xxh64(payload.encode()).hexdigest()}",
            )
        ]

    def verify_inputs(self, m: Manifest) -> None:
        """Re-hash every shard and attrs file the view reads against the checksums ``m`` recorded
        (:class:`~airflow_curation.core.integrity.IntegrityError` names the first that differs): a verdict
        is reached, or reused, only over the bytes the stages wrote. One streamed pass per file, on
        ``threads`` threads."""
        threads = int(self.config.get("threads") or os.cpu_count() or 1)
        verify_files((f for s in m.shards for f in shard_files(s)), threads)

    def reusable(self, unit: UnitEntry, record: CheckpointRecord) -> bool:
        """An earlier verdict stands only while the files it judged are unchanged (its checkpoint matches the
        manifests' checksums, not the files)."""
        try:
            self.verify_inputs(self.input_manifest())
        except IntegrityError as e:
            log.warning("validate: not reusing the earlier verdict: %s", e)
            return False
        return True

    def process_unit(self, unit: UnitEntry) -> UnitResult:
        started = time.time()
        m = self.input_manifest()
        self.verify_inputs(m)
        manifests = self.stage_manifests()
        view = CuratedView.from_manifest(m, related=[mm for _, mm in manifests.values()])
        declared = self.declared_checks()
        with limits.scratch(self.config) as bounds:
            engine = make_engine(view, self.config, bounds)
            try:
                metrics = engine.metrics(curated_signals=checks_mod.curated_signal_columns(declared, view))
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
        summary = checks_mod.summary(results)
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
        acc = RowAccounting()
        acc.keep(metrics["rows"])
        failed = [r.name for r in results if r.status == "fail"]
        return UnitResult(
            outputs=[ShardEntry(**{**s.__dict__, "attrs": dict(s.attrs)}) for s in m.shards],
            accounting=acc,
            extra={
                "status": report["status"],
                "summary": summary,
                "failed_checks": failed,
                "report_json": json_uri,
                "report_html": html_uri,
                "funnel": metrics["funnel"],
                "query_engine": metrics["query_engine"],
            },
        )

    def collect(self, manifest: Manifest) -> None:
        rec = self.checkpoints.load(UNIT_ID)
        extra = rec.extra if rec else {}
        json_uri, html_uri = report_uris(self.lake, self.run_id)
        if extra.get("report_json") and extra["report_json"] != json_uri:
            self._report_reused_verdict(extra["report_json"])
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

    def _report_reused_verdict(self, src_uri: str) -> None:
        """This run found another run's checkpoint (same shards, manifests and checks): it still gets a
        report of its own (its run id, manifests and params), with that run's metrics and checks and a
        line saying whose verdict it is. A verdict whose report is gone is computed again."""
        try:
            src = storage.read_json(src_uri)
        except (FileNotFoundError, ValueError) as e:
            log.warning("validate: the reused verdict's report %s is unreadable (%s): checking again", src_uri, e)
            self.process_unit(self.plan()[0])
            return
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
