"""The in-place sort of two uint64 columns (``core.pairs.sort_pairs``: boilerplate's sum, dedup's buckets, the
components' distinct edges) in this tree against another (``--baseline-tree``): CPU ns a row on random rows.

Written for the sort's third column (a payload carried with the rows, for dedup's exact keys): the two-column sort
must cost what it did without one. Each run is a fresh process (``python -P``, the tree on ``PYTHONPATH``) that
sorts a small array first (kernels loaded), then ``--rows`` random rows; the trees alternated, every run kept.

    python benchmarks/bench_pairs_sort.py --baseline-tree /tmp/base --rows 8000000 --runs 5
    python benchmarks/bench_pairs_sort.py --render
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks.proc_stats import run_in_tree  # noqa: E402
from benchmarks.results import measure_or_render  # noqa: E402

JSON = REPO / "benchmarks" / "results" / "pairs_sort.json"

_CHILD = """
import json, sys
import numpy as np
from benchmarks.proc_stats import cpu
from airflow_curation.core.pairs import sort_pairs

rows = int(sys.argv[1])
rng = np.random.default_rng(rows)
a, b = rng.integers(0, 2**63, (2, 1000), dtype=np.uint64)
sort_pairs(a, b)
a, b = rng.integers(0, 2**63, (2, rows), dtype=np.uint64)
c0 = cpu()
sort_pairs(a, b)
spent = cpu() - c0
assert (a[1:] >= a[:-1]).all()
print(json.dumps({"cpu_s": spent, "ns_per_row": spent / rows * 1e9}))
"""


def measure(args) -> dict:
    trees = {"before": os.path.abspath(args.baseline_tree), "after": str(REPO)}
    results = {
        "command": "python " + " ".join(sys.argv),
        "cpus": os.cpu_count(),
        "baseline_tree": args.baseline_tree,
        "rows": args.rows,
        "runs": {v: [] for v in trees},
    }
    for r in range(args.runs):
        for v in ("before", "after") if r % 2 == 0 else ("after", "before"):
            run = run_in_tree(_CHILD, trees[v], [str(args.rows)])
            results["runs"][v].append(run)
            print(v, run, flush=True)
    return results


def render(results: dict) -> str:
    runs = results["runs"]
    loads = [r["load_1min"] for v in runs.values() for r in v]
    lines = [
        "## The pairs sort: two columns, with the third column's code in (`benchmarks/bench_pairs_sort.py`)",
        "",
        f"Command: `{results['command']}` ({results['cpus']} cores, load {min(loads):.1f}-{max(loads):.1f}); "
        f"before: the tree at `{results['baseline_tree']}`, after: this one. `sort_pairs` of {results['rows']:,} "
        "random rows in a fresh process, the trees alternated, every run in `benchmarks/results/pairs_sort.json`.",
        "",
        "| variant | CPU ns a row, median (min-max) | every run |",
        "|---|---|---|",
    ]
    for v in ("before", "after"):
        ns = [r["ns_per_row"] for r in runs[v]]
        every = ", ".join(f"{x:.1f}" for x in ns)
        lines.append(f"| {v} | {statistics.median(ns):.1f} ({min(ns):.1f}-{max(ns):.1f}) | {every} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline-tree", help="a checkout of the code before")
    p.add_argument("--rows", type=int, default=8_000_000)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--render", action="store_true")
    args = p.parse_args()
    if not args.render and not args.baseline_tree:
        p.error("--baseline-tree is needed to measure")
    measure_or_render(JSON, "pairs_sort", lambda: measure(args), render, args.render, after="spill_write")


if __name__ == "__main__":
    main()
