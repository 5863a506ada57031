"""How much one look of the checkpoint gate costs on a large stage run, and what XCom carries.

Ours: ``CheckpointWatcher.look()`` (what ``ShardCheckpointTrigger`` runs every poll): one listing of
the checkpoint folder, and each record read once, when it first appears. Peer, same data, same run: a
straightforward gate that checks every unit's record on every poll (``CheckpointStore.is_done`` per
unit, what a ``PythonSensor`` over the store would do).

Usage: ``python benchmarks/bench_checkpoint_gate.py [--units 10000] [--polls 5] [--write-results]``
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from results import RESULTS, replace_block  # benchmarks/ is this script's folder

from airflow_curation.core.checkpoint import CheckpointRecord, CheckpointStore
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest, ShardEntry, UnitEntry
from airflow_curation.triggers.shard_checkpoint import CheckpointWatcher

FP = "fp0123456789abcd"


def build(root: Path, units: int) -> tuple[Manifest, str, CheckpointStore]:
    lake = Lake(str(root), "web", "2026-11-30")
    unit_entries = [
        UnitEntry(unit_id=f"part-{i:05d}", inputs=[f"s3://raw/in-{i}.jsonl.zst"], input_checksum=f"{i:016x}")
        for i in range(units)
    ]
    manifest = Manifest(
        dataset="web", stage="preprocess", run_id="r1", fingerprint=FP, lake=lake.to_dict(), units=unit_entries
    )
    uri = manifest.write(lake.manifest_uri("r1", "preprocess"))
    store = CheckpointStore(lake.checkpoint_dir("preprocess", FP))
    return manifest, uri, store


def commit(store: CheckpointStore, manifest: Manifest, ids: range) -> None:
    for i in ids:
        u = manifest.units[i]
        out = ShardEntry(
            shard_id=u.unit_id,
            uri=f"/lake/web/shards/{u.unit_id}.parquet",
            rows=25_000,
            bytes=512 << 20,
            checksum="x" * 16,
            unit_id=u.unit_id,
        )
        store.commit(
            CheckpointRecord(
                unit_id=u.unit_id,
                stage="preprocess",
                fingerprint=FP,
                input_checksum=u.input_checksum,
                outputs=[out.__dict__],
            )
        )


def naive_look(manifest: Manifest, store: CheckpointStore) -> int:
    return sum(store.is_done(u.unit_id, u.input_checksum, FP) is not None for u in manifest.units)


def timed(fn, polls: int) -> float:
    started = time.perf_counter()
    for _ in range(polls):
        fn()
    return (time.perf_counter() - started) / polls


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--units", type=int, default=10_000)
    ap.add_argument("--polls", type=int, default=5)
    ap.add_argument("--write-results", action="store_true")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-gate-"))
    rows = []
    try:
        manifest, uri, store = build(root, args.units)
        half = args.units // 2
        commit(store, manifest, range(half))
        watcher = CheckpointWatcher(uri)
        first = timed(watcher.look, 1)  # reads the manifest and every record so far, once
        ours_half = timed(watcher.look, args.polls)
        peer_half = timed(lambda: naive_look(manifest, store), args.polls)
        assert watcher.look().done == naive_look(manifest, store) == half
        rows.append(("half done (steady poll)", ours_half, peer_half))
        commit(store, manifest, range(half, args.units))
        ours_last = timed(watcher.look, 1)  # the first look after the second half appeared
        progress = watcher.look()
        assert progress.done == args.units
        peer_last = timed(lambda: naive_look(manifest, store), 1)
        rows.append(("all done (first look after)", ours_last, peer_last))
        summary = json.dumps(progress.summary())
        manifest.shards = [
            ShardEntry(**json.loads(Path(store._uri(u.unit_id)).read_text())["outputs"][0]) for u in manifest.units
        ]
        manifest_bytes = len(json.dumps(manifest.to_dict()))
    finally:
        shutil.rmtree(root, ignore_errors=True)

    lines = [
        f"Units: {args.units}; one checkpoint record each on a local disk; {args.polls} polls averaged.",
        f"First look (manifest + {args.units // 2} records): {first * 1000:.0f} ms.",
        "",
        "| poll | ours ms | peer ms (is_done per unit) | peer time / ours |",
        "| --- | --- | --- | --- |",
        *[f"| {name} | {o * 1000:.1f} | {p * 1000:.1f} | {p / o:.1f} |" for name, o, p in rows],
        "",
        f"XCom of the gate: {len(summary)} bytes (`{summary}`); the same run's manifest with its shard list: "
        f"{manifest_bytes / 1e6:.1f} MB, which XCom never carries.",
    ]
    print("\n".join(lines))
    if args.write_results:
        section = "\n".join(
            [
                "## Checkpoint gate: cost of one poll on a large run (`benchmarks/bench_checkpoint_gate.py`)",
                "",
                f"Command: `.venv/bin/python benchmarks/bench_checkpoint_gate.py --units {args.units} "
                f"--polls {args.polls} --write-results` (run {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC).",
                "Ours: `CheckpointWatcher.look()`, what `ShardCheckpointTrigger` runs each poll (one listing, each "
                "record read once). Peer in the same run: a gate that checks every unit's record each poll. "
                "**Machine: 2 cores shared with up to 7 other engineers running test suites at the same time; "
                "absolute figures are noisy, compare the ratios.**",
                "",
                *lines,
            ]
        )
        replace_block(RESULTS, "bench_checkpoint_gate", section)


if __name__ == "__main__":
    main()
