"""Boilerplate: the stage's marginal CPU per GB of text against a plain Python script doing the same job, on
lakes of two sizes, in one run.

Lakes: ``--pages`` (two sizes) generated web pages (a site's menu and footer on every page, three of 400
related-article links, each page's own lines; ``bench_boilerplate_merge.write_lake``) in ``--shards`` shards (set-up, not
timed). Job: remove every line held by at least 5 pages.

Contenders, each a process of its own on a fresh copy of the lake (no checkpoint of an earlier run reused),
timed by CPU time (``time.process_time``) of the work only (imports excluded):

- ``ours: boilerplate stage``: ``BoilerplateStage`` through ``StageRunner``, one worker: every shard's line
  counts spilled, the global step, every shard's cleaned text written beside it, checkpoints, accounting and
  the manifest;
- ``python script``: what a user writes without it: every shard's text read, each page's distinct stripped
  lines counted in a dict, then each shard's cleaned text written as Parquet. No checkpoints, no accounting,
  and the whole snapshot's lines held in one process's memory.

Each round runs both, the order alternated, every run kept; two sizes give the marginal CPU a GB. The 50 TB plan's
boilerplate row (``simulate_scale.py --micro``) takes ours' marginal CPU a GB from the JSON.

    .venv/bin/python benchmarks/bench_boilerplate_cost.py [--pages 20000,80000] [--shards 16] [--runs 3] [--render]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from benchmarks.bench_mix import run  # noqa: E402
from benchmarks.results import RESULTS, replace_block  # noqa: E402

JSON = os.path.join(HERE, "results", "boilerplate_cost.json")
OURS_NAME = "ours: boilerplate stage"

OURS = r"""
import json, sys, time
from benchmarks.proc_stats import hwm
from airflow_curation.core.layout import Lake
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.boilerplate.stage import BoilerplateStage
lake, upstream = Lake(sys.argv[1], "bench"), sys.argv[2]
t0, w0 = time.process_time(), time.perf_counter()
m = StageRunner(BoilerplateStage(lake, {"input_manifest": upstream, "min_documents": 5, "workers": 1}, "b1")).run()
assert m.status == "complete", m.status
print(json.dumps({"cpu": time.process_time() - t0, "wall": time.perf_counter() - w0, "rows": m.accounting["read"],
                  "removed": m.accounting["notes"]["lines_removed:boilerplate"], "hwm": hwm()}))
"""

SCRIPT = r"""
import glob, json, os, sys, time
from benchmarks.proc_stats import hwm
import pyarrow as pa, pyarrow.parquet as pq
root = sys.argv[1]
t0, w0 = time.process_time(), time.perf_counter()
shards = sorted(glob.glob(os.path.join(root, "**", "shards", "*.parquet"), recursive=True))
texts = [pq.read_table(s, columns=["id", "text"]) for s in shards]
held = {}
for t in texts:
    for page in t.column("text").to_pylist():
        for line in {s.strip() for s in page.split("\n")}:
            if line:
                held[line] = held.get(line, 0) + 1
out = os.path.join(root, "script-out"); os.makedirs(out, exist_ok=True)
rows = removed = 0
for s, t in zip(shards, texts):
    clean = []
    for page in t.column("text").to_pylist():
        kept = [s for s in page.split("\n") if not (s.strip() and held[s.strip()] >= 5)]
        removed += page.count("\n") + 1 - len(kept)
        clean.append("\n".join(kept))
    pq.write_table(pa.table({"id": t.column("id"), "clean_text": clean}), os.path.join(out, os.path.basename(s)))
    rows += t.num_rows
print(json.dumps({"cpu": time.process_time() - t0, "wall": time.perf_counter() - w0, "rows": rows,
                  "removed": removed, "hwm": hwm()}))
