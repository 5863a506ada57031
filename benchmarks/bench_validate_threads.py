"""Validate's merge on 1 and on more threads: the signal statistics over a lake's attrs files, and the key counting.

A split validate run's merge computes every numeric signal's count, mean, histogram and exact quantiles over the
whole lake's attrs files (``stages.validate.bounded.column_stats``): DuckDB's queries on its ``threads``, and the
histogram and selection passes in Arrow and numpy (``arrow_scan``), which read the files on one thread before and
now on ``threads`` threads, each its own run of files. This times that call alone in a fresh process (wall and
CPU seconds), the thread counts alternated, every run kept, and checks that every run gives the same statistics.
The merge's other pass over the whole lake, distinct ids (``partials.distinct_ids``: a partition of keys at a time
across every task's key file), is timed the same way on key files written from the lake's shards as ``--tasks``
tasks write them (partitions of ``--ids-per-pass`` keys).

    python benchmarks/bench_validate_threads.py --lake <lake> --dataset scale --threads 1,2 --rounds 5
        [--baseline-tree <the code before>]
    python benchmarks/bench_validate_threads.py --render
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
import pyarrow.parquet as pq  # noqa: E402

from benchmarks.proc_stats import run_in_tree  # noqa: E402
from benchmarks.results import measure_or_render  # noqa: E402

_CHILD = """
import hashlib, inspect, json, os, sys, time
import duckdb, pyarrow as pa, pyarrow.parquet as pq
from airflow_curation.stages.validate import bounded

threads, files = int(sys.argv[1]), sys.argv[2:]
schema = pq.read_schema(files[0])
cols = [f.name for f in schema if pa.types.is_floating(f.type) or pa.types.is_integer(f.type)]
con = duckdb.connect()
con.execute(f"SET threads = {threads}")
run = lambda sql: con.execute(sql).fetchall()
rel = f"read_parquet({files}, union_by_name = true)"
w0, c0 = time.perf_counter(), time.process_time()
kw = {"threads": threads} if "threads" in inspect.signature(bounded.column_stats).parameters else {}
got = bounded.column_stats(run, [rel], [(c, c) for c in cols], files=files, **kw)
wall, cpu = time.perf_counter() - w0, time.process_time() - c0
digest = hashlib.sha256(json.dumps(got, sort_keys=True, default=repr).encode()).hexdigest()
print(json.dumps({"wall_s": wall, "cpu_s": cpu, "columns": len(cols), "digest": digest}))
"""


TITLES = {"validate_threads": "8 large attrs files", "validate_threads_small_files": "329 small attrs files"}

_KEYS_CHILD = """
import inspect, json, sys, time
from airflow_curation.stages.validate import partials

