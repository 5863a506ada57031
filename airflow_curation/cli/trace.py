"""``curation trace``: the source documents of one written training sequence (docs/export.md)."""

from __future__ import annotations

import argparse
import json

from airflow_curation.cli.common import add_lake_args, lake_from_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "trace", help="name the documents (ids, input files, lines/rows/records) a written training sequence came from"
    )
    add_lake_args(p, required=False)
    p.add_argument("--manifest", help="the export run's manifest (default: the newest complete export of --dataset)")
    p.add_argument("--sequence", type=int, help="index of the sequence in the export's global order (any format)")
    p.add_argument("--bucket", type=int, help="or: the output file number (bucket)...")
    p.add_argument("--index", type=int, help="...and the sequence's index within that bucket's files")
    p.set_defaults(func=_trace)


def _trace(args: argparse.Namespace) -> int:
    from airflow_curation.core.manifest import latest_manifest
    from airflow_curation.stages.export.trace import trace

    if (args.sequence is None) == (args.bucket is None and args.index is None):
        raise SystemExit("curation trace: give --sequence N, or --bucket B --index I")
    manifest = args.manifest
    if not manifest:
        if not (args.lake and args.dataset):
            raise SystemExit("curation trace: give --manifest, or --lake and --dataset")
        manifest = latest_manifest(lake_from_args(args), ["export"])
        if not manifest:
            raise SystemExit(f"curation trace: no complete export manifest of dataset {args.dataset!r} in {args.lake}")
    try:
        traced = trace(manifest, sequence=args.sequence, bucket=args.bucket, index=args.index)
    except (IndexError, ValueError) as e:
        raise SystemExit(f"curation trace: {e}") from None
    print(json.dumps(traced.as_dict(), indent=1))
    return 0
