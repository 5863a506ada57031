"""Export's middle pass (``spill_merge``) against the gather reading every spill file, side by side.

The term it removes: every gather unit reads its range of every spill file, units x shards ranged reads of
a few KB. Here many small packed shards and a small memory budget put that term where the 50 TB plan has it
(reads of ~2 KB here, ~43 KB at the plan, both far below what makes a read's fixed cost small). The export
stage runs whole, one worker, in-process, with ``spill_merge=off`` and ``on``,
alternated (A B, B A, ...), on a local lake and on an S3 lake (moto on loopback: a real HTTP request per
read); each run its own seed (no checkpoint reused). Reported per run: wall and CPU seconds and the spill
files' ranged reads (``core.lsh._read_range`` calls: one open, one index and one body read each); the files
each mode writes are the same bytes (``tests/export/test_export.py -k middle_pass``).

    python benchmarks/bench_export_merge.py [--shards 60 --sequences 40 --repeats 3] [--render]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from airflow_curation.core import lsh, storage  # noqa: E402
from airflow_curation.core.layout import Lake  # noqa: E402
from airflow_curation.core.merge_plan import merge_plan  # noqa: E402
from airflow_curation.stages.base import StageRunner  # noqa: E402
from airflow_curation.stages.export.stage import ExportStage, gather_units  # noqa: E402
from benchmarks.bench_export import VOCAB, cpu, write_input  # noqa: E402
from benchmarks.results import RESULTS, replace_block  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "export_merge.json"


def plan_reads(tokens_bytes: int = 30 * 10**12, shards: int = 50_000, budget: int = 8 << 30) -> tuple[int, int]:
    """The 50 TB plan's gather reads (docs/export.md *At 50 TB*: 30 TB of uint16 tokens, 50,000 packed shards,
    the default budget and file size), without and with the middle pass, as the stage plans them."""
    buckets = math.ceil(tokens_bytes / (1 << 30))
    units = gather_units(tokens_bytes, budget, 1, buckets)
    k, g = merge_plan(units, shards, tokens_bytes, budget)
    return units * shards, math.ceil(units / k) * shards + units * math.ceil(shards / g)


@contextlib.contextmanager
def loopback_s3(base: str, bucket: str):
    """A bucket on the tests' moto server (``tests/s3/conftest.py``), its storage options in effect."""
    import boto3

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
    from s3.conftest import start_moto

    from airflow_curation.core.storage_map import StorageMap

    proc, endpoint = start_moto(Path(base) / "moto.log")
    try:
        boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="k", aws_secret_access_key="s").create_bucket(
            Bucket=bucket
        )
        with storage.using(StorageMap({"s3": {"key": "k", "secret": "s", "endpoint_url": endpoint}})):
            yield f"s3://{bucket}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@contextlib.contextmanager
def counted_reads(merged_folder: str) -> Iterator[dict[str, int]]:
    """The ranged reads of spill files (``core.lsh._read_range`` calls) while in the block: ``merged`` those under
    a folder named ``merged_folder``, ``spill`` the others."""
    reads = {"spill": 0, "merged": 0}
    real = lsh._read_range

    def counted(uri, *a):
        reads["merged" if f"/{merged_folder}/" in uri else "spill"] += 1
        return real(uri, *a)

    lsh._read_range = counted
    try:
        yield reads
    finally:
        lsh._read_range = real


def run_once(lake: Lake, manifest: str, mode: str, seed: int, args) -> dict:
    with counted_reads("merge") as reads:
        c0, w0 = cpu(), time.perf_counter()
        m = StageRunner(
            ExportStage(
                lake,
                {
                    "input_manifest": manifest,
                    "seed": seed,
                    "file_size": args.file_size,
                    "vocab_size": VOCAB,
                    "memory_budget": args.memory_budget,
                    "spill_merge": mode,
                },
                f"{mode}-{seed}",
            )
        ).run()
        c, w = cpu() - c0, time.perf_counter() - w0
    return {
        "mode": mode,
        "seed": seed,
        "wall_s": round(w, 3),
        "cpu_s": round(c, 3),
        "units": len(m.units),
        "buckets": m.config["export"]["buckets"],
        "reads": reads,
    }


# The peak RSS from /proc (VmHWM), not getrusage (benchmarks/proc_stats.py says why).
_MEMORY_CHILD = """
import sys
from benchmarks.proc_stats import cpu, hwm
import pyarrow as pa
from airflow_curation.core.lsh import merge_partitions
uris, out, hi = sys.argv[1:-2], sys.argv[-2], int(sys.argv[-1])
base, c0 = hwm(), cpu()
rows = merge_partitions(uris, 0, hi, out)
print(rows, hwm() - base, pa.default_memory_pool().max_memory(), cpu() - c0)
"""


