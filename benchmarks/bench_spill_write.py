"""A spill write's cost per row as the rows and the partition count grow: ``core.lsh.write_partitioned`` of the
code before (``--baseline-tree``: rows ordered by a 64-bit stable ``argsort`` of their partition numbers, then
``np.unique`` for the partitions present) against this tree's (``core.arrays.partition_order``: a 16-bit radix
sort and one ``bincount``).

Every spill of the project goes through it (dedup's band and exact spills, boilerplate's counts, the edges, the
components' steps, the exact duplicates), rows x passes at 50 TB. One write: a dedup band spill's two uint64
columns (``bucket``, node keys sharing their high word, as a shard writes them) to a local file, partition numbers
uniform in ``0..P-1``. Each run is a fresh process (``python -P``, the tree on ``PYTHONPATH``) that writes a
tiny file first (imports loaded), then the measured one; CPU of the write alone, peak RSS growth from /proc's
VmHWM. The trees alternated, every run kept; the marginal CPU a row between sizes (fixed costs cancel).

    python benchmarks/bench_spill_write.py --baseline-tree /tmp/base --rows 1000000,4000000,16000000 --runs 3
    python benchmarks/bench_spill_write.py --render
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks.proc_stats import run_in_tree  # noqa: E402
from benchmarks.results import measure_or_render  # noqa: E402

JSON = REPO / "benchmarks" / "results" / "spill_write.json"

_CHILD = """
import json, sys
import numpy as np
from benchmarks.proc_stats import cpu, hwm
from airflow_curation.core.lsh import write_partitioned

out, rows, parts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(rows + parts)
def columns(n):
    node = (np.uint64(7) << np.uint64(32)) | np.arange(n, dtype=np.uint64)
    return {"bucket": rng.integers(1, 2**63, n, dtype=np.uint64), "node": node}, rng.integers(0, parts, n)
cols, part = columns(64)
write_partitioned(out, cols, part)
cols, part = columns(rows)
base, c0 = hwm(), cpu()
write_partitioned(out, cols, part)
print(json.dumps({"rss_growth": hwm() - base, "cpu_s": cpu() - c0, "bytes": __import__("os").path.getsize(out)}))
"""


def measure(args) -> dict:
    sizes = [int(x) for x in args.rows.split(",")]
    counts = [int(x) for x in args.partitions.split(",")]
    trees = {"before": os.path.abspath(args.baseline_tree), "after": str(REPO)}
    results = {
        "command": "python " + " ".join(sys.argv),
        "cpus": os.cpu_count(),
        "baseline_tree": args.baseline_tree,
        "runs": {f"{p}/{n}": {v: [] for v in trees} for p in counts for n in sizes},
    }
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "spill.arrow")
        for r in range(args.runs):
            for p in counts:
                for n in sizes:
                    for v in ("before", "after") if r % 2 == 0 else ("after", "before"):
                        got = run_in_tree(_CHILD, trees[v], [out, str(n), str(p)])
                        results["runs"][f"{p}/{n}"][v].append(got)
                        print(p, n, v, got, flush=True)
    return results


def render(results: dict) -> str:
    runs = results["runs"]
    keys = sorted(runs, key=lambda k: tuple(int(x) for x in k.split("/")))
    loads = [r["load_1min"] for by in runs.values() for v in by.values() for r in v]
    same = all(len({r["bytes"] for v in by.values() for r in v}) == 1 for by in runs.values())
    lines = [
        "## Spill writes: CPU a row as rows and partitions grow (`benchmarks/bench_spill_write.py`)",
        "",
        f"Command: `{results['command']}` ({results['cpus']} cores, load {min(loads):.1f}-{max(loads):.1f}); "
        f"before: the tree at `{results['baseline_tree']}` (a 64-bit stable argsort, then `np.unique`), after: this "
        "one (`partition_order`: 16-bit radix sort, one `bincount`). One write of a band spill (two uint64 columns) "
        "in a fresh process, the trees alternated, every run in `benchmarks/results/spill_write.json`. Files of the "
        f"same bytes from both trees in every run of a size: {same}.",
        "",
        "| partitions | rows | variant | CPU-s, median (min-max) | peak RSS growth (MB), median |",
        "|---:|---:|---|---|---:|",
    ]
    for k in keys:
        p, n = (int(x) for x in k.split("/"))
        for v in ("before", "after"):
            cpu = [r["cpu_s"] for r in runs[k][v]]
            rss = statistics.median(r["rss_growth"] for r in runs[k][v]) / 1e6
            lines.append(
                f"| {p:,} | {n:,} | {v} | {statistics.median(cpu):.3f} ({min(cpu):.3f}-{max(cpu):.3f}) | {rss:.0f} |"
            )
    lines.append("")
    for a, b in zip(keys, keys[1:]):
        (pa, na), (pb, nb) = (tuple(int(x) for x in k.split("/")) for k in (a, b))
        if pa != pb:
            continue
        ns = {
            v: (statistics.median(r["cpu_s"] for r in runs[b][v]) - statistics.median(r["cpu_s"] for r in runs[a][v]))
            / (nb - na)
            * 1e9
            for v in ("before", "after")
        }
        lines.append(
            f"- {pa:,} partitions, {na:,} -> {nb:,} rows: marginal **{ns['before']:.0f} -> {ns['after']:.0f} CPU ns "
            f"a row** ({ns['before'] / ns['after']:.2f}x less)"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline-tree", help="a checkout of the code before")
    p.add_argument("--rows", default="1000000,4000000,16000000", help="rows written, comma-separated sizes")
    p.add_argument("--partitions", default="64,4096", help="partition counts, comma-separated")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--render", action="store_true")
    args = p.parse_args()
    if not args.render and not args.baseline_tree:
        p.error("--baseline-tree is needed to measure")
    measure_or_render(JSON, "spill_write", lambda: measure(args), render, args.render, after="dedup_partition")


if __name__ == "__main__":
    main()
