"""Gate a curation run on declared checks and publish its report (``stages/validate``)."""

from __future__ import annotations

from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from airflow_curation.backends import JobState
from airflow_curation.core import storage
from airflow_curation.core.layout import Lake
from airflow_curation.links.curation import CurationReportLink
from airflow_curation.operators.base import CurationStageOperator, summary_of
from airflow_curation.operators.lineage import ol_name as _ol_name

REPORT_XCOM_KEY = "curation_report"


class ValidateOperator(CurationStageOperator):
    """Run the validate stage: declared checks over the curated view, then the curation report.

    A failed check fails the task without retries (the data, not the machine, is wrong) and the
    message is the checks' summary. The report is pushed to XCom (``curation_report``) and linked
    from the task ("Curation report") and from the run's page (the ``curation`` UI plugin).

    :param input_manifest: manifest of the last stage to validate; default: the ``manifest_uri`` that
        ``input_task_id`` returned.
    :param input_task_id: the upstream stage task whose manifest to validate; a list: the first of these
        tasks that succeeded in the run (``["enrich.checkpoints", "pii.checkpoints"]``: enrich's output
        when enrich ran), so that a skipped task is never pulled from.
    :param checks: check dicts (or YAML text); see ``docs/validate.md``.
    :param checks_file: URL of a YAML/JSON file of checks.
    :param query_engine: ``duckdb`` (in process, default) or ``daft`` (``config={"daft_runner": "ray"}`` for a
        Ray cluster).
    :param min_rows: fewest curated rows allowed (default 1).
    :param max_null_rate: highest null rate of ``id`` and ``text`` (default 0).
    :param max_duplicate_rate: highest duplicate rate (None: not checked).
    :param min_kept_fraction: smallest share of rows that survive curation (None: not checked).
    :param signal_bounds: ``{column: {"stat": "mean", "min": .., "max": ..}}``.
    """

    stage = "validate"
    # input_manifest is resolved by build_config (from input_task_id when empty), not passed as a setting.
    airflow_params = ("input_manifest", "input_task_id")
    renamed_params = {"engine": "query_engine"}
    operator_extra_links = (*CurationStageOperator.operator_extra_links, CurationReportLink())
    ui_color = "#fdf1d6"

    def __init__(
        self,
        *,
        input_manifest: str | None = None,
        input_task_id: str | list[str] | None = None,
        checks: list[dict[str, Any]] | str | None = None,
        checks_file: str | None = None,
        query_engine: str | None = None,
        min_rows: int | str | None = None,
        max_null_rate: float | str | None = None,
        max_duplicate_rate: float | str | None = None,
        min_kept_fraction: float | str | None = None,
        signal_bounds: dict[str, dict[str, Any]] | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.input_manifest = input_manifest
        self.input_task_id = input_task_id
        self.checks = checks
        self.checks_file = checks_file
        self.query_engine = query_engine
        self.min_rows = min_rows
        self.max_null_rate = max_null_rate
        self.max_duplicate_rate = max_duplicate_rate
        self.min_kept_fraction = min_kept_fraction
        self.signal_bounds = signal_bounds

    def build_config(self, context: Any) -> dict[str, Any]:
        manifest = self.input_manifest
        if not manifest and self.input_task_id:
            manifest = _upstream_manifest(context["ti"], self.input_task_id)
        if not manifest:
            raise AirflowFailException(
                f"{self.task_id}: no manifest to validate (input_manifest empty, and no "
                f"upstream task of {self.input_task_id!r} succeeded with one)"
            )
        return {**super().build_config(context), "input_manifest": manifest}

    def execute(self, context: Any) -> dict[str, Any]:
        self._context = context
        return super().execute(context)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        self._context = context
        return super().execute_complete(context, event)

    def get_job_status(self, external_id: dict[str, Any], context: Any) -> str:
        """A retry (Airflow may mark a finished deferred task up for retry) finding its job failed on the
        checks takes that stored verdict, report and all, instead of submitting the job again: the data,
        not the machine, failed. Any other failure is resubmitted, as a retry is for."""
        state = super().get_job_status(external_id, context)
        if state == JobState.FAILED.value:
            handle = self._handle or external_id
            status = self._backend.status(handle)
            if self._checks_failed(status.message, status.result) and self._report(handle)[0] is not None:
                self.log.info(
                    "Job %s failed its checks: taking its verdict, not submitting again", handle.get("job_id")
                )
                self._context = context
                self._finish(state, status.message, status.result, handle)  # raises AirflowFailException
        return state

    @staticmethod
    def _checks_failed(message: str, result: dict[str, Any] | None) -> bool:
        return any("ValidationFailed" in str(m) for m in (message, (result or {}).get("error")))

    def _report(self, handle: dict[str, Any]) -> tuple[dict[str, Any] | None, str, str]:
        manifest_uri = handle.get("manifest_uri") or ""
        base = manifest_uri.rsplit("/", 1)[0]
        json_uri, html_uri = storage.join(base, "report.json"), storage.join(base, "report.html")
        try:
            return storage.read_json(json_uri), json_uri, html_uri
        except (FileNotFoundError, ValueError):
            return None, json_uri, html_uri

    def _finish(
        self, state: str, message: str, result: dict[str, Any] | None, handle: dict[str, Any]
    ) -> dict[str, Any]:
        report, json_uri, html_uri = self._report(handle)
        context = getattr(self, "_context", None)
        checks_failed = self._checks_failed(message, result)
        # Only a report this job wrote counts: a job that crashed may have left an older one behind.
        fresh = report is not None and (state == JobState.SUCCEEDED.value or checks_failed)
        if fresh and context is not None:
            context["ti"].xcom_push(
                key=REPORT_XCOM_KEY,
                value={
                    "json": json_uri,
                    "html": html_uri,
                    "status": report["status"],
                    "summary": report["summary"],
                    "dataset": report["dataset"],
                    "snapshot": report.get("snapshot"),
                },
            )
            CurationReportLink.persist(context, html_uri)
            self._emit_metrics(report)
        if fresh and checks_failed and report["status"] == "failed":
            # The data failed its checks: retrying cannot help, so fail without retries.
            raise AirflowFailException(
                f"curation checks failed for {report['dataset']}"
                f"{'/snapshot=' + report['snapshot'] if report.get('snapshot') else ''}"
                f"\n{report['summary']}\nreport: {html_uri}"
            )
        summary = super()._finish(state, message, result, handle)  # raises on any other failure
        summary = {
            **summary_of(result),
            **summary,
            **(_curated(report) if fresh else {}),
            "report_json": json_uri,
            "report_html": html_uri,
            "validation": report["status"] if fresh else None,
        }
        if fresh:
            self.log.info("%s", _curated_line(report))
        if fresh and context is not None:
            self._mark_outlets(context, report)
        return summary

    def _emit_metrics(self, report: dict[str, Any]) -> None:
        """Rows kept and dropped, shards done and failed and stage seconds, per stage, through Stats."""
        from airflow.sdk.observability.stats import Stats

        tags = {"dataset": report["dataset"]}
        for stage, s in report.get("stages", {}).items():
            acc = s.get("accounting") or {}
            stage_tags = {**tags, "stage": stage}
            Stats.gauge(f"curation.{stage}.rows_kept", acc.get("kept", 0), tags=stage_tags)
            Stats.gauge(f"curation.{stage}.rows_dropped", sum((acc.get("dropped") or {}).values()), tags=stage_tags)
            Stats.gauge(f"curation.{stage}.shards_done", s["units"]["done"], tags=stage_tags)
            Stats.gauge(f"curation.{stage}.shards_failed", s["units"]["failed"], tags=stage_tags)
            Stats.timing(f"curation.{stage}.stage_seconds", float(s["seconds"]["total"]) * 1000.0, tags=stage_tags)
        failed = sum(c["status"] == "fail" for c in report["checks"])
        Stats.gauge("curation.validate.checks_failed", failed, tags=tags)
        Stats.gauge("curation.validate.curated_rows", report["metrics"]["funnel"][-1]["rows"], tags=tags)

    def _mark_outlets(self, context: Any, report: dict[str, Any]) -> None:
        """One asset event per run, with the snapshot and what it holds. An :class:`AssetAlias` outlet gets
        the event on the Asset of the lake and dataset this run wrote (:func:`curated_asset`), resolved
        now, not when the DAG was parsed; a plain Asset outlet gets the extra."""
        from airflow.sdk import AssetAlias

        events = context.get("outlet_events")
        if events is None:
            return
        funnel = report["metrics"]["funnel"]
        lake = report.get("lake", {}).get("root", "")
        extra = {
            "dataset": report["dataset"],
            "snapshot": report.get("snapshot"),
            "curated_rows": funnel[-1]["rows"],
            "curated_bytes": funnel[-1]["bytes"],
            "lake": lake,
        }
        for outlet in self.outlets or []:
            try:
                if isinstance(outlet, AssetAlias):
                    events[outlet].add(curated_asset(lake, report["dataset"]), extra=extra)
                else:
                    events[outlet].extra = extra
            except (KeyError, TypeError, AttributeError):
                continue

    # -- OpenLineage (used only when apache-airflow-providers-openlineage is installed) ------------
    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Input: the curated view (the lake partition) with the checks as data-quality assertions and
        the row, byte and null counts as data-quality metrics; output: the report."""
        from airflow.providers.common.compat.openlineage.facet import InputDataset, OutputDataset
        from airflow.providers.openlineage.extractors import OperatorLineage
        from openlineage.client.facet_v2 import data_quality_assertions_dataset as dqa
        from openlineage.client.facet_v2 import data_quality_metrics_input_dataset as dqm

        value = task_instance.xcom_pull(task_ids=task_instance.task_id, key=REPORT_XCOM_KEY) or {}
        try:
            with storage.using(self._settings().storage):
                report = storage.read_json(value["json"])
        except (KeyError, FileNotFoundError, ValueError, TypeError):
            return OperatorLineage()
        lake = Lake.from_dict(report["lake"])
        namespace, name = _ol_name(lake.base)
        metrics = report["metrics"]
        facets = {
            "dataQualityAssertions": dqa.DataQualityAssertionsDatasetFacet(
                assertions=[
                    dqa.Assertion(
                        assertion=c["type"],
                        name=c["name"],
                        success=c["status"] != "fail",
                        severity=c["severity"],
                        expected=str(c["expected"]),
                        actual=str(c["observed"]),
                    )
                    for c in report["checks"]
                ]
            )
        }
        input_facets = {
            "dataQualityMetrics": dqm.DataQualityMetricsInputDatasetFacet(
                rowCount=metrics["rows"],
                bytes=metrics["text_bytes"],
                columnMetrics={col: dqm.ColumnMetrics(nullCount=n) for col, n in metrics["null_counts"].items()},
            )
        }
        out_ns, out_name = _ol_name(value["html"])
        return OperatorLineage(
            inputs=[InputDataset(namespace=namespace, name=name, facets=facets, inputFacets=input_facets)],
            outputs=[OutputDataset(namespace=out_ns, name=out_name)],
        )


def curated_asset(lake: str, dataset: str):
    """The Asset a curation DAG updates, so downstream DAGs can schedule on the curated dataset.

    :param lake: the lake root (a folder or ``s3://...``).
    :param dataset: the dataset's name in the lake.
    :return: an Asset named and addressed by ``<lake>/<dataset>`` (``file://`` for a folder).
    """
    from airflow.sdk import Asset

    uri = storage.join(lake, dataset)
    if "://" not in uri:
        uri = f"file://{uri}"
    return Asset(name=uri, uri=uri, group="curation")


def _upstream_manifest(ti: Any, task_ids: str | list[str]) -> str | None:
    """The ``manifest_uri`` of the upstream task (or of the first of several that succeeded)."""
    if isinstance(task_ids, str):
        candidates = [task_ids]
    else:
        states = ti.get_task_states(dag_id=ti.dag_id, task_ids=list(task_ids), run_ids=[ti.run_id])
        run_states = states.get(ti.run_id, {})
        candidates = [t for t in task_ids if run_states.get(t) == "success"][:1]
    for task_id in candidates:
        pulled = ti.xcom_pull(task_ids=task_id)
        if isinstance(pulled, dict) and pulled.get("manifest_uri"):
            return pulled["manifest_uri"]
    return None


def _curated(report: dict[str, Any]) -> dict[str, Any]:
    """What the run delivers (the funnel's last step), beside ``rows``: the rows validate read."""
    last = report["metrics"]["funnel"][-1]
    return {"curated_rows": last["rows"], "curated_bytes": last.get("bytes"), "curated_by": last["label"]}


def _curated_line(report: dict[str, Any]) -> str:
    funnel = report["metrics"]["funnel"]
    first, last = funnel[0], funnel[-1]
    share = f" ({last['rows'] / first['rows']:.1%})" if first["rows"] else ""
    steps = " -> ".join(f"{f['label']} {f['rows']:,}" for f in funnel)
    return f"validate {report['status']}: {last['rows']:,} curated rows of {first['rows']:,} ingested{share}: {steps}"
