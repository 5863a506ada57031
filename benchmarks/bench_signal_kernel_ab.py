"""The signal kernel alone, two checkouts A/B: CPU s of ``SignalComputer.compute`` over every 4096-row batch
of the given Parquet files (the stage's batch size), in fresh processes pinned to one CPU, A and B
alternated per round; a SHA-256 of every signal value per run, so that the trees are compared on what they
computed too.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_signal_kernel_ab.py --a /tmp/main --b . --runs 5 \\
        --cpu 1 --out benchmarks/results/x.json <dir>/parquet-400/part-*.parquet

Each child measures ``time.process_time`` (user + system, page faults included) around ``compute`` only:
imports, numba's cache loading, the Parquet read and the warm-up are outside it. Children run with
``python -P`` and ``PYTHONPATH=<tree>``, so each imports its own tree.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import hashlib, json, sys, time
import pyarrow.compute as pc
import pyarrow.parquet as pq
from airflow_curation.core.signals import SignalComputer, warm_up
warm_up()
sc = SignalComputer()
h = hashlib.sha256()
cpu = mb = 0.0
for f in sys.argv[1:]:
    for b in pq.ParquetFile(f).iter_batches(batch_size=4096, columns=["text"]):
        t = b.column(0)
        mb += pc.sum(pc.binary_length(t)).as_py() / 1e6
        t0 = time.process_time()
        out = sc.compute(t)
        cpu += time.process_time() - t0
        for c in out.columns:
            h.update(c.to_numpy().tobytes())
print(json.dumps({"cpu_s": cpu, "mb": mb, "mb_per_s": mb / cpu, "sha": h.hexdigest()}))
"""


def run_child(tree: str, files: list[str], cpu: int) -> dict:
    env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
    cmd = ["taskset", "-c", str(cpu), sys.executable, "-P", "-c", CHILD, *files]
    return json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--a", required=True, help="checkout A (the baseline)")
    ap.add_argument("--b", required=True, help="checkout B (the change)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cpu", type=int, default=1)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    trees = {"a": args.a, "b": args.b}
    record = {"trees": trees, "files": args.files, "runs": [], "load_before": os.getloadavg()}
    for r in range(args.runs):
        for who in ("a", "b") if r % 2 == 0 else ("b", "a"):
            res = run_child(trees[who], args.files, args.cpu)
            res.update(round=r, who=who, load=os.getloadavg()[0])
            record["runs"].append(res)
            print(json.dumps(res), flush=True)
    record["load_after"] = os.getloadavg()
    ratios = []
    for r in range(args.runs):
        cpu = {x["who"]: x["cpu_s"] for x in record["runs"] if x["round"] == r}
        ratios.append(cpu["a"] / cpu["b"])
    ratios.sort()
    record["summary"] = {
        "a_over_b_cpu": {"median": ratios[len(ratios) // 2], "per_round": ratios},
        "outputs_identical": len({x["sha"] for x in record["runs"]}) == 1,
    }
    for who in trees:
        v = sorted(x["cpu_s"] for x in record["runs"] if x["who"] == who)
        record["summary"][who] = {"cpu_s": {"median": v[len(v) // 2], "min": v[0], "max": v[-1]}}
    print(json.dumps(record["summary"]))
    with open(args.out, "w") as f:
        f.write(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
