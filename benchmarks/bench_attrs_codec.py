"""CPU of writing preprocess's attrs files with each Parquet codec, alternated, in one process.

Reads every attrs file of a lake's preprocess run (``bench_preprocess_lake.py`` leaves one) into memory, then
writes them all to memory with ``shards.parquet_writer`` under each codec in turn, ``--rounds`` times (codecs
alternated within each round, order reversed every other round); per codec the CPU s of each round and the bytes.

    PYTHONPATH=$PWD python benchmarks/bench_attrs_codec.py --lake /tmp/lake --rounds 5 \\
        --out benchmarks/results/attrs_codec.json
"""

from __future__ import annotations

import argparse
import glob
import io
import json
import os
import statistics
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

from airflow_curation.core.shards import parquet_writer

CODECS = ("zstd", "lz4")


def write_all(tables: list, codec: str, batch_rows: int) -> tuple[float, int]:
    started = time.process_time()
    size = 0
    for table in tables:
        sink = io.BytesIO()
        with parquet_writer(sink, table.schema, codec) as writer:
            for offset in range(0, table.num_rows, batch_rows):  # as write_attrs: one write per batch
                writer.write_table(table.slice(offset, batch_rows), row_group_size=batch_rows)
        size += sink.tell()
    return time.process_time() - started, size


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lake", required=True)
    ap.add_argument("--dataset", default="scale")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch-rows", type=int, default=4096)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    files = sorted(glob.glob(os.path.join(args.lake, args.dataset, "attrs", "preprocess", "*", "*.parquet")))
    if not files:
        raise SystemExit(f"no preprocess attrs under {args.lake}")
    tables = [pq.read_table(f) for f in files]
    record = {"files": len(files), "rows": sum(t.num_rows for t in tables), "load": [os.getloadavg()[0]]}
    runs: dict[str, list[float]] = {c: [] for c in CODECS}
    sizes = {}
    for r in range(args.rounds):
        for codec in CODECS if r % 2 == 0 else CODECS[::-1]:
            cpu, sizes[codec] = write_all(tables, codec, args.batch_rows)
            runs[codec].append(cpu)
    record["load"].append(os.getloadavg()[0])
    for codec in CODECS:
        v = runs[codec]
        record[codec] = {
            "cpu_s": v,
            "median": statistics.median(v),
            "min": min(v),
            "max": max(v),
            "bytes": sizes[codec],
        }
        print(
            f"{codec}: CPU s median {statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f}), {sizes[codec] / 1e6:.1f} MB"
        )
    ratios = [a / b for a, b in zip(runs["zstd"], runs["lz4"])]
    record["zstd_over_lz4"] = {"per_round": ratios, "median": statistics.median(ratios)}
    print(f"zstd / lz4 CPU per round: median {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
