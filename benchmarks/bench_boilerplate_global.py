"""Boilerplate's global step, one unit: peak memory and CPU reading its range of partitions at once (the code
before, 273e4c1) against one partition at a time (``stages/boilerplate/stage.merge_partitions``).

Synthetic count spills in the stage's layout (``core.lsh.write_partitioned``: a uint64 line key and a uint64
document count, partitioned by key): ``--shards`` files of ``--keys`` distinct keys each, half of them shared
by every file (a snapshot's frequent lines), in ``--partitions`` partitions; one unit sums the whole range,
as a one-worker run does. Each variant in a fresh process (peak RSS growth from /proc's VmHWM), alternated,
every run kept.

    python benchmarks/bench_boilerplate_global.py --runs 3
    python benchmarks/bench_boilerplate_global.py --render
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks.results import RESULTS, replace_block  # noqa: E402

JSON = REPO / "benchmarks" / "results" / "boilerplate_global.json"

_CHILD = """
import json, sys
from benchmarks.proc_stats import cpu, hwm
import numpy as np
from airflow_curation.core.boilerplate import KEY_COLUMNS, sum_counts
from airflow_curation.core.lsh import read_partitions
from airflow_curation.stages.boilerplate.stage import merge_partitions

def whole_range(lo, hi, spills, min_documents, out):  # the code before: the range read at once
    keys, distinct = [], 0
    for _, part in read_partitions(spills, lo, hi, KEY_COLUMNS):
        k, d = sum_counts(part["key"], part["docs"])
        distinct += len(k)
        keys.append(k[d >= np.uint64(min_documents)])
    return {"distinct_lines": distinct, "frequent_lines": int(sum(len(k) for k in keys))}

variant, parts, out, spills = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
base, c0 = hwm(), cpu()
fn = whole_range if variant == "whole_range" else merge_partitions
stats = fn(0, parts, spills, 10, out)
print(json.dumps({"rss_growth": hwm() - base, "cpu_s": cpu() - c0, "frequent": stats["frequent_lines"],
                  "distinct": stats["distinct_lines"]}))
"""


def write_spills(folder: str, shards: int, keys: int, parts: int) -> tuple[list[str], int]:
    from airflow_curation.core.lsh import partition_of, write_partitioned

    rng = np.random.default_rng(0)
    shared = rng.integers(1, 2**63, keys // 2, dtype=np.uint64)
    uris, nbytes = [], 0
    for s in range(shards):
        k = np.unique(np.concatenate([shared, rng.integers(1, 2**63, keys - len(shared), dtype=np.uint64)]))
        uri = os.path.join(folder, f"s{s:03d}.keys.arrow")
        write_partitioned(uri, {"key": k, "docs": rng.integers(1, 4, len(k), dtype=np.uint64)}, partition_of(k, parts))
        uris.append(uri)
        nbytes += len(k) * 16
    return uris, nbytes


def run(variant: str, parts: int, spills: list[str], out: str) -> dict:
    got = subprocess.run(
        [sys.executable, "-c", _CHILD, variant, str(parts), out, *spills],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    return json.loads(got.stdout) | {"load_1min": os.getloadavg()[0]}


def measure(args) -> dict:
    results = {
        "command": "python " + " ".join(sys.argv),
        "shards": args.shards,
        "keys_per_shard": args.keys,
        "partitions": args.partitions,
        "cpus": os.cpu_count(),
        "runs": {"whole_range": [], "one_partition": []},
    }
    with tempfile.TemporaryDirectory() as folder:
        spills, nbytes = write_spills(folder, args.shards, args.keys, args.partitions)
        results["spill_bytes"] = nbytes
        out = os.path.join(folder, "frequent.arrow")
        for r in range(args.runs):
            for v in ("whole_range", "one_partition") if r % 2 == 0 else ("one_partition", "whole_range"):
                results["runs"][v].append(run(v, args.partitions, spills, out))
                print(v, results["runs"][v][-1], flush=True)
    return results


def render(results: dict) -> str:
    runs = results["runs"]
    loads = [r["load_1min"] for v in runs.values() for r in v]
    same = {(r["frequent"], r["distinct"]) for v in runs.values() for r in v}
    lines = [
        f"Command: `{results['command']}` ({results['cpus']} cores, load {min(loads):.1f}-{max(loads):.1f}). "
        f"{results['shards']} count spills of {results['keys_per_shard']:,} keys ({results['spill_bytes'] / 1e6:.0f} MB "
        f"of (key, count) pairs) in {results['partitions']} partitions, one unit summing all of them (a one-worker "
        "run); each run a fresh process, the two alternated, every run in `benchmarks/results/boilerplate_global.json`. "
        f"Both found the same lines in every run: {len(same) == 1}.",
        "",
        "| variant | spill reads | peak RSS growth (MB), median | spread | CPU-s, median | spread |",
        "|---|---:|---:|---|---:|---|",
    ]
    for v, reads in (("whole_range", results["shards"]), ("one_partition", results["shards"] * results["partitions"])):
        rss = [r["rss_growth"] / 1e6 for r in runs[v]]
        cpu = [r["cpu_s"] for r in runs[v]]
        lines.append(
            f"| {v} | {reads:,} | {statistics.median(rss):.0f} | {min(rss):.0f}-{max(rss):.0f} | "
            f"{statistics.median(cpu):.2f} | {min(cpu):.2f}-{max(cpu):.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shards", type=int, default=24)
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--partitions", type=int, default=16)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--render", action="store_true")
    args = p.parse_args()
    results = json.loads(JSON.read_text()) if args.render else measure(args)
    if not args.render:
        JSON.write_text(json.dumps(results, indent=1) + "\n")
    text = render(results)
    print(text)
    replace_block(RESULTS, "boilerplate_global", "## Boilerplate's global step: one partition at a time\n\n" + text)


if __name__ == "__main__":
    main()
