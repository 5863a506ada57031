"""Incremental dedup across snapshots: CPU seconds per new snapshot as the number of earlier ones grows,
side by side with recomputing everything.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_incremental_dedup.py [--snapshots 8] [--snapshot-mb 4]
        [--datasketch]

Snapshots 1..N of equal size, real text (Debian handbook + Python docs pages, as bench_minhash), two
shards each; from snapshot 2 on, 5% of each snapshot's documents are near copies (3 words edited) of
documents of earlier snapshots. For each N:

- incremental: the dedup stage on snapshot N alone, probing the persisted buckets of snapshots 1..N-1
  (what a daily DAG run does); its probe phase is also timed on its own;
- recompute: the dedup stage over snapshots 1..N as one dataset, from nothing (what a pipeline without
  persisted buckets must do to catch cross-date duplicates);
- with ``--datasketch``: datasketch MinHash + MinHashLSH inserting every document of snapshots 1..N and
  querying each before inserting it (the same recompute with the usual Python library).

CPU seconds of this process (``time.process_time``; one worker, in-process), after a warm-up run that loads
the compiled kernels. Both sides mark the same rows of snapshot N (checked and printed).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_minhash import corpus  # noqa: E402

from airflow_curation.core.layout import Lake  # noqa: E402
from airflow_curation.core.manifest import Manifest, ShardEntry  # noqa: E402
from airflow_curation.core.shards import write_parquet  # noqa: E402
from airflow_curation.stages.base import StageRunner  # noqa: E402
from airflow_curation.stages.dedup.stage import DedupStage  # noqa: E402


def _edit(text: str, rng: random.Random, k: int = 3) -> str:
    words = text.split()
    for i in rng.sample(range(len(words)), min(k, len(words))):
        words[i] = f"edited{i}"
    return " ".join(words)


def snapshots(n: int, mb: float, seed: int = 5) -> list[list[tuple[str, str]]]:
    docs = [t for t in corpus(n * mb) if len(t.split()) >= 50]
    per = len(docs) // n
    rng = random.Random(seed)
    out: list[list[tuple[str, str]]] = []
    for k in range(n):
        mine = [(f"s{k}-{i}", t) for i, t in enumerate(docs[k * per : (k + 1) * per])]
        if k:
            for j in rng.sample(range(len(mine)), len(mine) // 20):
                earlier = rng.choice(out[rng.randrange(k)])
                mine[j] = (f"s{k}-copy-{j}", _edit(earlier[1], rng))
        out.append(mine)
    return out


def write_manifest(lake: Lake, entries: list[ShardEntry]) -> str:
    uri = lake.manifest_uri("r", "ingest")
    Manifest(
        dataset=lake.dataset,
        stage="ingest",
        run_id="r",
        fingerprint="f",
        lake=lake.to_dict(),
        shards=entries,
        status="complete",
    ).write(uri)
    return uri


def write_snapshot(lake: Lake, docs: list[tuple[str, str]]) -> list[ShardEntry]:
    entries = []
    for k in range(2):
        part = docs[k::2]
        sid = f"part-{k:05d}"
        table = pa.table(
            {
                "id": [i for i, _ in part],
                "text": [t for _, t in part],
                "source": ["s"] * len(part),
                "meta": [None] * len(part),
            }
        )
        n, ck = write_parquet(lake.shard_uri(sid), table)
        entries.append(ShardEntry(shard_id=sid, uri=lake.shard_uri(sid), rows=len(part), bytes=n, checksum=ck))
    write_manifest(lake, entries)
    return entries


def run(lake: Lake, **config) -> tuple[float, dict[str, bool], DedupStage]:
    t = time.process_time()
    stage = DedupStage(lake, {"input_manifest": lake.manifest_uri("r", "ingest"), **config}, "r")
    manifest = StageRunner(stage).run()
    cpu = time.process_time() - t
    dups = {}
    for s in manifest.shards:
        t_ = pq.read_table(s.attrs["dedup"], columns=["id", "is_duplicate"])
        dups.update(zip(t_.column(0).to_pylist(), t_.column(1).to_pylist()))
    return cpu, dups, stage


def datasketch_recompute(snaps: list[list[tuple[str, str]]]) -> tuple[float, set[str]]:
    from datasketch import MinHash, MinHashLSH

    from airflow_curation.core.minhash import lsh_params
    from tests.dedup.corpus import shingle_set

    bands, rows = lsh_params(0.8, 128)
    t = time.process_time()
    lsh = MinHashLSH(num_perm=128, params=(bands, rows))
    dups = set()
    for docs in snaps:
        for doc_id, text in docs:
            m = MinHash(num_perm=128, seed=1)
            m.update_batch([" ".join(s).encode() for s in shingle_set(text)])
            if lsh.query(m):
                dups.add(doc_id)
            lsh.insert(doc_id, m)
    return time.process_time() - t, dups


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--snapshots", type=int, default=8)
    ap.add_argument("--snapshot-mb", type=float, default=4.0)
    ap.add_argument("--datasketch", action="store_true", help="also time datasketch recomputing everything")
    args = ap.parse_args()

    snaps = snapshots(args.snapshots, args.snapshot_mb)
    mb = [sum(len(t.encode()) for _, t in s) / 1e6 for s in snaps]
    print(f"{args.snapshots} snapshots, {len(snaps[0])} documents and ~{mb[0]:.1f} MB each (real text)")

    probe_cpu: list[float] = []
    original = DedupStage._probe

    def timed_probe(self, *a, **k):
        t = time.process_time()
        try:
            return original(self, *a, **k)
        finally:
            probe_cpu.append(time.process_time() - t)

    DedupStage._probe = timed_probe
    with tempfile.TemporaryDirectory() as work:
        warm = Lake(os.path.join(work, "warm"), "w")
        write_snapshot(warm, snaps[0][:50])
        run(warm)  # loads the compiled kernels and Unicode tables once

        rows = []
        entries: list[ShardEntry] = []
        for n in range(1, args.snapshots + 1):
            lake = Lake(os.path.join(work, "lake"), "bench", f"2026-01-{n:02d}")
            entries += [replace(e, shard_id=f"{n:02d}-{e.shard_id}") for e in write_snapshot(lake, snaps[n - 1])]
            probe_cpu.clear()
            inc_cpu, inc_dups, stage = run(lake, across_snapshots=True)
            assert len(stage.config["prior_indexes"]) == n - 1
            full = Lake(os.path.join(work, f"full-{n}"), "bench")
            write_manifest(full, entries)
            full_cpu, full_dups, _ = run(full)
            mine = [i for i, _ in snaps[n - 1]]
            agree = sum(inc_dups[i] == full_dups[i] for i in mine)
            ds = datasketch_recompute(snaps[:n]) if args.datasketch else None
            rows.append(
                (
                    n,
                    inc_cpu,
                    sum(probe_cpu),
                    full_cpu,
                    ds[0] if ds else None,
                    sum(inc_dups[i] for i in mine),
                    sum(full_dups[i] for i in mine),
                    sum(i in ds[1] for i in mine) if ds else None,
                    agree,
                    len(mine),
                )
            )
            print(f"  N={n}: incremental {inc_cpu:.2f} CPU s, recompute {full_cpu:.2f} CPU s", flush=True)

    ds_cols = " datasketch recompute CPU s |" if args.datasketch else ""
    print(
        "\n| N | incremental CPU s (snapshot N) | of which probe | recompute 1..N CPU s | recompute / incremental |"
        f"{ds_cols} duplicates in snapshot N (incremental / recompute{' / datasketch' if args.datasketch else ''}) |"
        " rows of N marked alike |"
    )
    print("| ---: | ---: | ---: | ---: | ---: |" + (" ---: |" if args.datasketch else "") + " ---: | ---: |")
    for n, inc, probe, full, ds, di, dfull, dds, agree, total in rows:
        ds_cell = f" {ds:.2f} |" if ds is not None else ""
        dups = f"{di} / {dfull}" + (f" / {dds}" if dds is not None else "")
        print(f"| {n} | {inc:.2f} | {probe:.2f} | {full:.2f} | {full / inc:.1f}x |{ds_cell} {dups} | {agree}/{total} |")
    first, last = rows[0][1], rows[-1][1]
    print(f"\nincremental snapshot {rows[-1][0]} vs snapshot 1: {last / first:.2f}x CPU; ", end="")
    print(f"recompute: {rows[-1][3] / rows[0][3]:.2f}x")


if __name__ == "__main__":
    main()