def memory(files: int = 8, rows: int = 16_000, seq_len: int = 2048, partitions: int = 100, repeats: int = 3) -> dict:
    """A merge unit's memory and CPU against the bytes of its range: ``files`` spill files of ``rows`` uint16
    sequences in ``partitions`` buckets, half the buckets merged in a fresh process ``repeats`` times (its RSS
    growth, pyarrow's pool peak and its CPU seconds each time)."""
    from airflow_curation.core.arrays import from_numpy
    from airflow_curation.core.lsh import node_keys, write_partitioned

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as base:
        uris = []
        for s in range(files):
            ids = pa.FixedSizeListArray.from_arrays(
                from_numpy(rng.integers(1, VOCAB, size=rows * seq_len, dtype=np.uint16)), seq_len
            )
            cols = {"node": node_keys(s, rows), "input_ids": ids, "n_tokens": np.full(rows, seq_len, np.int32)}
            uris.append(os.path.join(base, f"s{s}.arrow"))
            write_partitioned(uris[-1], cols, rng.integers(0, partitions, size=rows))
        runs = []
        for _ in range(repeats):
            got = subprocess.run(
                [sys.executable, "-c", _MEMORY_CHILD, *uris, os.path.join(base, "out.arrow"), str(partitions // 2)],
                capture_output=True,
                text=True,
                check=True,
                env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))},
            ).stdout.split()
            # the merge's CPU too: the plan's cost per byte of the middle pass (simulate_scale.py)
            runs.append(
                {"rows": int(got[0]), "rss_growth": int(got[1]), "pool_peak": int(got[2]), "cpu_s": float(got[3])}
            )
    data = runs[0]["rows"] * (seq_len * 2 + 8 + 4)  # ids, node key, n_tokens: the range decoded
    return {"files": files, "rows_per_file": rows, "range_bytes": data, "runs": runs, "load_1min": os.getloadavg()[0]}


def measure(args) -> dict:
    results: dict = {
        "command": "python " + " ".join(sys.argv),
        "shards": args.shards,
        "sequences_per_shard": args.sequences,
        "seq_len": args.seq_len,
        "memory_budget": args.memory_budget,
        "file_size": args.file_size,
        "cores": os.cpu_count(),
        "lakes": {},
        "memory": memory(),
    }
    base = tempfile.mkdtemp()
    try:
        with loopback_s3(base, "bench-export") as bucket:
            for where, root in (("local", os.path.join(base, "lake")), ("s3", f"{bucket}/lake")):
                lake = Lake(root, "bench")
                manifest, tokens = write_input(lake, args.shards, args.sequences, args.seq_len)
                runs = off_on_runs(
                    args.repeats, lambda mode, r: run_once(lake, manifest, mode, 2 * r + (mode == "on"), args), where
                )
                results["lakes"][where] = {"tokens": tokens, **runs}
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return results


def merge_cpu_s_per_gb(results: dict) -> float:
    """The merge's median CPU seconds per GB of its range (decoded), from the JSON: the plan's middle-pass term."""
    mem = results["memory"]
    return statistics.median(r["cpu_s"] for r in mem["runs"]) / mem["range_bytes"] * 1e9


def off_on_runs(repeats: int, run_once: Callable[[str, int], dict], where: str, on: str = "on") -> dict:
    """A middle-pass benchmark's runs on one lake: ``run_once(mode, round)`` with the pass ``off`` and ``on``
    alternated (off on, on off, ...), ``repeats`` rounds, every run kept and printed, and the 1-minute load before
    the first and after each (``{"runs": [...], "load_1min": [...]}``)."""
    load, runs = [os.getloadavg()[0]], []
    for r in range(repeats):
        for mode in ("off", on) if r % 2 == 0 else (on, "off"):
            runs.append(run_once(mode, r))
            print(where, json.dumps(runs[-1]), flush=True)
            load.append(os.getloadavg()[0])
    return {"runs": runs, "load_1min": load}


def off_on_cells(runs: list[dict]) -> dict[str, tuple[list[dict], str]]:
    """Per mode (``off``, ``on``): its runs and the cells ``reads (spill + merged) | wall s median (min-max) | CPU s
    median (min-max) | wall off / on`` (the ratio on the ``on`` row), of a middle-pass benchmark's table."""
    by = {m: [r for r in runs if r["mode"] == m] for m in ("off", "on")}
    walls = {m: statistics.median(r["wall_s"] for r in rs) for m, rs in by.items()}
    out = {}
    for mode, rs in by.items():
        w, c, reads = [r["wall_s"] for r in rs], [r["cpu_s"] for r in rs], rs[0]["reads"]
        ratio = f"{walls['off'] / walls['on']:.2f}x" if mode == "on" else ""
        out[mode] = (
            rs,
            f"{reads['spill']:,} + {reads['merged']:,} | {statistics.median(w):.2f} ({min(w):.2f}-{max(w):.2f}) | "
            f"{statistics.median(c):.2f} ({min(c):.2f}-{max(c):.2f}) | {ratio}",
        )
    return out


