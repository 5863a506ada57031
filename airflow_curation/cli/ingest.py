"""``curation ingest``: raw JSONL / Parquet / text into shards of a lake."""

from __future__ import annotations

import argparse

from airflow_curation.cli.common import add_lake_args, lake_from_args, parse_size, print_summary, run_id_from_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "ingest", help="turn raw JSONL(.gz/.zst), Parquet or text files into zstd Parquet shards",
        description="Read inputs (files, folders or globs; local or fsspec URLs), quarantine what cannot be "
                    "read, and write shards plus a manifest and per-unit checkpoints. A rerun with the same "
                    "inputs and settings does no work.")
    p.add_argument("inputs", nargs="+", metavar="INPUT")
    add_lake_args(p)
    p.add_argument("--format", default="auto", choices=["auto", "jsonl", "parquet", "text"])
    p.add_argument("--text-field", default="text", help="field or column holding the text (default: text)")
    p.add_argument("--id-field", help="field holding your own unique ids (default: derived from file and position)")
    p.add_argument("--text-mode", default="file", choices=["file", "line"], help="text files: one document per file or per line")
    p.add_argument("--input-root", help="ids and source are relative to this (default: common folder of the inputs)")
    p.add_argument("--target-shard-size", type=parse_size, default="512MiB", help="default 512MiB")
    p.add_argument("--row-group-rows", type=int, default=4096)
    p.add_argument("--max-text-size", type=parse_size, default="32MiB",
                   help="larger documents are quarantined as text_too_large (default 32MiB)")
    p.add_argument("--max-failed-fraction", type=float, default=0.0,
                   help="fraction of units allowed to fail before the run fails (default 0)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from airflow_curation.jobs import run_spec
    from airflow_curation.jobs.spec import JobSpec

    config = {
        "inputs": args.inputs, "format": args.format, "text_field": args.text_field, "id_field": args.id_field,
        "text_mode": args.text_mode, "input_root": args.input_root, "target_shard_bytes": args.target_shard_size,
        "row_group_rows": args.row_group_rows, "max_text_bytes": args.max_text_size, "workers": args.workers,
        "max_failed_fraction": args.max_failed_fraction,
    }
    spec = JobSpec(stage="ingest", lake=lake_from_args(args).to_dict(), run_id=run_id_from_args(args), config=config)
    print_summary(run_spec(spec))
    return 0
