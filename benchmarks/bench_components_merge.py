"""The components' middle pass (dedup's ``components_merge``) against star steps reading every file of the step
before, side by side.

The term it removes: each large-star or small-star step runs in P partitions, one task a partition, and each task
writes one file partitioned P ways; the next step's task reads its partition from every one of them: P x P ranged
reads a step (565^2 = 319 k at the 50 TB plan's first steps, ~3 MB each; docs/scale.md), and the first step reads
its span of every unit's edge file (units x P). Both grow with the corpus, so a step's reads grow with its square.
With the pass, each step's input files are first merged by chunk of its tasks and group of files
(``core.merge_plan.middle_pass``): chunks x files + tasks x groups reads, ~partitions^1.5.

The graph is dedup-shaped (``bench_components.graph``: Zipf-sized clusters, each a random tree, and a giant
drifting chain of near copies), split over ``--units`` edge files written in ``--partitions`` partitions (a
global phase's units), and the memory budget is the one that gives the first step ``--partitions`` partitions (the
stage's rule: later steps shrink with the live edges). Each run calls ``connected_components`` in-process, one
worker, ``merge=off`` and ``merge=auto`` alternated (A B, B A, ...), on a local folder and on an S3 bucket (moto on
loopback: a real HTTP request per read). Recorded per run: wall and CPU seconds, the ranged reads of step files
and of merged files (``core.lsh._read_range`` calls), the steps that merged, and a digest of the labels (the same
in every run, or the benchmark fails).

    python benchmarks/bench_components_merge.py [--units 48 --partitions 48 --nodes 60000 --repeats 3] [--render]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from airflow_curation.core import storage  # noqa: E402
from airflow_curation.core.components import EDGE_ROW_BYTES, STEP_ROW_BYTES, connected_components, write_edges  # noqa: E402
from airflow_curation.core.lsh import read_partition  # noqa: E402
from benchmarks.bench_components import graph  # noqa: E402
from benchmarks.bench_export_merge import counted_reads, loopback_s3, off_on_cells, off_on_runs  # noqa: E402
from benchmarks.proc_stats import cpu  # noqa: E402
from benchmarks.results import measure_or_render  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "components_merge.json"
OUT_PARTITIONS = 16


def write_units(root: str, a: np.ndarray, b: np.ndarray, units: int, partitions: int) -> list[str]:
    """The edges split over ``units`` files, each written in ``partitions`` partitions (as a unit writes them)."""
    uris = [storage.join(root, "edges", f"unit-{u:05d}.arrow") for u in range(units)]
    for uri, part in zip(uris, np.array_split(np.arange(a.size), units)):
        write_edges(uri, a[part], b[part], partitions)
    return uris


def label_digest(labels: list[str]) -> tuple[int, int]:
    """(labelled nodes, an order-free digest of every (node, label))."""
    h, n = np.uint64(0), 0
    for q in range(OUT_PARTITIONS):
        r = read_partition(labels, q, {"node": np.uint64, "label": np.uint64})
        with np.errstate(over="ignore"):
            h += (r["node"] * np.uint64(0x9E3779B97F4A7C15) ^ r["label"]).sum(dtype=np.uint64)
        n += r["node"].size
    return n, int(h)


def run_once(root: str, units: list[str], mode: str, budget: int, edges: int, args, k: int) -> dict:
    work = storage.join(root, f"cc-{mode}-{k}")
    with counted_reads("merged") as reads:
        c0, w0 = cpu(), time.perf_counter()
        got = connected_components(
            units,
            work,
            args.partitions,
            OUT_PARTITIONS,
            memory_budget=budget,
            merge=mode,
            input_bytes=edges * EDGE_ROW_BYTES,
        )
        c, w = cpu() - c0, time.perf_counter() - w0
    labelled, digest = label_digest(got.labels)
    fs, path = storage.filesystem(work)
    fs.rm(path, recursive=True)
    return {
        "mode": "off" if mode == "off" else "on",
        "wall_s": round(w, 3),
        "cpu_s": round(c, 3),
        "reads": reads,
        "counted_reads": got.reads,
        "merged_steps": got.merged,
        "rounds": got.rounds,
        "steps": list(got.steps),
        "labelled": labelled,
        "digest": digest,
    }


def measure(args) -> dict:
    a, b = graph(args.nodes, args.giant, 7)
    edges = 2 * a.size  # directed rows, both ways
    # the budget that gives the first step --partitions partitions (partitions_for's 4x expansion)
    budget = edges * EDGE_ROW_BYTES * 4 // args.partitions
    results: dict = {
        "command": "python " + " ".join(sys.argv),
        "units": args.units,
        "partitions": args.partitions,
        "nodes": args.nodes,
        "giant": args.giant,
        "directed_edges": int(edges),
        "memory_budget": int(budget),
        "cores": os.cpu_count(),
        "lakes": {},
    }
    base = tempfile.mkdtemp()
    try:
        with loopback_s3(base, "bench-components") as bucket:
            for where, root in (("local", os.path.join(base, "lake")), ("s3", f"{bucket}/lake")):
                if args.local_only and where == "s3":
                    continue
                units = write_units(root, a, b, args.units, args.partitions)
                lake = off_on_runs(
                    args.repeats, lambda mode, r: run_once(root, units, mode, budget, edges, args, r), where, "auto"
                )
                if len({(x["labelled"], x["digest"]) for x in lake["runs"]}) != 1:
                    raise SystemExit(f"{where}: the labels differ between runs")
                results["lakes"][where] = lake
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return results


def render(results: dict) -> str:
    lines = [
        "## Dedup's components: star steps reading merged inputs (`bench_components_merge.py`)",
        "",
        f"A dedup-shaped graph ({results['nodes']:,} nodes in Zipf-sized clusters and a drifting chain of "
        f"{results['giant']:,}: {results['directed_edges']:,} directed edges) over {results['units']} unit edge "
        f"files written in {results['partitions']} partitions, `memory_budget` {results['memory_budget']:,} (the "
        "first step in that many partitions, later ones in what the live edges need): each step's task reading its "
        "span of every file of the step before, the shape of the 50 TB plan's first steps (565 x 565 reads). "
        "`connected_components` in-process, one worker, `merge=off` and `auto` (the stage's default) alternated; "
        "on a local folder and an S3 bucket (moto on loopback). Reads: ranged reads of step files + merged files. "
        "Every run kept; the labels are the same in every run (a digest of each node's label).",
        "",
        "| lake | merge | reads (steps + merged) | wall s median (min-max) | CPU s median (min-max) | wall off / on "
        "| steps merged | rounds |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for where, lake in results["lakes"].items():
        for mode, (rs, cells) in off_on_cells(lake["runs"]).items():
            merged = ", ".join(str(n) for n in sorted({r["merged_steps"] for r in rs}))
            rounds = ", ".join(str(n) for n in sorted({r["rounds"] for r in rs}))
            lines.append(f"| {where} | {mode} | {cells} | {merged} | {rounds} |")
    loads = [x for lake in results["lakes"].values() for x in lake["load_1min"]]
    steps = next(iter(results["lakes"].values()))["runs"][0]["steps"]
    piece = results["directed_edges"] * STEP_ROW_BYTES / results["partitions"] ** 2
    lines += [
        "",
        f"A read here is ~{piece:,.0f} bytes (the first steps' edges over {results['partitions']} x "
        f"{results['partitions']} pieces); at the 50 TB plan ~3 MB, where the pass is for the request count (565 x "
        "565 a step; docs/scale.md: 1.38 M step reads -> 0.09 M on 16 nodes) and its copy (a step's edges written "
        "and read once more) weighs more than here.",
        "",
        f"Directed edges each step left alive: {', '.join(f'{s:,}' for s in steps)}. Load (1-minute average, "
        f"before and after each run): {min(loads):.1f}-{max(loads):.1f} on {results['cores']} cores. JSON: "
        f"`benchmarks/results/components_merge.json`. Command: `{results['command']}` (`--render` rebuilds this "
        "block from the JSON).",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--units", type=int, default=48)
    ap.add_argument("--partitions", type=int, default=48)
    ap.add_argument("--nodes", type=int, default=60_000, help="nodes in Zipf-sized clusters")
    ap.add_argument("--giant", type=int, default=5_000, help="nodes of the drifting chain")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--local-only", action="store_true", help="skip the S3 lake (a smoke run)")
    ap.add_argument("--render", action="store_true")
    args = ap.parse_args()
    measure_or_render(OUT, "bench_components_merge", lambda: measure(args), render, args.render)


if __name__ == "__main__":
    main()
