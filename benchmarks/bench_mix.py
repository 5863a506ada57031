"""Mix: CPU per row of the mix stage against a plain pyarrow script doing the same job, on one lake, in one run.

Lakes: ``--rows`` (two sizes) short documents from three sources (``raw/web``, ``raw/code``, ``raw/books``, 6:2:1), ingested
into ``--shards`` shards (set-up, not timed). Job: targets web 0.5, code 0.3, books 0.2 by the source's folder,
downsampled with the scarcest key taken whole, a seed.

Contenders, each a process of its own on a fresh copy of the lake (so no checkpoint of an earlier run is reused),
timed by CPU time (``time.process_time``) of the work only (imports excluded):

- ``ours: mix stage``: ``MixStage`` through ``StageRunner``: plan, per-shard tally (ids, keys), the global plan,
  per-shard selection written beside the shards as attrs (``mix_epochs``), checkpoints and the manifest;
- ``pyarrow script``: what a user writes without it: for each shard read ``source`` (count rows per key), then
  again ``id`` and ``source``, keep each row with its key's probability from a generator seeded by the seed and
  the shard, write ``(id, selected)`` as Parquet per shard. No checkpoints, no accounting, no manifest.

Each round runs both, the order alternated, every run kept; two sizes give the marginal CPU a row. The 50 TB plan's
mix row takes ours' marginal CPU a row from the JSON (``benchmarks/simulate_scale.py --micro``).

usage: .venv/bin/python benchmarks/bench_mix.py [--rows 250000,1000000] [--shards 24] [--runs 3] [--no-write] [--render]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from results import RESULTS, replace_block  # noqa: E402  (benchmarks/ is this script's folder)

JSON = os.path.join(HERE, "results", "mix.json")
SOURCES = {"web": 6, "code": 2, "books": 1}
TARGETS = {"web": 0.5, "code": 0.3, "books": 0.2}
ENV = {**os.environ, "PYTHONPATH": REPO}

OURS = r"""
import json, sys, time
sys.path.insert(0, sys.argv[3])
from proc_stats import hwm
from airflow_curation.core.layout import Lake
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.mix.stage import MixStage
lake, upstream, _, targets = Lake(sys.argv[1], "web"), sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
t0, w0 = time.process_time(), time.perf_counter()
m = StageRunner(MixStage(lake, {"input_manifest": upstream, "targets": targets, "seed": 7}, "m1")).run()
assert m.status == "complete", m.status
selected = sum(v["selected_rows"] for v in m.config["mixture"]["by_key"].values())
print(json.dumps({"cpu": time.process_time() - t0, "wall": time.perf_counter() - w0, "rows": m.accounting["read"],
                  "selected": selected, "hwm": hwm()}))
"""

SCRIPT = r"""
import glob, json, os, sys, time, zlib
sys.path.insert(0, sys.argv[3])
from proc_stats import hwm
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
root, targets, seed = sys.argv[1], json.loads(sys.argv[4]), 7
t0, w0 = time.process_time(), time.perf_counter()
shards = sorted(p for p in glob.glob(os.path.join(root, "**", "shards", "*.parquet"), recursive=True))
def keys(t):  # the source's first folder, as the stage's default key
    return [v.split("/", 1)[0] for v in t.column("source").to_pylist()]
counts = {}
for s in shards:
    k = keys(pq.read_table(s, columns=["source"]))
    for key, n in zip(*np.unique(np.array(k), return_counts=True)):
        counts[str(key)] = counts.get(str(key), 0) + int(n)
total = min(counts[k] / p for k, p in targets.items())  # the scarcest key relative to its target, whole
prob = {k: min(1.0, total * p / counts[k]) for k, p in targets.items()}
out = os.path.join(root, "script-out"); os.makedirs(out, exist_ok=True)
rows = selected = 0
for s in shards:
    t = pq.read_table(s, columns=["id", "source"])
    k = np.array(keys(t))
    p = np.vectorize(prob.get, otypes=[float])(k)
    keep = np.random.default_rng([seed, zlib.crc32(os.path.basename(s).encode())]).random(len(k)) < p
    pq.write_table(pa.table({"id": t.column("id"), "selected": keep}), os.path.join(out, os.path.basename(s)))
    rows += len(k); selected += int(keep.sum())
print(json.dumps({"cpu": time.process_time() - t0, "wall": time.perf_counter() - w0, "rows": rows,
                  "selected": selected, "hwm": hwm()}))
