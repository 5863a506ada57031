"""Ingest's check of caller ids across units (``id_field``): memory and CPU per row, routed against all at once.

Peer: the method before (3ba1f79, kept below as ``all_at_once``): a hash of every id of the run in memory,
concatenated and sorted. Routed: ``core/unique_ids.repeated_ids`` with ``--rows-in-memory`` records a
partition (small here, so that both sizes route into several partitions as the plan's corpus would). Each
size and method runs in a fresh process (peak RSS growth from /proc's VmHWM, CPU seconds), A and B
alternated, every run kept; the marginal bytes and CPU per row are taken between the two sizes.

    python benchmarks/bench_unique_ids.py --sizes 4000000 16000000 --repeats 3
    python benchmarks/bench_unique_ids.py --render      # RESULTS.md's block from the committed JSON
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.results import RESULTS, replace_block  # noqa: E402

JSON = Path(__file__).resolve().parent / "results" / "unique_ids.json"
ROWS_PER_SHARD = 500_000
REPEATS_PER_SHARD = 3  # ids also kept by an earlier shard

_CHILD = """
import json, sys
from benchmarks.proc_stats import cpu, hwm
import numpy as np, pyarrow.parquet as pq, xxhash
from airflow_curation.core.manifest import ShardEntry
from airflow_curation.core.unique_ids import repeated_ids

def all_at_once(shards):  # the method before: every id's hash in memory, then the rows whose hash repeats
    hashes = [np.fromiter((xxhash.xxh64_intdigest(i.encode()) for i in pq.read_table(s.uri, columns=["id"])
              .to_pydict()["id"]), np.uint64) for s in shards]
    values, counts = np.unique(np.concatenate(hashes), return_counts=True)
    suspects = values[counts > 1]
    first, found = {}, []
    for s, h in zip(shards, hashes):
        rows = np.flatnonzero(np.isin(h, suspects))
        if not len(rows):
            continue
        cols = pq.read_table(s.uri, columns=["id", "source"]).to_pydict()
        for r in rows.tolist():
            place = (s.shard_id, r, cols["source"][r])
            i = cols["id"][r]
            if i in first:
                found.append((i, first[i], place))
            else:
                first[i] = place
    return found

method, rows_in_memory, files = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
shards = [ShardEntry(shard_id=f"s{k:04d}", uri=f, rows=pq.ParquetFile(f).metadata.num_rows, bytes=0, checksum="")
          for k, f in enumerate(files)]
