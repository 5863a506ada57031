"""Run a stage from a job spec, with no Airflow: ``python -m airflow_curation.jobs run SPEC.json``."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import traceback

from airflow_curation.core import redact, storage
from airflow_curation.jobs.spec import JobSpec

EXIT_OK, EXIT_STAGE_FAILED, EXIT_BAD_SPEC = 0, 1, 2


def run_spec(spec: JobSpec, shard_group: tuple[int, int] | None = None, collect: bool = False) -> dict:
    """Run one job spec in this process and return its result summary (raises on failure).

    :param shard_group: ``(i, n)``: run only group ``i`` of ``n`` of the units (one array task).
    :param collect: run no unit; gather the groups' checkpoints into the manifest.
    """
    from airflow_curation.stages import stage_class
    from airflow_curation.stages.base import StageRunner

    stage = stage_class(spec.stage)(spec.lake_obj, spec.config, spec.run_id)
    manifest = StageRunner(stage).run(shard_group=shard_group, collect=collect)
    result = {**manifest.summary(stage.manifest_uri), "accounting": manifest.accounting,
              "fingerprint": manifest.fingerprint}
    if shard_group is not None:
        result["shard_group"] = f"{shard_group[0]}/{shard_group[1]}"
    return result


def _shard_group(value: str) -> tuple[int, int]:
    try:
        index, count = (int(x) for x in value.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected I/N (e.g. 3/16), got {value!r}") from None
    if not 0 <= index < count:
        raise argparse.ArgumentTypeError(f"shard group {value!r}: need 0 <= I < N")
    return index, count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airflow_curation.jobs")
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="run a stage from a job spec")
    p_run.add_argument("spec", help="path or URL of the job spec JSON")
    p_run.add_argument("--result", help="write the result JSON here (status, summary or error)")
    p_run.add_argument("--shard-group", type=_shard_group, metavar="I/N",
                       help="run only units I::N of the plan (one task of an array job)")
    p_run.add_argument("--collect", action="store_true",
                       help="run no unit: gather the shard groups' checkpoints and write the manifest")
    p_run.add_argument("--scheduler-address", metavar="ADDRESS",
                       help="run on this Dask cluster (sets the runtime setting scheduler_address; e.g. the "
                            "cluster a Slurm allocation started)")
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    started = time.time()
    try:
        spec = JobSpec.read(args.spec)
        if args.scheduler_address:
            spec.config = {**spec.config, "scheduler_address": args.scheduler_address}
    except Exception as e:  # noqa: BLE001
        print(f"error: cannot read job spec {args.spec}: {e}", file=sys.stderr)
        _write_result(args.result, {"status": "failed", "error": f"bad spec: {e}", "returncode": EXIT_BAD_SPEC})
        return EXIT_BAD_SPEC
    try:
        summary = run_spec(spec, shard_group=args.shard_group, collect=args.collect)
    except Exception as e:  # noqa: BLE001
        # The job log and the result file are read by others: secrets masked, bounded.
        print(redact.scrub(traceback.format_exc(), limit=redact.TRACEBACK_LIMIT), file=sys.stderr)
        _write_result(args.result, {"status": "failed",
                                    "error": redact.scrub(f"{type(e).__name__}: {e}", limit=redact.TRACEBACK_LIMIT),
                                    "manifest_uri": spec.manifest_uri, "returncode": EXIT_STAGE_FAILED,
                                    "seconds": time.time() - started})
        return EXIT_STAGE_FAILED
    result = {"status": "succeeded", "returncode": EXIT_OK, "seconds": time.time() - started, **summary}
    _write_result(args.result, result)
    print(json.dumps(result, sort_keys=True))
    return EXIT_OK


def _write_result(uri: str | None, result: dict) -> None:
    if uri:
        storage.write_json(uri, result)
