"""Options shared by the stage subcommands."""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid

from airflow_curation.core import storage
from airflow_curation.core.layout import Lake
from airflow_curation.stages import settings as settings_mod


def parse_size(text: str) -> int:
    """``512MB``, ``64KiB``, ``1e6``-free plain integers -> bytes (an argparse type)."""
    try:
        return settings_mod.parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_lake_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("--lake", required=required, help="lake root: a folder or an fsspec URL such as s3://bucket/lake")
    p.add_argument("--dataset", required=required, help="dataset name inside the lake")
    p.add_argument("--snapshot", help="snapshot partition, e.g. 2026-11-30")
    p.add_argument("--run-id", help="names the manifest; default: cli-<timestamp>")


def lake_from_args(args: argparse.Namespace) -> Lake:
    return Lake(root=args.lake, dataset=args.dataset, snapshot=args.snapshot)


def run_id_from_args(args: argparse.Namespace) -> str:
    return args.run_id or f"cli-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"


def print_summary(summary: dict) -> None:
    print(json.dumps(summary, indent=1, sort_keys=True))


def manifest_from_args(args: argparse.Namespace, command: str, lake: Lake, upstream: list[str]) -> str:
    """``--input-manifest``, or else the newest complete manifest of the ``upstream`` stages."""
    from airflow_curation.core.manifest import latest_manifest

    manifest = args.input_manifest or latest_manifest(lake, upstream)
    if not manifest:
        raise SystemExit(
            f"curation {command}: no complete {' or '.join(upstream)} manifest under "
            f"{lake.path('_manifests')}; run that stage first or give --input-manifest"
        )
    return manifest


def local_absolute(path: str) -> str:
    """A local folder as an absolute path (URLs as they are): the manifests keep it, and another process (a
    job on a worker or a Slurm node, ``curation trace`` from elsewhere) reads it from another folder."""
    return os.path.abspath(os.path.expanduser(storage.local_path(path))) if storage.is_local(path) else path


def files_or_lake(args: argparse.Namespace, command: str, upstream: list[str]) -> tuple[Lake, dict]:
    """Where a stage subcommand reads: plain Parquet FILEs (results in ``--output``), or a lake, from
    ``--input-manifest`` or else the newest complete manifest of the ``upstream`` stages.

    :returns: the lake the run writes to and the settings that name its input.
    """
    if args.files:
        if args.lake or args.input_manifest:
            raise SystemExit(f"curation {command}: give FILEs or --lake/--input-manifest, not both")
        if not args.output:
            raise SystemExit(f"curation {command}: plain files need --output DIR")
        # Checkpoints, spills and the manifest of a plain-file run live beside the results.
        # (output_dir is made absolute with every other --output-dir: run_stage_command)
        return Lake(root=args.output, dataset="_curation"), {"inputs": args.files, "output_dir": args.output}
    if not (args.lake and args.dataset):
        raise SystemExit(f"curation {command}: give FILEs --output DIR, or --lake --dataset [--input-manifest]")
    lake = lake_from_args(args)
    return lake, {"input_manifest": manifest_from_args(args, command, lake, upstream)}
