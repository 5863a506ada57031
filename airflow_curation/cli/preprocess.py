"""``curation preprocess``: quality signals and keep/drop columns, on a lake or on plain Parquet files.

On a lake (``--lake --dataset``) it runs the preprocess stage over an ingest manifest (``--input-manifest``,
default: the newest complete one) and writes ``attrs/preprocess/``. On plain files
(``curation preprocess FILE... --output DIR``) each Parquet file with ``id`` and ``text`` columns gives
``DIR/<name>.parquet`` with ``id``, the signal columns, ``keep`` and ``drop_reason``.
"""

from __future__ import annotations

import argparse
import json
import posixpath
import sys

from airflow_curation.cli.common import print_summary, run_id_from_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "preprocess", help="quality signals + keep/drop columns (gopher, c4, fineweb, code presets)",
        description="Compute per-document quality signals and apply filter rules. Lake mode writes "
                    "attrs/preprocess/<shard>.parquet per shard (checkpointed; reruns skip done shards). "
                    "File mode: curation preprocess FILE... --output DIR.")
    p.add_argument("files", nargs="*", metavar="FILE", help="plain Parquet files with id and text columns")
    p.add_argument("--output", help="file mode: folder for the results")
    p.add_argument("--lake", help="lake root (folder or fsspec URL)")
    p.add_argument("--dataset", help="dataset name inside the lake")
    p.add_argument("--snapshot", help="snapshot partition")
    p.add_argument("--run-id", help="names the manifest; default: cli-<timestamp>")
    p.add_argument("--input-manifest", help="upstream manifest URI (default: the newest complete ingest manifest)")
    p.add_argument("--preset", default="gopher",
                   help="filter preset(s), comma-separated: gopher, c4, fineweb, code, or none (default gopher)")
    p.add_argument("--rules", help="extra rules as a JSON list of {name, signal, min, max}")
    p.add_argument("--stop-words", help="comma-separated stop list (default: Gopher's 8 English words)")
    p.add_argument("--tokenizer", default="default", help="'default' or hf:<tokenizer.json> for n_tokens")
    p.add_argument("--code", choices=["auto", "true", "false"], default="auto",
                   help="code signals: auto = when a rule needs them (default)")
    p.add_argument("--code-language", default="auto", help="one language for all rows, or auto (by source extension)")
    p.add_argument("--batch-rows", type=int, default=4096)
    p.add_argument("--engine", choices=["dask", "local"], default="dask", help="lake mode: where shards run")
    p.add_argument("--scheduler-address", help="lake mode: an existing Dask scheduler")
    p.add_argument("--workers", type=int, help="at most this many workers (the memory plan may choose fewer)")
    p.add_argument("--max-failed-fraction", type=float, default=0.0)
    p.set_defaults(func=_run)


def _settings(args: argparse.Namespace) -> dict:
    signals: dict = {}
    if args.stop_words:
        signals["stop_words"] = [w for w in args.stop_words.split(",") if w]
    if args.tokenizer != "default":
        signals["tokenizer"] = args.tokenizer
    try:
        rules = json.loads(args.rules) if args.rules else []
    except json.JSONDecodeError as e:
        raise SystemExit(f"error: --rules is not JSON: {e}") from None
    code = {"auto": "auto", "true": True, "false": False}[args.code]
    return {"preset": args.preset, "rules": rules, "signals": signals, "code": code,
            "code_language": args.code_language}


def _run(args: argparse.Namespace) -> int:
    if args.files:
        if args.lake:
            print("error: give FILE... --output DIR, or --lake --dataset, not both", file=sys.stderr)
            return 2
        if not args.output:
            print("error: file mode needs --output DIR", file=sys.stderr)
            return 2
        return _run_files(args)
    if not (args.lake and args.dataset):
        print("error: give FILE... --output DIR, or --lake and --dataset", file=sys.stderr)
        return 2
    return _run_lake(args)


def _run_files(args: argparse.Namespace) -> int:
    from airflow_curation.core import storage
    from airflow_curation.core.accounting import RowAccounting
    from airflow_curation.stages.preprocess.stage import Preprocessor

    pre = Preprocessor(**_settings(args))
    total = RowAccounting()
    outputs = []
    names = set()
    for uri in args.files:
        stem = posixpath.basename(uri.rstrip("/"))
        stem = stem.removesuffix(".parquet")
        if stem in names:
            print(f"error: two inputs named {stem!r}: their outputs would collide", file=sys.stderr)
            return 2
        names.add(stem)
        out = storage.join(args.output, f"{stem}.parquet")
        try:
            acc, info = pre.run_file(uri, out, args.batch_rows)
        except (ValueError, OSError) as e:
            print(f"error: {uri}: {e}", file=sys.stderr)
            return 1
        acc.check(uri)
        total.merge(acc)
        outputs.append({"input": uri, "output": out, **acc.to_dict(), **info})
    print_summary({"outputs": outputs, "accounting": total.to_dict()})
    return 0


def _run_lake(args: argparse.Namespace) -> int:
    from airflow_curation.core.layout import Lake
    from airflow_curation.jobs import run_spec
    from airflow_curation.jobs.spec import JobSpec
    from airflow_curation.core.manifest import latest_manifest

    lake = Lake(root=args.lake, dataset=args.dataset, snapshot=args.snapshot)
    manifest = args.input_manifest or latest_manifest(lake, ["ingest"])
    if not manifest:
        print(f"error: no complete ingest manifest under {lake.path('_manifests')}; run curation ingest "
              f"first or give --input-manifest", file=sys.stderr)
        return 2
    config = {**_settings(args), "input_manifest": manifest, "batch_rows": args.batch_rows,
              "engine": args.engine, "max_failed_fraction": args.max_failed_fraction}
    if args.scheduler_address:
        config["scheduler_address"] = args.scheduler_address
    if args.workers:
        config["workers"] = args.workers
    spec = JobSpec(stage="preprocess", lake=lake.to_dict(), run_id=run_id_from_args(args), config=config)
    print_summary(run_spec(spec))
    return 0