threads, uris = int(sys.argv[1]), sys.argv[2:]
w0, c0 = time.perf_counter(), time.process_time()
kw = (threads,) if "threads" in inspect.signature(partials.distinct_ids).parameters else ()
got = partials.distinct_ids(uris, *kw)
print(json.dumps({"wall_s": time.perf_counter() - w0, "cpu_s": time.process_time() - c0, "digest": str(got)}))
"""


def key_files(lake: str, dataset: str, folder: str, tasks: int, ids_per_pass: int) -> tuple[list[str], int]:
    """The shards' ids as ``tasks`` tasks of a split run write them: ``__p`` (a hash partition of about
    ``ids_per_pass`` keys), then ``key``, sorted by ``__p``; and the keys written."""
    import zlib

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    shards = sorted(glob.glob(os.path.join(lake, dataset, "shards", "**", "*.parquet"), recursive=True))
    ids = pa.concat_arrays([c for f in shards for c in pq.read_table(f, columns=["id"]).column("id").chunks])
    parts = max(1, -(-len(ids) // ids_per_pass))
    uris = []
    for t in range(tasks):
        mine = ids[t * len(ids) // tasks : (t + 1) * len(ids) // tasks]
        p = np.array([zlib.crc32(k.encode()) % parts for k in mine.to_pylist()], np.uint64)
        order = np.argsort(p, kind="stable")
        uris.append(os.path.join(folder, f"ids-{t:03d}.parquet"))
        pq.write_table(pa.table({"__p": p[order], "key": mine.take(pa.array(order))}), uris[-1], row_group_size=65_536)
    return uris, len(ids)


def measure(args) -> dict:
    files = sorted(
        glob.glob(os.path.join(args.lake, args.dataset, "attrs", args.stage, "**", "*.parquet"), recursive=True)
    )
    if not files:
        raise SystemExit(f"no attrs files of {args.stage} under {args.lake}/{args.dataset}")
    variants = {t: (str(REPO), int(t)) for t in args.threads.split(",")}
    if args.baseline_tree:  # the code before, on one thread (it had no other)
        variants = {"before": (os.path.abspath(args.baseline_tree), 1), **variants}
    results = {
        "command": "python " + " ".join(sys.argv),
        "name": args.name,
        "cpus": os.cpu_count(),
        "files": len(files),
        "rows": sum(pq.ParquetFile(f).metadata.num_rows for f in files),
        "runs": {v: [] for v in variants},
        "key_runs": {v: [] for v in variants},
    }
    with tempfile.TemporaryDirectory() as folder:
        uris, results["keys"] = key_files(args.lake, args.dataset, folder, args.tasks, args.ids_per_pass)
        results["key_files"] = len(uris)
        for r in range(args.rounds):
            for v in list(variants) if r % 2 == 0 else list(variants)[::-1]:
                tree, t = variants[v]
                got = run_in_tree(_CHILD, tree, [str(t), *files])
                results["runs"][v].append(got)
                keys = run_in_tree(_KEYS_CHILD, tree, [str(t), *uris])
                results["key_runs"][v].append(keys)
                print(v, got, keys, flush=True)
    return results


def _rows(runs: dict) -> list[str]:
    first = statistics.median(r["wall_s"] for r in next(iter(runs.values())))
    out = []
    for v, got in runs.items():
        wall = [r["wall_s"] for r in got]
        label = "the code before, 1" if v == "before" else v
        out.append(
            f"| {label} | {statistics.median(wall):.2f} ({min(wall):.2f}-{max(wall):.2f}) | "
            f"{statistics.median(r['cpu_s'] for r in got):.2f} | {first / statistics.median(wall):.2f}x |"
        )
    return out


def render(results: dict) -> str:
    runs, keys = results["runs"], results["key_runs"]
    loads = [r["load_1min"] for by in (runs, keys) for v in by.values() for r in v]
    same = all(len({r["digest"] for v in by.values() for r in v}) == 1 for by in (runs, keys))
    columns = next(iter(runs.values()))[0]["columns"]
    head = ["| threads | wall s, median (min-max) | CPU s, median | wall, first row / this |", "|---|---|---:|---:|"]
    return "\n".join(
        [
            f"## Validate's merge on threads: {TITLES.get(results['name'], results['name'])} "
            "(`benchmarks/bench_validate_threads.py`)",
            "",
            f"Command: `{results['command']}` ({results['cpus']} cores, load {min(loads):.1f}-{max(loads):.1f}); "
            "each run a fresh process, the thread counts alternated, every run in "
            f"`benchmarks/results/{results['name']}.json`. The same results in every run: {same}.",
            "",
            f"`column_stats` of {columns} numeric columns over {results['files']:,} attrs files "
            f"({results['rows']:,} rows), DuckDB's queries and the Arrow passes on the same threads:",
            "",
            *head,
            *_rows(runs),
            "",
            f"`distinct_ids` over {results['key_files']} tasks' key files ({results['keys']:,} keys):",
            "",
            *head,
            *_rows(keys),
        ]
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lake")
    p.add_argument("--dataset", default="scale")
    p.add_argument("--stage", default="preprocess", help="whose attrs files")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--baseline-tree", help="the code before, run on one thread beside this tree's counts")
    p.add_argument("--tasks", type=int, default=8, help="key files, as a split run's tasks write them")
    p.add_argument("--ids-per-pass", type=int, default=20_000, help="keys a partition (the setting's default is 1 M)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--name", default="validate_threads", help="the JSON in benchmarks/results/ and the block")
    p.add_argument("--render", action="store_true")
    args = p.parse_args()
    if not args.render and not args.lake:
        p.error("--lake is needed to measure")
    measure_or_render(
        REPO / "benchmarks" / "results" / f"{args.name}.json",
        args.name,
        lambda: measure(args),
        render,
        args.render,
        after="bench_validate_engines",
    )


if __name__ == "__main__":
    main()
