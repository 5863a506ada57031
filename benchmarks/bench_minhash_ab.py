"""MinHash signatures of this tree against another checkout, alternated: is a kernel change speed-neutral?

    .venv/bin/python benchmarks/bench_minhash_ab.py --baseline-tree /work/main FILE.parquet [--runs 5] [--cpu 0]

Each run is a fresh process pinned to one CPU: it reads the file's ``text``, prepares it (NFKC + lowercase) and
warms the kernel outside the timing, then times ``MinHasher.signatures`` (word 5-grams, 128 permutations) over
batches of 4,096 rows: CPU seconds (``time.process_time``), which the shared machine's load disturbs less than
wall time. The two trees alternate (ABBA...); the result is the CPU ratio per round (back to back), its median
and spread, and the per-tree medians, in ``benchmarks/results/minhash_ab.json``. A digest of every signature
and shingle count is printed per tree: equal digests show the outputs are bit-identical.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CHILD = r"""
import hashlib, json, sys, time
import pyarrow.parquet as pq
from airflow_curation.core.minhash import MinHasher, MinHashParams, prepare
texts = pq.read_table(sys.argv[1], columns=["text"]).column(0).combine_chunks()
mh = MinHasher(MinHashParams())
mh.signatures(texts.slice(0, 50))  # the compiled kernel loaded outside the timing
prepared = prepare(texts)
digest = hashlib.sha256()
t = time.process_time()
for k in range(0, len(prepared), 4096):
    sig, counts = mh.signatures(prepared.slice(k, 4096), prepared=True)
    digest.update(sig.tobytes() + counts.tobytes())
cpu = time.process_time() - t
print(json.dumps({"cpu_s": cpu, "mb": prepared.buffers()[2].size / 1e6, "digest": digest.hexdigest()}))
"""


def run(tree: str, path: str) -> dict:
    env = {**os.environ, "PYTHONPATH": tree}
    # -P: not the working directory first on sys.path (that checkout would win over PYTHONPATH)
    cmd = [sys.executable, "-P", "-c", CHILD, path]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--baseline-tree", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cpu", type=int, default=0)
    args = ap.parse_args()
    os.sched_setaffinity(0, {args.cpu})
    trees = {"ours": str(REPO), "baseline": os.path.abspath(args.baseline_tree)}
    for tree in trees.values():  # warm: numba's on-disk cache of each tree's kernels
        run(tree, args.file)
    record: dict = {"file": args.file, "trees": trees, "load_before": os.getloadavg(), "runs": []}
    for r in range(args.runs):
        for who in list(trees) if r % 2 == 0 else list(trees)[::-1]:
            res = {"round": r, "who": who, **run(trees[who], args.file), "load": os.getloadavg()[0]}
            record["runs"].append(res)
            print(json.dumps(res), flush=True)
    record["load_after"] = os.getloadavg()
    cpu = {w: sorted(x["cpu_s"] for x in record["runs"] if x["who"] == w) for w in trees}
    rounds = [{x["who"]: x["cpu_s"] for x in record["runs"] if x["round"] == r} for r in range(args.runs)]
    ratios = sorted(x["baseline"] / x["ours"] for x in rounds)
    record["summary"] = {
        **{w: {"median_cpu_s": v[len(v) // 2], "min": v[0], "max": v[-1]} for w, v in cpu.items()},
        "baseline_over_ours": {"median": ratios[len(ratios) // 2], "per_round": ratios},
        "identical": len({x["digest"] for x in record["runs"]}) == 1,
    }
    print(json.dumps(record["summary"]))
    (REPO / "benchmarks" / "results" / "minhash_ab.json").write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
