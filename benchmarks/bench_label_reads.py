"""Phase 3's read of one shard's labels, at plan scale: its whole output partition against its own batch.

Dedup's global phase gathers the labels (and the exact duplicates) into ``MAX_OUT_PARTITIONS`` (256) files,
shard ``i``'s in file ``i % 256``. Read whole, a file costs every shard that reads it the rows of all the
shards that share it, ``shards / 256`` of them: at 50,000 shards of 1 GB, 195 shards' labels per shard, a
term that grows with shards x shards. Gathered one batch per shard (``lsh.gather_partition(by_shard=True)``),
a shard reads its own batch.

This builds one gathered file as the plan would hold it (``--shards`` / 256 shards sharing it, each with
``--labels`` labelled rows, node keys as the stage makes them) in both layouts, then times the read of one
shard's rows (``lsh.read_partition`` and the filter phase 3 did, against ``lsh.read_gathered``), alternated,
``--repeats`` times each, CPU seconds of this process.

    python benchmarks/bench_label_reads.py --shards 50000 --labels 52000 --json benchmarks/results/label_reads.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from airflow_curation.core.components import LABEL_COLUMNS
from airflow_curation.core.lsh import node_keys, read_gathered, read_partition, shard_of, write_partitioned
from airflow_curation.stages.dedup.stage import MAX_OUT_PARTITIONS


def build(folder: str, shards: int, labels: int, seed: int = 0) -> tuple[str, str, list[int]]:
    """The gathered file of output partition 0, whole and by shard; the shards it covers."""
    rng = np.random.default_rng(seed)
    covered = list(range(0, shards, MAX_OUT_PARTITIONS))
    rows = max(labels * 4, 1)  # a shard's rows, a quarter of them labelled
    node = np.concatenate([node_keys(s, np.sort(rng.choice(rows, labels, replace=False))) for s in covered])
    keeper = node[rng.integers(0, node.size, node.size)]  # a label is some keeper's node key
    columns = {"node": node, "label": np.minimum(node, keeper)}
    whole, by_shard = os.path.join(folder, "whole.arrow"), os.path.join(folder, "by_shard.arrow")
    write_partitioned(whole, columns, np.zeros(node.size, np.int64))
    write_partitioned(by_shard, columns, shard_of(node))
    return whole, by_shard, covered


def read_whole(uri: str, shard: int) -> int:
    labels = read_partition([uri], 0, LABEL_COLUMNS)
    mine = shard_of(labels["node"]) == shard
    return int(mine.sum())


def read_own(uri: str, shard: int) -> int:
    return int(read_gathered(uri, LABEL_COLUMNS, shard)["node"].size)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", type=int, nargs="+", default=[2623, 50000])
    ap.add_argument("--labels", type=int, nargs="+", default=[321, 52000], help="labelled rows per shard")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    out = {
        "command": "python benchmarks/bench_label_reads.py " + " ".join(sys.argv[1:]),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_start": os.getloadavg(),
        "cases": [],
    }
    for shards, labels in zip(args.shards, args.labels, strict=True):
        with tempfile.TemporaryDirectory() as d:
            whole, by_shard, covered = build(d, shards, labels)
            target = covered[len(covered) // 2]
            runs: dict[str, list[float]] = {"whole partition": [], "own batch": []}
            for r in range(args.repeats):
                pairs = [("whole partition", read_whole, whole), ("own batch", read_own, by_shard)]
                for name, fn, uri in pairs if r % 2 == 0 else pairs[::-1]:
                    t = time.process_time()
                    got = fn(uri, target)
                    runs[name].append(time.process_time() - t)
                    assert got == labels, (name, got, labels)
            case = {
                "shards": shards,
                "labels_per_shard": labels,
                "shards_per_file": len(covered),
                "file_rows": len(covered) * labels,
                "file_bytes": {"whole": os.path.getsize(whole), "by_shard": os.path.getsize(by_shard)},
                "cpu_s": runs,
                "median_ms": {k: statistics.median(v) * 1e3 for k, v in runs.items()},
            }
            # what every shard of the plan pays for it, summed
            case["plan_cpu_h"] = {k: v * shards / 3.6e6 for k, v in case["median_ms"].items()}
            out["cases"].append(case)
            print(
                f"{shards} shards, {labels} labels a shard ({len(covered)} shards a file): whole partition "
                f"{case['median_ms']['whole partition']:.2f} ms, own batch {case['median_ms']['own batch']:.2f} ms "
                f"per shard; over every shard {case['plan_cpu_h']['whole partition']:.3f} against "
                f"{case['plan_cpu_h']['own batch']:.3f} CPU-hours",
                flush=True,
            )
    out["load_end"] = os.getloadavg()
    Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
