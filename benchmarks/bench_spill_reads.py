"""Dedup's spill reads: CPU time per (partition, shard) pair as the LSH partition count grows, before and after.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_spill_reads.py [--partitions 18,1634,4096] [--files 8]
        [--rows-per-pair 256] [--sample 64] [--range 8] [--repeats 5] [--before-ref main] [--json PATH]

For each partition count P, ``--files`` spill files (one per shard) are written with P record batches of
``--rows-per-pair`` ``(bucket, node)`` rows each (random hashes, as phase 1 writes them), once by the code
at ``--before-ref`` (git; the landed reader, loaded from that commit) and once by this checkout. Then, for
``--sample`` contiguous partitions in the middle of the file, every (partition, file) pair is read by:

- ``before``: the landed reader, one partition at a time (an open and a JSON index parse per pair);
- ``after``: this checkout's reader, one partition at a time (an open and a binary index decode per pair:
  a unit of one partition, what the global phase runs when its units equal its partitions);
- ``after_range``: this checkout's reader, ranges of ``--range`` partitions (one open per file per range:
  a unit of several partitions).

CPU time of this process (``time.process_time``) per pair, the modes alternated in rotating order, each
measured ``--repeats`` times; median and spread (min-max) printed and written as JSON. Each mode checks it
read every row. The files are read from the page cache (local disk), so this is the per-pair CPU cost,
not the cost of a ranged GET on an object store.

With ``--shuffle SHARDS,ROWS,PARTITIONS`` it instead compares, on the same random ``(bucket, node)`` rows
(ROWS per shard), the spill files (each shard written partitioned, then every partition read from every
file) with a Dask DataFrame shuffle into the same partitions (``--shuffle-methods``: ``p2p``, ``tasks``), on an in-process
LocalCluster (one worker, two threads: no inter-process serialization, so Dask's figure is a floor).
CPU seconds of this process, wall seconds beside them, modes alternated, ``--repeats`` times.

With ``--bytes ROWS`` it instead measures what the partition count costs in spill *bytes*: one shard of ROWS
rows (random band hashes, ``--bands`` a row, and exact keys; node keys as phase 1 makes them) written by this
checkout's ``write_partitioned`` into its two spill files at P = 1 and every ``--partitions``; the bytes, per
row, and the overhead per (partition, shard) pair over P = 1. Sizes, not times: one run, deterministic.

With ``--codecs ROWS`` it compares ways to store one shard's band spill (ROWS rows, ``--bands`` a row) at each
``--partitions``: node keys as uint64, as their low 32 bits (the row: what ``write_partitioned`` stores for one
shard's keys), or as 32-bit deltas from the previous row of their partition, each under Arrow IPC's lz4 and
zstd. Bytes per row, and CPU ms to write the file in memory and to read every batch back to uint64 keys,
median and spread of ``--repeats`` runs, the variants alternated.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from airflow_curation.core import lsh  # noqa: E402

COLUMNS = {"bucket": np.uint64, "node": np.uint64}


def landed_lsh(ref: str, folder: Path):
    """``airflow_curation.core.lsh`` as it is at git ``ref`` (the code before the change), loaded as its own
    module beside this checkout's."""
    src = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{ref}:airflow_curation/core/lsh.py"], check=True, capture_output=True
    ).stdout
    path = folder / "lsh_before.py"
    path.write_bytes(src)
    spec = importlib.util.spec_from_file_location("lsh_before", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def write_files(mod, folder: Path, files: int, partitions: int, rows_per_pair: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    uris = []
    for k in range(files):
        n = partitions * rows_per_pair
        buckets = rng.integers(0, 2**63, n, dtype=np.uint64)
        nodes = lsh.node_keys(k, n)
        uri = str(folder / f"s{k:05d}.bands.arrow")
        mod.write_partitioned(uri, {"bucket": buckets, "node": nodes}, np.repeat(np.arange(partitions), rows_per_pair))
        uris.append(uri)
    return uris


def read_pairs(mod, uris: list[str], lo: int, hi: int, step: int) -> int:
    """Read partitions lo..hi-1 of every file, ``step`` partitions per unit (1: per-pair reads)."""
    rows = 0
    for a in range(lo, hi, step):
        b = min(hi, a + step)
        if step == 1:
            rows += mod.read_partition(uris, a, COLUMNS)["node"].size
        else:
            rows += sum(r["node"].size for _, r in mod.read_partitions(uris, a, b, COLUMNS))
    return rows


def measure(args) -> dict:
    out = {"config": vars(args).copy(), "load_start": os.getloadavg(), "partitions": {}}
    with tempfile.TemporaryDirectory(prefix="bench-spill-") as tmp:
        tmp = Path(tmp)
        before = landed_lsh(args.before_ref, tmp)
        for p in [int(x) for x in args.partitions.split(",")]:
            fb, fa = tmp / f"before-{p}", tmp / f"after-{p}"
            fb.mkdir()
            fa.mkdir()
            files = {
                "before": write_files(before, fb, args.files, p, args.rows_per_pair, 1),
                "after": write_files(lsh, fa, args.files, p, args.rows_per_pair, 1),
            }
            sample = min(args.sample, p)
            lo = (p - sample) // 2
            hi = lo + sample
            modes = {
                "before": (before, files["before"], 1),
                "after": (lsh, files["after"], 1),
                "after_range": (lsh, files["after"], args.range),
            }
            pairs = sample * args.files
            times: dict[str, list[float]] = {m: [] for m in modes}
            for mod, uris, step in modes.values():  # warm the page cache and the imports
                read_pairs(mod, uris, lo, hi, step)
            names = list(modes)
            for rep in range(args.repeats):
                for m in names[rep % len(names) :] + names[: rep % len(names)]:
                    mod, uris, step = modes[m]
                    t = time.process_time()
                    rows = read_pairs(mod, uris, lo, hi, step)
                    times[m].append((time.process_time() - t) / pairs * 1e3)
                    assert rows == pairs * args.rows_per_pair, (m, rows)
            out["partitions"][str(p)] = {
                "pairs_per_run": pairs,
                "file_bytes": os.path.getsize(files["after"][0]),
                "file_bytes_before": os.path.getsize(files["before"][0]),
                **{
                    m: {"median_ms": statistics.median(v), "min_ms": min(v), "max_ms": max(v), "runs_ms": v}
                    for m, v in times.items()
                },
            }
            for m in (fb, fa):
                for f in m.iterdir():
                    f.unlink()
    out["load_end"] = os.getloadavg()
    return out


def spill_then_read(shards: list, partitions: int, folder: Path) -> int:
    uris = []
    for k, (b, n) in enumerate(shards):
        uri = str(folder / f"s{k:05d}.bands.arrow")
        lsh.write_partitioned(uri, {"bucket": b, "node": n}, lsh.partition_of(b, partitions))
        uris.append(uri)
    rows = sum(lsh.read_partition(uris, p, COLUMNS)["node"].size for p in range(partitions))  # unit = partition
    for uri in uris:
        os.unlink(uri)
    return rows


def dask_shuffle(shards: list, partitions: int, method: str) -> int:
    import dask
    import dask.dataframe as dd
    import pandas as pd
    from distributed import Client, LocalCluster

    def frame(b, n):
        return pd.DataFrame({"bucket": b, "node": n, "p": lsh.partition_of(b, partitions)})

    meta = pd.DataFrame(
        {"bucket": np.array([], np.uint64), "node": np.array([], np.uint64), "p": np.array([], np.int64)}
    )
    with (
        LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster,
        Client(cluster),
    ):
        df = dd.from_delayed([dask.delayed(frame)(b, n) for b, n in shards], meta=meta)
        out = df.shuffle("p", npartitions=partitions, shuffle_method=method)
        return int(out.map_partitions(len).compute().sum())


def measure_shuffle(args) -> dict:
    n_shards, rows, partitions = (int(x) for x in args.shuffle.split(","))
    rng = np.random.default_rng(1)
    shards = [(rng.integers(0, 2**63, rows, dtype=np.uint64), lsh.node_keys(k, rows)) for k in range(n_shards)]
    out = {"config": vars(args).copy(), "load_start": os.getloadavg(), "shards": n_shards, "rows_per_shard": rows}
    out["partitions"] = partitions
    modes = ["spill", *args.shuffle_methods.split(",")]
    runs: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="bench-shuffle-") as tmp:
        for rep in range(args.repeats):
            for m in modes[rep % len(modes) :] + modes[: rep % len(modes)]:
                c, w = time.process_time(), time.perf_counter()
                got = (
                    spill_then_read(shards, partitions, Path(tmp))
                    if m == "spill"
                    else dask_shuffle(shards, partitions, m)
                )
                runs[m].append((time.process_time() - c, time.perf_counter() - w))
                assert got == n_shards * rows, (m, got)
    out["modes"] = {
        m: {
            "median_cpu_s": statistics.median(c for c, _ in v),
            "min_cpu_s": min(c for c, _ in v),
            "max_cpu_s": max(c for c, _ in v),
            "median_wall_s": statistics.median(w for _, w in v),
            "runs": v,
        }
        for m, v in runs.items()
    }
    out["load_end"] = os.getloadavg()
    return out


def measure_bytes(args) -> dict:
    """Spill bytes of one shard (its bands and exact files) as the partition count grows."""
    rows, bands = args.bytes, args.bands
    rng = np.random.default_rng(0)
    buckets = rng.integers(0, 2**63, rows * bands, dtype=np.uint64)
    band_nodes = np.repeat(lsh.node_keys(7, rows), bands)
    hi, lo = rng.integers(0, 2**63, rows, dtype=np.uint64), rng.integers(0, 2**63, rows, dtype=np.uint64)
    out = {"config": vars(args).copy(), "load_start": os.getloadavg(), "rows": rows, "bands": bands, "sizes": {}}
    with tempfile.TemporaryDirectory() as d:
        for p in [1, *(int(x) for x in args.partitions.split(","))]:
            b_uri, e_uri = os.path.join(d, "bands.arrow"), os.path.join(d, "exact.arrow")
            lsh.write_partitioned(b_uri, {"bucket": buckets, "node": band_nodes}, lsh.partition_of(buckets, p))
            lsh.write_partitioned(e_uri, {"hi": hi, "lo": lo, "node": lsh.node_keys(7, rows)}, lsh.partition_of(hi, p))
            out["sizes"][str(p)] = {"bands": os.path.getsize(b_uri), "exact": os.path.getsize(e_uri)}
    out["load_end"] = os.getloadavg()
    return out


CODEC_VARIANTS = [(k, c) for c in ("lz4_frame", "zstd") for k in ("uint64", "row32", "delta32")]


def _codec_run(buckets, nodes, rows: int, partition: np.ndarray, keys: str, codec: str) -> tuple[float, float, float]:
    """(bytes per row, write CPU s, read CPU s) of one band spill stored as ``keys`` under ``codec``."""
    import pyarrow as pa

    order = np.argsort(partition, kind="stable")
    _, starts = np.unique(partition[order], return_index=True)
    ends = np.append(starts[1:], order.size)
    node, high = nodes[order], np.uint64(int(nodes[0]) >> 32 << 32)
    t = time.process_time()
    if keys == "uint64":
        stored = node
    else:
        stored = (node & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        if keys == "delta32":
            d = stored.astype(np.int64)
            d[1:] -= stored[:-1]
            d[starts] = stored[starts]
            stored = d.astype(np.uint32)
    batch = pa.record_batch({"bucket": buckets[order], "node": stored})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, batch.schema, options=pa.ipc.IpcWriteOptions(compression=codec, use_threads=False)) as w:
        for s, e in zip(starts, ends):
            w.write_batch(batch.slice(int(s), int(e - s)))
    buf = sink.getvalue()
    write = time.process_time() - t
    t = time.process_time()
    r = pa.ipc.open_file(buf)
    got = 0
    for i in range(r.num_record_batches):
        b = r.get_batch(i)
        x = b.column(1).to_numpy()
        if keys == "delta32":
            x = np.cumsum(x, dtype=np.uint64)
        if keys != "uint64":
            x = x.astype(np.uint64) | high
        got += x.size
    read = time.process_time() - t
    assert got == nodes.size
    return buf.size / rows, write, read


def measure_codecs(args) -> dict:
    """One shard's band spill: its node keys stored three ways under two codecs, by partition count."""
    rows, bands = args.codecs, args.bands
    rng = np.random.default_rng(0)
    buckets = rng.integers(0, 2**63, rows * bands, dtype=np.uint64)
    nodes = np.repeat(lsh.node_keys(7, rows), bands)
    out = {"config": vars(args).copy(), "load_start": os.getloadavg(), "rows": rows, "bands": bands, "partitions": {}}
    for p in (int(x) for x in args.partitions.split(",")):
        part = lsh.partition_of(buckets, p)
        runs: dict[str, list] = {f"{k}/{c}": [] for k, c in CODEC_VARIANTS}
        for rep in range(args.repeats):
            for k, c in CODEC_VARIANTS if rep % 2 == 0 else CODEC_VARIANTS[::-1]:
                runs[f"{k}/{c}"].append(_codec_run(buckets, nodes, rows, part, k, c))
        out["partitions"][str(p)] = {
            v: {
                "bytes_per_row": r[0][0],
                "write_ms": statistics.median(x[1] for x in r) * 1e3,
                "write_ms_range": [min(x[1] for x in r) * 1e3, max(x[1] for x in r) * 1e3],
                "read_ms": statistics.median(x[2] for x in r) * 1e3,
                "read_ms_range": [min(x[2] for x in r) * 1e3, max(x[2] for x in r) * 1e3],
                "runs": r,
            }
            for v, r in runs.items()
        }
    out["load_end"] = os.getloadavg()
    return out


def codecs_table(doc: dict) -> str:
    lines = [
        f"one shard's band spill, {doc['rows']:,} rows x {doc['bands']} bands: node keys stored as, under codec",
        "",
        "| partitions P | keys / codec | bytes per row | write ms, median (min-max) | read ms, median (min-max) |",
        "| ---: | --- | ---: | ---: | ---: |",
    ]
    for p, variants in doc["partitions"].items():
        for v, r in variants.items():
            lines.append(
                f"| {int(p):,} | {v} | {r['bytes_per_row']:.1f} | {r['write_ms']:.0f} "
                f"({r['write_ms_range'][0]:.0f}-{r['write_ms_range'][1]:.0f}) | {r['read_ms']:.0f} "
                f"({r['read_ms_range'][0]:.0f}-{r['read_ms_range'][1]:.0f}) |"
            )
    return "\n".join(lines)


def bytes_table(doc: dict) -> str:
    rows, one = doc["rows"], doc["sizes"]["1"]
    base = one["bands"] + one["exact"]
    lines = [
        f"one shard of {rows:,} rows ({doc['bands']} bands a row): its two spill files by partition count P",
        "",
        "| partitions P | bytes | bytes per row | overhead per (partition, shard) pair over P = 1 |",
        "| ---: | ---: | ---: | ---: |",
    ]
    for p, r in doc["sizes"].items():
        total = r["bands"] + r["exact"]
        per_pair = "" if p == "1" else f"{(total - base) / (int(p) - 1):,.0f} B"
        lines.append(f"| {int(p):,} | {total:,} | {total / rows:.1f} | {per_pair} |")
    return "\n".join(lines)


def shuffle_table(doc: dict) -> str:
    rows = doc["shards"] * doc["rows_per_shard"]
    base = doc["modes"]["spill"]["median_cpu_s"]
    lines = [
        f"{doc['shards']} shards x {doc['rows_per_shard']:,} rows into {doc['partitions']} partitions ({rows:,} rows)",
        "",
        "| exchange | CPU s | us CPU per row | wall s | CPU vs spill |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for m, r in doc["modes"].items():
        lines.append(
            f"| {m} | {r['median_cpu_s']:.2f} ({r['min_cpu_s']:.2f}-{r['max_cpu_s']:.2f}) | "
            f"{r['median_cpu_s'] / rows * 1e6:.2f} | {r['median_wall_s']:.1f} | {r['median_cpu_s'] / base:.1f}x |"
        )
    return "\n".join(lines)


def table(doc: dict) -> str:
    lines = [
        "| partitions P | before ms/pair | after ms/pair (1 partition per unit) | after ms/pair (ranges of "
        f"{doc['config']['range']}) | before / after |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for p, r in doc["partitions"].items():

        def cell(m: str, r=r) -> str:
            return f"{r[m]['median_ms']:.3f} ({r[m]['min_ms']:.3f}-{r[m]['max_ms']:.3f})"

        ratio = r["before"]["median_ms"] / r["after"]["median_ms"]
        lines.append(f"| {int(p):,} | {cell('before')} | {cell('after')} | {cell('after_range')} | {ratio:.1f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", default="18,1634,4096")
    ap.add_argument("--files", type=int, default=8, help="spill files (shards)")
    ap.add_argument("--rows-per-pair", type=int, default=256)
    ap.add_argument("--sample", type=int, default=64, help="contiguous partitions read per run")
    ap.add_argument("--range", type=int, default=8, help="partitions per unit for after_range")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--before-ref", default="main", help="git ref of the code before the change")
    ap.add_argument("--shuffle", help="SHARDS,ROWS,PARTITIONS: spill files against a Dask shuffle instead")
    ap.add_argument("--shuffle-methods", default="p2p,tasks", help="Dask shuffle methods to run")
    ap.add_argument("--bytes", type=int, help="ROWS: spill bytes of one shard of ROWS rows by partition count")
    ap.add_argument("--codecs", type=int, help="ROWS: one shard's band spill by key layout and codec")
    ap.add_argument("--bands", type=int, default=9, help="--bytes, --codecs: band hashes a row (dedup's is 9)")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    if args.bytes or args.codecs:
        doc = measure_bytes(args) if args.bytes else measure_codecs(args)
        print(bytes_table(doc) if args.bytes else codecs_table(doc))
        if args.json:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(doc, indent=1))
        return 0
    doc = measure_shuffle(args) if args.shuffle else measure(args)
    doc["before_commit"] = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", args.before_ref], check=True, capture_output=True, text=True
    ).stdout.strip()
    doc["after_commit"] = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    print(shuffle_table(doc) if args.shuffle else table(doc))
    print(f"load average (1, 5, 15 min) at start {doc['load_start']}, at end {doc['load_end']}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