def render(results: dict) -> str:
    lines = [
        "## Export's middle pass: spill files merged by chunk of buckets (`bench_export_merge.py`)",
        "",
        f"{results['shards']} packed shards of {results['sequences_per_shard']} sequences x {results['seq_len']} "
        f"random ids (uint16), `file_size` {results['file_size']}, `memory_budget` {results['memory_budget']}: "
        "many gather units each reading a few KB of every spill file, the shape of the 50 TB plan's gather "
        "(docs/export.md). The whole export stage, one worker, in-process, `spill_merge=off` and `on` "
        "alternated, each run its own seed; on a local lake and an S3 lake (moto on loopback). "
        "Reads: ranged reads of spill or merged files (an open, an index and a body read each). Every run kept.",
        "",
        "| lake | mode | units | reads (spill + merged) | wall s median (min-max) | CPU s median (min-max) | "
        "wall off / on |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for where, lake in results["lakes"].items():
        for mode, (rs, cells) in off_on_cells(lake["runs"]).items():
            lines.append(f"| {where} | {mode} | {rs[0]['units']} | {cells} |")
    direct, merged = plan_reads()
    per_read = []
    for where, lake in results["lakes"].items():
        by = {m: [r for r in lake["runs"] if r["mode"] == m] for m in ("off", "on")}
        cpu = {m: statistics.median(r["cpu_s"] for r in rs) for m, rs in by.items()}
        reads = {m: sum(rs[0]["reads"].values()) for m, rs in by.items()}
        ms = 1000 * (cpu["off"] - cpu["on"]) / (reads["off"] - reads["on"])
        per_read.append(
            f"{where} {ms:.2f} ms (at the 50 TB plan: {direct * ms / 3.6e6:,.0f} CPU-hours for its "
            f"{direct:,} direct reads, {merged * ms / 3.6e6:,.0f} for the middle pass's {merged:,})"
        )
    loads = [x for lake in results["lakes"].values() for x in lake["load_1min"]]
    mem = results["memory"]
    rss = max(r["rss_growth"] for r in mem["runs"]) / mem["range_bytes"]
    pool = max(r["pool_peak"] for r in mem["runs"]) / mem["range_bytes"]
    cpus = [r["cpu_s"] for r in mem["runs"]]
    lines += [
        "",
        f"A merge unit's memory: {mem['files']} spill files of {mem['rows_per_file']:,} sequences, half their "
        f"buckets merged ({mem['range_bytes'] / 1e6:.0f} MB decoded) in a fresh process, {len(cpus)} runs: RSS "
        f"grew at most {rss:.2f}x that, pyarrow's pool peaked at {pool:.2f}x (the stage plans 2x: "
        f"`MERGE_EXPANSION`); CPU {statistics.median(cpus):.2f} s median ({min(cpus):.2f}-{max(cpus):.2f}), "
        f"{merge_cpu_s_per_gb(results):.2f} CPU-s per GB merged (load {mem['load_1min']:.1f}; `--memory-only` "
        "remeasures this line alone).",
        "",
        "CPU of this process per read saved (median CPU off - on, over the reads saved; the merge's own work "
        f"included): {'; '.join(per_read)}; the plan's reads from docs/export.md *At 50 TB*.",
        "",
        f"Load (1-minute average, before and after each run): {min(loads):.1f}-{max(loads):.1f} on "
        f"{results['cores']} cores. JSON: `benchmarks/results/export_merge.json`. Command: `{results['command']}` "
        "(`--render` rebuilds this table from the JSON).",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", type=int, default=60)
    ap.add_argument("--sequences", type=int, default=40)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--file-size", default="64KiB")
    ap.add_argument("--memory-budget", type=int, default=650_000)
    ap.add_argument("--render", action="store_true", help="rebuild the RESULTS.md block from the JSON only")
    ap.add_argument("--memory-only", action="store_true", help="remeasure the merge unit's memory and CPU alone")
    args = ap.parse_args()
    if args.memory_only:
        doc = json.loads(OUT.read_text())
        doc["memory"] = memory()
        doc["memory_command"] = "python " + " ".join(sys.argv)
        OUT.write_text(json.dumps(doc, indent=1) + "\n")
    elif not args.render:
        OUT.write_text(json.dumps(measure(args), indent=1) + "\n")
    replace_block(RESULTS, "bench_export_merge", render(json.loads(OUT.read_text())))


if __name__ == "__main__":
    main()
