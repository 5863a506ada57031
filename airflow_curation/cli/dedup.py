"""``curation dedup``: global exact and near dedup, on a lake or on plain Parquet files.

Plain files::

    curation dedup a.parquet b.parquet --output DIR [--threshold 0.8 --num-perm 128 --ngram 5 --verify]

writes ``DIR/a.parquet`` and ``DIR/b.parquet`` with ``id``, ``cluster_id`` (shared by the members of a
duplicate cluster), ``is_duplicate`` (true for every member but the keeper), ``exact_duplicate`` and
``near_duplicate``. On a lake::

    curation dedup --lake L --dataset D --input-manifest L/D/_manifests/RUN/preprocess.json
"""

from __future__ import annotations

import argparse

from airflow_curation.cli.common import files_or_lake, parse_size, print_summary, run_id_from_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dedup", help="global exact + MinHash-LSH near dedup (lake or plain Parquet files)",
        description="Find exact (normalised content) and near (MinHash-LSH, Jaccard >= threshold) duplicates "
                    "across all inputs and write cluster_id / is_duplicate per row: attrs/dedup/ in a lake, "
                    "or DIR/<file>.parquet for plain Parquet inputs with id and text columns.")
    p.add_argument("files", nargs="*", metavar="FILE", help="plain Parquet files with id and text columns")
    p.add_argument("--output", help="plain files: folder for the results")
    p.add_argument("--lake", help="lake root (instead of FILEs)")
    p.add_argument("--dataset", help="dataset name inside the lake")
    p.add_argument("--snapshot", help="snapshot partition")
    p.add_argument("--input-manifest", help="lake: the upstream stage's manifest URI (default: the newest complete preprocess or ingest manifest)")
    p.add_argument("--run-id", help="names the manifest; default: cli-<timestamp>")
    p.add_argument("--workers", type=int, default=1, help="parallel worker processes (default 1)")
    p.add_argument("--engine", choices=["local", "dask"], default="local")
    p.add_argument("--threshold", type=float, default=0.8, help="Jaccard similarity of near duplicates")
    p.add_argument("--num-perm", type=int, default=128, help="MinHash permutations")
    p.add_argument("--ngram", type=int, default=5, help="tokens per shingle")
    p.add_argument("--tokenizer", choices=["word", "space", "char"], default="word")
    p.add_argument("--bands", type=int, help="LSH bands (default: derived from threshold)")
    p.add_argument("--rows", type=int, help="LSH rows per band (with --bands)")
    p.add_argument("--verify", action="store_true", help="check candidates by exact Jaccard")
    p.add_argument("--no-exact", action="store_true", help="skip exact dedup")
    p.add_argument("--no-near", action="store_true", help="skip near dedup")
    p.add_argument("--all-rows", action="store_true", help="also consider rows preprocess dropped")
    p.add_argument("--memory-budget", type=parse_size, default=1 << 30,
                   help="memory for one partition of the global phase, e.g. 512MB (default 1GiB)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from airflow_curation.jobs import run_spec
    from airflow_curation.jobs.spec import JobSpec

    config = {
        "threshold": args.threshold, "num_perm": args.num_perm, "ngram": args.ngram, "tokenizer": args.tokenizer,
        "bands": args.bands, "rows": args.rows, "verify": args.verify, "exact": not args.no_exact,
        "near": not args.no_near, "only_kept": not args.all_rows, "memory_budget": args.memory_budget,
        "engine": args.engine, "workers": args.workers,
    }
    lake, source = files_or_lake(args, "dedup", ["preprocess", "ingest"])
    config.update(source)
    spec = JobSpec(stage="dedup", lake=lake.to_dict(), run_id=run_id_from_args(args), config=config)
    print_summary(run_spec(spec))
    return 0