base, c0 = hwm(), cpu()
found = all_at_once(shards) if method == "all_at_once" else repeated_ids(shards, rows_in_memory)
print(json.dumps({"repeats": len(found if method == "all_at_once" else found.listed), "rss_growth": hwm() - base, "cpu_s": cpu() - c0}))
"""


def write_shards(folder: str, rows: int) -> list[str]:
    """``rows`` ids of 36 characters (UUID-like) in shards of ``ROWS_PER_SHARD``; each shard after the first
    repeats ``REPEATS_PER_SHARD`` ids of the one before."""
    rng = np.random.default_rng(0)
    files, previous = [], []
    for k in range(max(1, rows // ROWS_PER_SHARD)):
        ids = [
            f"{a:016x}-{b:019d}" for a, b in zip(rng.integers(0, 2**63, ROWS_PER_SHARD).tolist(), range(ROWS_PER_SHARD))
        ]
        ids = [f"{k:04d}{i[4:]}" for i in ids]
        if k:
            ids[:REPEATS_PER_SHARD] = previous[-REPEATS_PER_SHARD:]
        previous = ids
        files.append(os.path.join(folder, f"s{k:04d}.parquet"))
        pq.write_table(pa.table({"id": ids, "source": ["in.jsonl"] * len(ids)}), files[-1])
    return files


def run(method: str, rows_in_memory: int, files: list[str]) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, method, str(rows_in_memory), *files],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
    )
    return json.loads(out.stdout) | {"load_1min": os.getloadavg()[0]}


def measure(args) -> dict:
    results = {
        "command": "python " + " ".join(sys.argv),
        "rows_in_memory": args.rows_in_memory,
        "rows_per_shard": ROWS_PER_SHARD,
        "cpus": os.cpu_count(),
        "sizes": {},
    }
    for rows in args.sizes:
        with tempfile.TemporaryDirectory() as folder:
            files = write_shards(folder, rows)
            runs = {"all_at_once": [], "routed": []}
            for r in range(args.repeats):
                order = ["all_at_once", "routed"] if r % 2 == 0 else ["routed", "all_at_once"]
                for method in order:
                    runs[method].append(run(method, args.rows_in_memory, files))
                    print(rows, method, runs[method][-1], flush=True)
            results["sizes"][str(rows)] = {"shards": len(files), "runs": runs}
    return results


def render(results: dict) -> str:
    sizes = sorted(results["sizes"], key=int)
    med = {
        (s, m, k): statistics.median(r[k] for r in results["sizes"][s]["runs"][m])
        for s in sizes
        for m in ("all_at_once", "routed")
        for k in ("rss_growth", "cpu_s")
    }
    loads = [r["load_1min"] for s in sizes for m in ("all_at_once", "routed") for r in results["sizes"][s]["runs"][m]]
    lines = [
        f"Command: `{results['command']}` ({results['cpus']} cores, load {min(loads):.1f}-{max(loads):.1f}; "
        f"shards of {results['rows_per_shard']:,} ids; routed with {results['rows_in_memory']:,} records a "
        "partition). Each cell the median of the runs (every run in `benchmarks/results/unique_ids.json`), a "
        "fresh process each, the two methods alternated. `all_at_once`: the method before (3ba1f79), every id's "
        "hash held and sorted; `routed`: `core/unique_ids.py`. Every shard holds a repeated id, so the "
        "routed method reads every shard twice here (at most once more where repeats are rare).",
        "",
        "| rows | method | peak RSS growth (MB) | spread | CPU-s | spread |",
        "|---:|---|---:|---|---:|---|",
    ]
    for s in sizes:
        for m in ("all_at_once", "routed"):
            runs = results["sizes"][s]["runs"][m]
            rss = [r["rss_growth"] / 1e6 for r in runs]
            cpu = [r["cpu_s"] for r in runs]
            lines.append(
                f"| {int(s):,} | {m} | {med[(s, m, 'rss_growth')] / 1e6:.0f} | {min(rss):.0f}-{max(rss):.0f} | "
                f"{med[(s, m, 'cpu_s')]:.1f} | {min(cpu):.1f}-{max(cpu):.1f} |"
            )
    lo, hi = sizes[0], sizes[-1]
    d = int(hi) - int(lo)
    lines.append("")
    lines.append(f"Marginal per row between {int(lo):,} and {int(hi):,} rows (medians):")
    for m in ("all_at_once", "routed"):
        mem = (med[(hi, m, "rss_growth")] - med[(lo, m, "rss_growth")]) / d
        cpu = (med[(hi, m, "cpu_s")] - med[(lo, m, "cpu_s")]) / d * 1e9
        lines.append(f"- {m}: {mem:.1f} bytes of memory and {cpu:.0f} ns of CPU a row")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[4_000_000, 16_000_000])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rows-in-memory", type=int, default=2_000_000)
    p.add_argument("--render", action="store_true", help="rebuild RESULTS.md's block from the committed JSON")
    args = p.parse_args()
    if args.render:
        results = json.loads(JSON.read_text())
    else:
        results = measure(args)
        JSON.write_text(json.dumps(results, indent=1) + "\n")
    text = render(results)
    print(text)
    replace_block(RESULTS, "unique_ids", "## Ingest's id check across units (`id_field`)\n\n" + text)


if __name__ == "__main__":
    main()