"""

CONTENDERS = {"ours: mix stage": OURS, "pyarrow script": SCRIPT}
OURS_NAME = "ours: mix stage"


def build(root: str, rows: int, shards: int) -> tuple[str, str]:
    """The ingested lake (set-up): ``rows`` documents over the sources, ``shards`` input files."""
    sys.path.insert(0, REPO)
    from airflow_curation.core.layout import Lake
    from airflow_curation.stages.base import StageRunner
    from airflow_curation.stages.ingest.stage import IngestStage

    raw = os.path.join(root, "raw")
    weight = sum(SOURCES.values())
    files = {s: max(1, shards * w // weight) for s, w in SOURCES.items()}
    i = 0
    for source, w in SOURCES.items():
        os.makedirs(os.path.join(raw, source))
        n = rows * w // weight
        for k in range(files[source]):
            with open(os.path.join(raw, source, f"part{k:03d}.jsonl"), "w") as f:
                for j in range(k, n, files[source]):
                    f.write(json.dumps({"text": f"{source} document {j} " + "word " * (5 + i % 40)}) + "\n")
                    i += 1
    lake = Lake(os.path.join(root, "lake"), "web")
    stage = IngestStage(lake, {"inputs": [raw], "input_root": raw, "unit_bytes": 1}, "r1")
    m = StageRunner(stage).run()
    assert m.status == "complete" and len(m.shards) == sum(files.values()), (m.status, len(m.shards))
    return lake.root, stage.manifest_uri


def run(code: str, lake_root: str, upstream: str, work: str, *argv: str) -> dict:
    """``code`` in a process of its own on a fresh copy of the lake (argv: the copy's root, its upstream manifest,
    then ``argv``); its last line of output, as JSON."""
    copy = os.path.join(work, f"run-{time.monotonic_ns()}")
    shutil.copytree(lake_root, copy)
    up = upstream.replace(lake_root, copy, 1)
    try:
        out = subprocess.run(
            [sys.executable, "-c", code, copy, up, *argv], env=ENV, capture_output=True, text=True, check=True
        )
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(args: argparse.Namespace) -> dict:
    sizes = [int(x) for x in str(args.rows).split(",")]
    data = {
        "command": f".venv/bin/python benchmarks/bench_mix.py --rows {args.rows} --shards {args.shards} --runs {args.runs}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "sizes": sizes,
        "shards": args.shards,
        "runs": [],
    }
    names = list(CONTENDERS)
    for size in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            lake_root, upstream = build(tmp, size, args.shards)
            for r in range(args.runs):
                for name in names if r % 2 == 0 else names[::-1]:
                    load = os.getloadavg()[0]
                    got = run(CONTENDERS[name], lake_root, upstream, tmp, HERE, json.dumps(TARGETS))
                    run_ = {"contender": "ours" if name == OURS_NAME else name, "name": name, "size": size, "round": r}
                    data["runs"].append(run_ | {"load": load} | got)
                    print(data["runs"][-1], flush=True)
    return data


def _runs(data: dict, name: str, size: int) -> list[dict]:
    return [r for r in data["runs"] if r["name"] == name and r["size"] == size]


def ns_per_row(data: dict, name: str = OURS_NAME) -> float:
    """``name``'s marginal CPU nanoseconds a row between the smallest and the largest size (medians), so the fixed
    cost of a run (plan, manifest, process) does not flatter the figure; one size: its median CPU over its rows."""
    lo, hi = min(data["sizes"]), max(data["sizes"])
    med = {n: statistics.median(r["cpu"] for r in _runs(data, name, n)) for n in (lo, hi)}
    rows = {n: statistics.median(r["rows"] for r in _runs(data, name, n)) for n in (lo, hi)}
    if hi == lo:
        return med[hi] / rows[hi] * 1e9
    return (med[hi] - med[lo]) / (rows[hi] - rows[lo]) * 1e9


def render(data: dict) -> str:
    lines = [
        "| contender | rows | shards | runs | CPU s (median) | spread | wall s (median) | CPU ns a row | "
        "peak RSS MB | selected rows |",
        "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for size in data["sizes"]:
        for name in CONTENDERS:
            runs = _runs(data, name, size)
            cpu = [r["cpu"] for r in runs]
            rows = statistics.median(r["rows"] for r in runs)
            lines.append(
                f"| {name} | {rows:,.0f} | {data['shards']} | {len(runs)} | {statistics.median(cpu):.2f} | "
                f"{min(cpu):.2f}-{max(cpu):.2f} | {statistics.median(r['wall'] for r in runs):.2f} | "
                f"{statistics.median(cpu) / rows * 1e9:,.0f} | {statistics.median(r['hwm'] for r in runs) / 2**20:.0f} | "
                f"{statistics.median(r['selected'] for r in runs):,.0f} |"
            )
    loads = [r["load"] for r in data["runs"]]
    ours, script = ns_per_row(data, OURS_NAME), ns_per_row(data, "pyarrow script")
    lo, hi = min(data["sizes"]), max(data["sizes"])
    lines += [
        "",
        f"Marginal CPU a row from {lo:,} to {hi:,} rows (medians): ours {ours:,.0f} ns, the script {script:,.0f} ns "
        f"({ours / script:.2f}x). Load (1-minute average before each run): {min(loads):.1f}-{max(loads):.1f} on "
        f"{os.cpu_count()} cores.",
    ]
    return "\n".join(lines)


def write_results(table: str, data: dict) -> None:
    section = f"""## Mix: CPU per row against a plain pyarrow script (`benchmarks/bench_mix.py`)

Command: `{data["command"]}` (run {data["date"]}; `--render` rebuilds this block from `benchmarks/results/mix.json`).
{" and ".join(f"{n:,}" for n in data["sizes"])} short documents from three sources (6:2:1) in {data["shards"]} shards; targets web 0.5, code 0.3,
books 0.2 by the source's folder. Each contender in a process of its own on a fresh copy of the lake, CPU time of
the work only; each round runs both, the order alternated, every run kept. The stage does more than the script:
it checkpoints each shard's tally and selection, accounts for every row, plans once for all the tasks of an
array and writes a manifest; the script keeps nothing of the sort and its selection depends on the shard layout
(the stage's depends on the seed and the ids only). The 50 TB plan's mix row takes ours' marginal CPU a row.

{table}"""
    replace_block(RESULTS, "bench_mix", section)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="250000,1000000", help="sizes, rows (the marginal cost is between them)")
    ap.add_argument("--shards", type=int, default=24)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--render", action="store_true")
    args = ap.parse_args()
    data = json.load(open(JSON)) if args.render else measure(args)
    table = render(data)
    print(table)
    if not args.no_write:
        if not args.render:
            with open(JSON, "w") as f:
                json.dump(data, f, indent=1)
                f.write("\n")
        write_results(table, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
