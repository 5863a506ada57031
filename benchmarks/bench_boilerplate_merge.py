"""Boilerplate's middle pass (``spill_merge``) against the global step reading every shard's spill, side by side.

The term it removes: step 2 sums one partition at a time (each sized to ``memory_budget``), so it reads each
partition's piece of every shard's count spill: partitions x shards ranged reads, and both grow with the
corpus (3.3 G reads of ~4 KB at the 50 TB plan once the partitions fit the budget, docs/boilerplate.md *At
scale*). With it, chunks of partitions of groups of shards are merged first, and a partition is read from one
file a group. Here many small shards and many partitions put that term where the plan has it (reads of ~1 KB).

The lake (``--shards`` Parquet shards of ``--docs`` pages each: a site's menu and footer lines on every page,
three of 400 related-article links, each page's own lines) is counted once (step 1, not timed); then each run removes
the global step's folder (its frequent lines, its ``_SUCCESS.json``) and runs the stage whole, in-process, one
worker, with ``spill_merge=off`` and ``on`` alternated (A B, B A, ...): the global step again (step 1 and 3
find their checkpoints). On a local lake and an S3 lake (moto on loopback: a real HTTP request per read).
Reported per run: wall and CPU seconds, the spill and merged files' ranged reads (``core.lsh._read_range``
calls), and the frequent lines found (the same in every run).

    python benchmarks/bench_boilerplate_merge.py [--shards 64 --docs 60 --partitions 128 --repeats 3] [--render]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from airflow_curation.core import storage  # noqa: E402
from airflow_curation.core.layout import Lake  # noqa: E402
from airflow_curation.core.lsh import partitions_for  # noqa: E402
from airflow_curation.core.manifest import Manifest, ShardEntry  # noqa: E402
from airflow_curation.core.merge_plan import merge_plan  # noqa: E402
from airflow_curation.core.shards import write_parquet  # noqa: E402
from airflow_curation.stages.base import StageRunner  # noqa: E402
from airflow_curation.stages.boilerplate.stage import MAX_PARTITIONS, BoilerplateStage, spill_estimate, spill_reads  # noqa: E402
from benchmarks.bench_export_merge import counted_reads, loopback_s3, off_on_cells, off_on_runs  # noqa: E402
from benchmarks.proc_stats import cpu  # noqa: E402
from benchmarks.results import measure_or_render  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "boilerplate_merge.json"
MENU = ["Home | Products | Docs | Blog | Contact", "Sign in", "Search this site"]
FOOTER = ["Copyright 2026 Example Corp. All rights reserved.", "Privacy policy | Cookie settings | Terms"]
WORDS = "the of and to in a is that for it as was with be by on not this are or from at data model page".split()


def _page(rnd: random.Random, shard: int, doc: int) -> str:
    own = [" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(6, 16))) + f" ({shard}.{doc}.{k})" for k in range(30)]
    shared = [f"Related article {rnd.randint(0, 400)}" for _ in range(3)]  # 3 of 400 links shared across pages
    return "\n".join(MENU + own + shared + FOOTER)


def write_lake(lake: Lake, shards: int, docs: int) -> str:
    """``shards`` shards of ``docs`` pages and a complete ingest manifest naming them (any storage)."""
    rnd = random.Random(0)
    entries = []
    for s in range(shards):
        sid = f"part-{s:05d}"
        table = pa.table({"id": [f"d{s}-{i}" for i in range(docs)], "text": [_page(rnd, s, i) for i in range(docs)]})
        nbytes, checksum = write_parquet(lake.shard_uri(sid), table)
        entries.append(ShardEntry(sid, lake.shard_uri(sid), rows=docs, bytes=nbytes, checksum=checksum))
    m = Manifest(
        dataset=lake.dataset, stage="ingest", run_id="in", fingerprint="-", lake=lake.to_dict(), shards=entries
    )
    m.status = "complete"
    return m.write(lake.manifest_uri("in", "ingest"))


def _stage(lake: Lake, manifest: str, mode: str, args) -> BoilerplateStage:
    config = {
        "input_manifest": manifest,
        "min_documents": 5,
        "partitions": args.partitions,
        "memory_budget": args.memory_budget,
        "spill_merge": mode,
    }
    return BoilerplateStage(lake, config, "bench")


def run_once(lake: Lake, manifest: str, mode: str, args) -> dict:
    for done in storage.glob(lake.path("boilerplate", "*", "_SUCCESS.json")):  # the global step, to redo
        fs, path = storage.filesystem(done)
        fs.rm(path.rsplit("/", 1)[0], recursive=True)
    with counted_reads("merged") as reads:
        c0, w0 = cpu(), time.perf_counter()
        m = StageRunner(_stage(lake, manifest, mode, args)).run()
        c, w = cpu() - c0, time.perf_counter() - w0
    assert m.status == "complete", m.status
    (done,) = storage.glob(lake.path("boilerplate", "*", "_SUCCESS.json"))
    step = storage.read_json(done)
    return {
        "mode": mode,
        "wall_s": round(w, 3),
        "cpu_s": round(c, 3),
        "reads": reads,
        "planned_reads": step["spill_reads"],
        "middle_pass": step["middle_pass"],
        "frequent_lines": step["frequent_lines"],
        "distinct_lines": step["distinct_lines"],
    }


def plan_rows(budgets: tuple[int, ...] = (512 << 20, 2 << 30)) -> list[dict]:
    """docs/boilerplate.md *At scale*: partitions and the global step's reads at 0.1-50 TB (286 M documents a TB,
    1 GB shards, as docs/scale.md), as the stage plans them, without and with the middle pass."""
    rows = []
    for tb in (0.1, 1, 10, 50):
        for budget in budgets:
            docs, shards = int(tb * 286e6), round(tb * 1000)
            est = spill_estimate(docs)
            parts = partitions_for(est, budget, maximum=MAX_PARTITIONS)
            shape = merge_plan(parts, shards, est, budget)
            groups = -(-shards // shape[1]) if shape else None
            merged = spill_reads(parts, shards, shape[0], groups) if shape else None
            rows.append(
                {
                    "tb": tb,
                    "budget": budget,
                    "spill": est,
                    "partitions": parts,
                    "partition_bytes": est // parts,
                    "direct": spill_reads(parts, shards),
                    "merged": merged,
                    "shape": shape,
                }
            )
    return rows


def measure(args) -> dict:
    results: dict = {
        "command": "python " + " ".join(sys.argv),
        "shards": args.shards,
        "docs_per_shard": args.docs,
        "partitions": args.partitions,
        "memory_budget": args.memory_budget,
        "cores": os.cpu_count(),
        "lakes": {},
    }
    base = tempfile.mkdtemp()
    try:
        with loopback_s3(base, "bench-boilerplate") as bucket:
            for where, root in (("local", os.path.join(base, "lake")), ("s3", f"{bucket}/lake")):
                lake = Lake(root, "bench")
                manifest = write_lake(lake, args.shards, args.docs)
                StageRunner(_stage(lake, manifest, "off", args)).run()  # step 1's counts, once (not timed)
                results["lakes"][where] = off_on_runs(
                    args.repeats, lambda mode, _: run_once(lake, manifest, mode, args), where
                )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return results


def render(results: dict) -> str:
    lines = [
        "## Boilerplate's middle pass: count spills merged by chunk of partitions (`bench_boilerplate_merge.py`)",
        "",
        f"{results['shards']} shards of {results['docs_per_shard']} pages (a site's menu and footer on every page, "
        f"three of 400 related-article links, each page's own), {results['partitions']} partitions, `memory_budget` "
        f"{results['memory_budget']:,}: step 2 reading a ~1 KB piece of every shard's spill a partition, the shape "
        "of the 50 TB plan (docs/boilerplate.md *At scale*). The stage whole, one worker, in-process, its counts "
        "done once before (each run redoes the global step), `spill_merge=off` and `on` alternated; on a local "
        "lake and an S3 lake (moto on loopback). Reads: ranged reads of spill or merged files. Every run kept.",
        "",
        "| lake | mode | reads (spill + merged) | wall s median (min-max) | CPU s median (min-max) | wall off / on "
        "| frequent lines |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for where, lake in results["lakes"].items():
        for mode, (rs, cells) in off_on_cells(lake["runs"]).items():
            found = ", ".join(str(n) for n in sorted({r["frequent_lines"] for r in rs}))
            lines.append(f"| {where} | {mode} | {cells} | {found} |")
    shapes = {
        json.dumps(r["middle_pass"]) for lake in results["lakes"].values() for r in lake["runs"] if r["middle_pass"]
    }
    loads = [x for lake in results["lakes"].values() for x in lake["load_1min"]]
    lines += [
        "",
        f"The middle pass's shape (the stage's `merge_plan`): {'; '.join(sorted(shapes))}.",
        "",
        "At plan scale (the stage's own rule: `plan_rows()`; 286 M pages a TB, 1 GB shards):",
        "",
        "| corpus | memory_budget | estimated spill | partitions | a partition | reads without | reads with the middle pass |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in plan_rows():
        merged = f"{r['merged']:,}" if r["merged"] else "not planned"
        lines.append(
            f"| {r['tb']:g} TB | {r['budget'] >> 20:,} MiB | {r['spill'] / 1e12:.2f} TB | {r['partitions']:,} | "
            f"{r['partition_bytes'] / 1e6:.0f} MB | {r['direct']:,} | {merged} |"
        )
    lines += [
        "",
        f"Load (1-minute average, before and after each run): {min(loads):.1f}-{max(loads):.1f} on "
        f"{results['cores']} cores. JSON: `benchmarks/results/boilerplate_merge.json`. Command: "
        f"`{results['command']}` (`--render` rebuilds this block from the JSON).",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", type=int, default=64)
    ap.add_argument("--docs", type=int, default=60)
    ap.add_argument("--partitions", type=int, default=128)
    ap.add_argument("--memory-budget", type=int, default=1 << 20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--render", action="store_true")
    args = ap.parse_args()
    measure_or_render(OUT, "bench_boilerplate_merge", lambda: measure(args), render, args.render)


if __name__ == "__main__":
    main()
