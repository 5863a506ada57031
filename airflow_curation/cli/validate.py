"""``curation validate``: run the declared checks over a run's curated view and write its report."""

from __future__ import annotations

import argparse
import sys

from airflow_curation.cli.common import add_lake_args, lake_from_args, print_summary, run_id_from_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="check a run's curated view and write its report (JSON + HTML)")
    add_lake_args(p)
    p.add_argument("--input-manifest",
                   help="manifest of the last stage to validate (default: the newest complete enrich, dedup, "
                        "preprocess or ingest manifest)")
    p.add_argument("--checks", help="YAML or JSON file of declared checks (see docs/validate.md)")
    p.add_argument("--engine", choices=["duckdb", "daft"], default="duckdb")
    p.add_argument("--daft-runner", choices=["native", "ray"], default="native")
    p.add_argument("--ray-address", help="Ray cluster for --daft-runner ray (default: a local Ray)")
    p.add_argument("--min-rows", type=int, default=1, help="fewest curated rows allowed (default 1)")
    p.add_argument("--max-null-rate", type=float, default=0.0, help="for id and text (default 0)")
    p.add_argument("--max-duplicate-rate", type=float, help="highest duplicate rate allowed")
    p.add_argument("--min-kept-fraction", type=float, help="smallest curated/all ratio allowed")
    p.add_argument("--threads", type=int, help="DuckDB threads")
    p.add_argument("--memory-limit", help="DuckDB memory limit, e.g. 4GB (it spills beyond)")
    p.add_argument("--warn-only", action="store_true", help="report failed checks but exit 0")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from airflow_curation.stages.base import StageFailed, StageRunner
    from airflow_curation.stages.validate import ValidateStage, ValidationFailed
    from airflow_curation.stages.validate.report import report_uris

    from airflow_curation.core.manifest import latest_manifest

    lake, run_id = lake_from_args(args), run_id_from_args(args)
    manifest = args.input_manifest or latest_manifest(lake, ["enrich", "dedup", "preprocess", "ingest"])
    if not manifest:
        print(f"curation validate: no complete manifest under {lake.path('_manifests')}; run a stage first "
              f"or give --input-manifest", file=sys.stderr)
        return 2
    config = {"input_manifest": manifest, "engine": args.engine, "daft_runner": args.daft_runner,
              "min_rows": args.min_rows, "max_null_rate": args.max_null_rate,
              "max_duplicate_rate": args.max_duplicate_rate, "min_kept_fraction": args.min_kept_fraction,
              "fail_on_error": not args.warn_only}
    if args.checks:
        config["checks_file"] = args.checks
    for key in ("threads", "memory_limit", "ray_address"):
        if getattr(args, key):
            config[key] = getattr(args, key)
    stage = ValidateStage(lake, config, run_id)
    json_uri, html_uri = report_uris(lake, run_id)
    try:
        manifest = StageRunner(stage).run()
    except (ValidationFailed, StageFailed) as e:
        print(str(e), file=sys.stderr)
        return 1
    rec = stage.checkpoints.load("validate")
    print((rec.extra.get("summary") if rec else "") or "", file=sys.stderr)
    print_summary({**manifest.summary(stage.manifest_uri), "status": manifest.config.get("validation"),
                   "report_json": json_uri, "report_html": html_uri})
    return 0
