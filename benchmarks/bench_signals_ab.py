"""The signal kernel's MB/s per core, two source trees side by side: a change to ``core.signals`` against a
baseline (e.g. ``git archive main | tar -x -C DIR``), alternated A, B, A, B... in fresh processes on one core.

Text: the Python 3.11 documentation sources (Debian ``python3.11-doc``, reStructuredText prose), every file
one document. Each process imports its tree's ``core.signals``, warms the kernel (numba's cache), then times
``compute_signals`` over the whole text ``--inner`` times by CPU time (``time.process_time``); its figure is
the median of those. Reported: per tree, the median and range over ``--runs`` processes, every run kept in
the JSON.

usage: taskset -c 1 python -P benchmarks/bench_signals_ab.py --baseline-tree DIR [--runs 7] [--out FILE]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = "/usr/share/doc/python3.11/html/_sources"

CHILD = r"""
import glob, statistics, sys, time
sys.path.insert(0, sys.argv[1])
import pyarrow as pa
from airflow_curation.core.signals import compute_signals, warm_up
texts = [open(p, encoding="utf-8", errors="replace").read() for p in sorted(glob.glob(sys.argv[2] + "/**/*.txt", recursive=True))]
arr = pa.array(texts, type=pa.large_string())
mb = sum(len(t.encode()) for t in texts) / 1e6
warm_up()
cpu = []
for _ in range(int(sys.argv[3])):
    t0 = time.process_time()
    compute_signals(arr)
    cpu.append(time.process_time() - t0)
print(mb, statistics.median(cpu))
"""


def one(tree: str, inner: int) -> tuple[float, float]:
    out = subprocess.run(
        [sys.executable, "-P", "-c", CHILD, tree, DOCS, str(inner)], check=True, capture_output=True, text=True
    ).stdout.split()
    return float(out[0]), float(out[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-tree", required=True)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--inner", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    trees = {"baseline": os.path.abspath(args.baseline_tree), "this tree": REPO}
    runs: dict[str, list[float]] = {k: [] for k in trees}
    mb = 0.0
    for r in range(args.runs):
        for name in trees if r % 2 == 0 else reversed(list(trees)):  # A B, B A, ...: neither always first
            mb, cpu = one(trees[name], args.inner)
            runs[name].append(mb / cpu)
    load = os.getloadavg()
    result = {
        "mb": mb,
        "files": len(glob.glob(DOCS + "/**/*.txt", recursive=True)),
        "loadavg": load,
        "runs": runs,
        "median_mb_s": {k: statistics.median(v) for k, v in runs.items()},
    }
    for k, v in runs.items():
        print(f"{k}: {statistics.median(v):.1f} MB/s per core (range {min(v):.1f}-{max(v):.1f}, {len(v)} runs)")
    print(f"{mb:.1f} MB, load {load[0]:.1f}")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