"""

CONTENDERS = {OURS_NAME: OURS, "python script": SCRIPT}


def build(root: str, pages: int, shards: int) -> tuple[str, str, int]:
    """The lake (set-up): ``pages`` pages in ``shards`` shards; returns its root, manifest and text bytes."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from airflow_curation.core.layout import Lake
    from airflow_curation.core.manifest import Manifest
    from benchmarks.bench_boilerplate_merge import write_lake

    lake = Lake(os.path.join(root, "lake"), "bench")
    manifest = write_lake(lake, shards, pages // shards)
    text = sum(
        pc.sum(pc.binary_length(pq.read_table(s.uri, columns=["text"]).column("text"))).as_py()
        for s in Manifest.read(manifest).shards
    )
    return lake.root, manifest, int(text)


def measure(args: argparse.Namespace) -> dict:
    sizes = [int(x) for x in str(args.pages).split(",")]
    data = {
        "command": f".venv/bin/python benchmarks/bench_boilerplate_cost.py --pages {args.pages} --shards {args.shards} "
        f"--runs {args.runs}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "sizes": sizes,
        "shards": args.shards,
        "text_bytes": {},
        "runs": [],
    }
    names = list(CONTENDERS)
    for size in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            lake_root, upstream, text = build(tmp, size, args.shards)
            data["text_bytes"][str(size)] = text
            for r in range(args.runs):
                for name in names if r % 2 == 0 else names[::-1]:
                    load = os.getloadavg()[0]
                    got = run(CONTENDERS[name], lake_root, upstream, tmp)
                    data["runs"].append({"name": name, "size": size, "round": r, "load": load} | got)
                    print(data["runs"][-1], flush=True)
    return data


def _runs(data: dict, name: str, size: int) -> list[dict]:
    return [r for r in data["runs"] if r["name"] == name and r["size"] == size]


def cpu_s_per_gb(data: dict, name: str = OURS_NAME) -> float:
    """``name``'s marginal CPU seconds a GB of text between the smallest and the largest size (medians), so a run's
    fixed cost (plan, manifest, process) does not flatter the figure."""
    lo, hi = min(data["sizes"]), max(data["sizes"])
    med = {n: statistics.median(r["cpu"] for r in _runs(data, name, n)) for n in (lo, hi)}
    gb = {n: data["text_bytes"][str(n)] / 1e9 for n in (lo, hi)}
    return (med[hi] - med[lo]) / (gb[hi] - gb[lo])


def render(data: dict) -> str:
    lines = [
        "## Boilerplate: CPU per GB against a plain Python script (`benchmarks/bench_boilerplate_cost.py`)",
        "",
        f"Command: `{data['command']}` (run {data['date']}; `--render` rebuilds this block from "
        "`benchmarks/results/boilerplate_cost.json`). Generated pages (a site's menu and footer on every page, "
        f"three of 400 related-article links, each page's own) in {data['shards']} shards; every line held by at least 5 pages removed. "
        "Each contender in a process of its own on a fresh copy of the lake, CPU time of the work only; each round "
        "runs both, the order alternated, every run kept. The stage does more than the script: it checkpoints each "
        "shard's counts and cleaned text, accounts for every row, bounds its memory by partitions and writes a "
        "manifest; the script holds every distinct line of the snapshot in one process. The 50 TB plan's "
        "boilerplate row takes ours' marginal CPU a GB.",
        "",
        "| contender | pages | text MB | runs | CPU s (median) | spread | wall s (median) | CPU s a GB | peak RSS MB | "
        "lines removed |",
        "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for size in data["sizes"]:
        gb = data["text_bytes"][str(size)] / 1e9
        for name in CONTENDERS:
            runs = _runs(data, name, size)
            cpu = [r["cpu"] for r in runs]
            removed = sorted({r["removed"] for r in runs})
            lines.append(
                f"| {name} | {statistics.median(r['rows'] for r in runs):,.0f} | {gb * 1e3:.0f} | {len(runs)} | "
                f"{statistics.median(cpu):.2f} | {min(cpu):.2f}-{max(cpu):.2f} | "
                f"{statistics.median(r['wall'] for r in runs):.2f} | {statistics.median(cpu) / gb:.1f} | "
                f"{statistics.median(r['hwm'] for r in runs) / 2**20:.0f} | {', '.join(f'{n:,}' for n in removed)} |"
            )
    loads = [r["load"] for r in data["runs"]]
    ours, script = cpu_s_per_gb(data), cpu_s_per_gb(data, "python script")
    lo, hi = min(data["sizes"]), max(data["sizes"])
    lines += [
        "",
        f"Marginal CPU a GB of text from {lo:,} to {hi:,} pages (medians): ours {ours:.1f} s, the script "
        f"{script:.1f} s ({ours / script:.2f}x). Load (1-minute average before each run): "
        f"{min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores.",
    ]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", default="20000,80000", help="sizes, pages (the marginal cost is between them)")
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--render", action="store_true")
    args = ap.parse_args()
    if args.render:
        data = json.load(open(JSON))
    else:
        data = measure(args)
        with open(JSON, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
    text = render(data)
    print(text)
    replace_block(RESULTS, "bench_boilerplate_cost", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
