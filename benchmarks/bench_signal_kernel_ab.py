"""The signal kernel alone, two checkouts A/B: CPU s of ``SignalComputer.compute`` over every 4096-row batch
of the given Parquet files (the stage's batch size), in fresh processes pinned to one CPU, A and B
alternated per round; a SHA-256 of every signal value per run, so that the trees are compared on what they
computed too.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_signal_kernel_ab.py --a /tmp/main --b . --runs 5 \\
        --cpu 1 --out benchmarks/results/x.json <dir>/parquet-400/part-*.parquet

Each child measures ``time.process_time`` (user + system, page faults included) around ``compute`` only:
imports, numba's cache loading, the Parquet read and the warm-up are outside it. Children run with
``python -P`` and ``PYTHONPATH=<tree>``, so each imports its own tree.

``--split-bytes N``: each batch's documents under N bytes and those of N or more are computed as two batches
and timed apart (``small`` and ``large`` in the JSON): an n-gram table grows with its document, so a change to
it shows on the large ones, which a whole-corpus figure dilutes.
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
split = int(sys.argv[1])
part = {"small": [0.0, 0.0], "large": [0.0, 0.0]}  # CPU s, MB
for f in sys.argv[2:]:
    for b in pq.ParquetFile(f).iter_batches(batch_size=4096, columns=["text"]):
        t = b.column(0)
        size = pc.binary_length(t)
        big = pc.greater_equal(size, split) if split else pc.less(size, 0)
        for name, rows in (("small", pc.invert(big)), ("large", big)):
            texts = t.filter(rows)
            if not len(texts):
                continue
            t0 = time.process_time()
            out = sc.compute(texts)
            part[name][0] += time.process_time() - t0
            part[name][1] += pc.sum(pc.binary_length(texts)).as_py() / 1e6
            for c in out.columns:
                h.update(c.to_numpy().tobytes())
cpu, mb = part["small"][0] + part["large"][0], part["small"][1] + part["large"][1]
res = {"cpu_s": cpu, "mb": mb, "mb_per_s": mb / cpu, "sha": h.hexdigest()}
if split:
    res.update({f"{k}_{w}": v[i] for k, v in part.items() for i, w in enumerate(("cpu_s", "mb"))})
print(json.dumps(res))
"""


def run_child(tree: str, files: list[str], cpu: int, split: int = 0) -> dict:
    env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
    cmd = ["taskset", "-c", str(cpu), sys.executable, "-P", "-c", CHILD, str(split), *files]
    return json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--a", required=True, help="checkout A (the baseline)")
    ap.add_argument("--b", required=True, help="checkout B (the change)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cpu", type=int, default=1)
    ap.add_argument("--out", required=True)
    ap.add_argument("--split-bytes", type=int, default=0, help="time documents under / from this size apart")
    args = ap.parse_args()
    trees = {"a": args.a, "b": args.b}
    record = {"trees": trees, "files": args.files, "runs": [], "load_before": os.getloadavg()}
    for r in range(args.runs):
        for who in ("a", "b") if r % 2 == 0 else ("b", "a"):
            res = run_child(trees[who], args.files, args.cpu, args.split_bytes)
            res.update(round=r, who=who, load=os.getloadavg()[0])
            record["runs"].append(res)
            print(json.dumps(res), flush=True)
    record["load_after"] = os.getloadavg()
    record["summary"] = {"outputs_identical": len({x["sha"] for x in record["runs"]}) == 1}
    for key in ("cpu_s", "small_cpu_s", "large_cpu_s") if args.split_bytes else ("cpu_s",):
        ratios = []
        for r in range(args.runs):
            cpu = {x["who"]: x[key] for x in record["runs"] if x["round"] == r}
            ratios.append(cpu["a"] / cpu["b"])
        ratios.sort()
        prefix = key[: -len("cpu_s")]
        record["summary"][f"{prefix}a_over_b_cpu"] = {"median": ratios[len(ratios) // 2], "per_round": ratios}
        for who in trees:
            v = sorted(x[key] for x in record["runs"] if x["who"] == who)
            record["summary"].setdefault(who, {})[key] = {"median": v[len(v) // 2], "min": v[0], "max": v[-1]}
    print(json.dumps(record["summary"]))
    with open(args.out, "w") as f:
        f.write(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
