"""Validate on one core at several thread counts: what a task's default costs when it counts the node's cores.

A task of one core (a Slurm cpuset, a Kubernetes CPU limit) on a node of N cores ran validate with N threads:
DuckDB's default thread count and ``os.cpu_count()`` see the node, not the task. Since the default follows the
cores the process may use (``stages.mappers.budget.cpu_count``) such a task runs one. This runs ``curation
validate --threads T`` for each T, fresh processes, pinned to one CPU, the thread counts alternated (order
reversed every other round), every run kept; per run CPU s (user + system, ``wait4``), wall, peak RSS, load,
and the report's metrics, which must be the same at every thread count.

    PYTHONPATH=$PWD python benchmarks/bench_validate_one_core.py --lake <lake> --dataset scale \\
        --input-manifest <lake>/scale/_manifests/<run>/dedup.json --threads 1,2,16,64 --rounds 6 --cpu 0 \\
        --out benchmarks/results/validate_one_core_threads.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_ingest import CURATION, _measure  # noqa: E402

from airflow_curation.core.layout import Lake  # noqa: E402
from airflow_curation.stages.validate.report import report_uris  # noqa: E402


def one_run(lake: Lake, input_manifest: str, threads: int, run_id: str) -> dict:
    shutil.rmtree(lake.path("_checkpoints", "validate"), ignore_errors=True)  # every run computes
    shutil.rmtree(lake.path("_work", "validate"), ignore_errors=True)
    args = ["validate", "--lake", lake.root, "--dataset", lake.dataset, "--run-id", run_id, "--warn-only"]
    args += ["--input-manifest", input_manifest, "--threads", str(threads)]
    load = os.getloadavg()[0]
    wall, cpu, rss, _ = _measure([*CURATION, *args])
    metrics = json.loads(Path(report_uris(lake, run_id)[0]).read_text())["metrics"]
    return {
        "threads": threads,
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_rss": rss,
        "load": [load, os.getloadavg()[0]],
        "metrics_sha256": hashlib.sha256(json.dumps(metrics, sort_keys=True).encode()).hexdigest(),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lake", required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--input-manifest", required=True, help="a complete dedup manifest of the lake")
    ap.add_argument("--threads", default="1,2,16", help="thread counts, comma-separated")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--cpu", type=int, default=0, help="the one CPU every run is pinned to")
    ap.add_argument("--out", required=True, help="the JSON record")
    args = ap.parse_args()
    os.sched_setaffinity(0, {args.cpu})  # the children inherit it
    lake = Lake(args.lake, args.dataset)
    counts = [int(t) for t in args.threads.split(",")]
    record = {"lake": args.lake, "input_manifest": args.input_manifest, "cpu": args.cpu, "runs": []}
    one_run(lake, args.input_manifest, counts[0], "warm")  # the page cache: not measured
    for r in range(args.rounds):
        for t in counts if r % 2 == 0 else counts[::-1]:
            run = {"round": r, **one_run(lake, args.input_manifest, t, f"t{t}-r{r}")}
            record["runs"].append(run)
            print(json.dumps({k: v for k, v in run.items() if k != "metrics_sha256"}), flush=True)
    for t in counts:
        mine = [x for x in record["runs"] if x["threads"] == t]
        record[f"threads_{t}"] = {
            k: {
                "median": statistics.median(x[k] for x in mine),
                "min": min(x[k] for x in mine),
                "max": max(x[k] for x in mine),
            }
            for k in ("cpu_s", "wall_s", "peak_rss")
        }
    record["metrics_identical"] = len({x["metrics_sha256"] for x in record["runs"]}) == 1
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    for t in counts:
        s = record[f"threads_{t}"]
        print(
            f"threads {t}: CPU s {s['cpu_s']['median']:.2f} ({s['cpu_s']['min']:.2f}-{s['cpu_s']['max']:.2f}), "
            f"wall {s['wall_s']['median']:.2f}, peak RSS {s['peak_rss']['median'] / 2**20:.0f} MiB"
        )
    print(f"report metrics identical at every thread count: {record['metrics_identical']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
