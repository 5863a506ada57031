"""Dedup's global phase reading the spill file by file or packed: the cost of the packs against the opens saved.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_spill_pack.py [--shards 2623] [--rows 1750] [--partitions 24]
        [--units 13] [--group 409] [--bands 9] [--repeats 5] [--json PATH]

``--shards`` band spill files are written as phase 1 writes them (``lsh.write_partitioned``: ``--rows`` documents
a shard, ``--bands`` random bucket hashes each, node keys ``shard << 32 | row``, ``--partitions`` partitions).
Then, alternated in rotating order, ``--repeats`` times each:

- ``files``: every unit (``--units`` contiguous ranges of the partitions) reads its range from every file, as
  the global phase does without packs;
- ``pack``: the files packed ``--group`` consecutive shards to a pack (``lsh.pack_spills``), one pack after
  the other as the packing tasks run;
- ``packed``: every unit reads its range from the packs.

CPU seconds of this process (``time.process_time``) and wall seconds, page cache warm (the files were just
written). With ``--s3`` the files and packs are on a loopback S3 (the tests' ``moto_server``), and the GET and
HEAD requests of each mode are counted from its access log: wall time there is a floor for an object store's
(no network). Each read checks it got every row, and the packed reads are checked equal to the files' (same
rows, same order). Printed: per (unit, file) open saved, the pack's cost per MB and per record batch, and the
net saving; the constants ``stages/dedup/stage.py`` uses to choose to pack come from these figures.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from airflow_curation.core import lsh, storage  # noqa: E402

COLUMNS = {"bucket": np.uint64, "node": np.uint64}


def write_spills(folder: str, shards: int, rows: int, bands: int, partitions: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    uris = []
    for s in range(shards):
        nodes = np.repeat(lsh.node_keys(s, rows), bands)
        buckets = rng.integers(0, 2**63, rows * bands, dtype=np.uint64)
        uri = f"{folder}/shard-{s:05d}.bands.arrow"
        lsh.write_partitioned(uri, {"bucket": buckets, "node": nodes}, lsh.partition_of(buckets, partitions))
        uris.append(uri)
    return uris


def read_units(uris: list[str], ranges: list[tuple[int, int]]) -> tuple[int, str]:
    """Every unit's range read from ``uris``: rows read, and a digest of what was read in order."""
    h, n = hashlib.blake2b(digest_size=16), 0
    for lo, hi in ranges:
        for _, r in lsh.read_partitions(uris, lo, hi, COLUMNS):
            n += len(r["node"])
            h.update(r["node"].tobytes())
            h.update(r["bucket"].tobytes())
    return n, h.hexdigest()


def pack(uris: list[str], group: int, folder: str) -> list[str]:
    outs = []
    for g, i in enumerate(range(0, len(uris), group)):
        out = f"{folder}/group-{g:05d}.bands.pack"
        lsh.pack_spills(uris[i : i + group], out)
        outs.append(out)
    return outs


def measure(args) -> dict:
    load_before = os.getloadavg()
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(dir=args.tmp))
        folder, log, requests = tmp, None, {"files": [], "pack": [], "packed": []}
        if args.s3:
            folder, log = stack.enter_context(_loopback_s3(Path(tmp)))
        t = time.process_time()
        uris = write_spills(folder, args.shards, args.rows, args.bands, args.partitions, 0)
        write_s = time.process_time() - t
        spill_bytes = sum(storage.size(u) for u in uris)
        batches = sum(int(np.frombuffer(_present(u), "<i4").size) for u in uris)
        ranges = lsh.partition_ranges(args.partitions, args.units)
        runs: dict[str, list[float]] = {"files": [], "pack": [], "packed": []}
        walls: dict[str, list[float]] = {"files": [], "pack": [], "packed": []}
        digests, packs = set(), []
        expected = args.shards * args.rows * args.bands
        for r in range(args.repeats):
            order = ["files", "pack", "packed"]
            order = order[r % 3 :] + order[: r % 3]
            if order.index("packed") < order.index("pack") and not packs:
                order.remove("pack")
                order.insert(order.index("packed"), "pack")
            for mode in order:
                at = _log_size(log)
                t, w = time.process_time(), time.perf_counter()
                if mode == "pack":
                    packs = pack(uris, args.group, f"{folder}/packs-{r}")
                else:
                    n, digest = read_units(packs if mode == "packed" else uris, ranges)
                    if n != expected:
                        raise SystemExit(f"{mode}: read {n} rows, expected {expected}")
                    digests.add(digest)
                runs[mode].append(time.process_time() - t)
                walls[mode].append(time.perf_counter() - w)
                if log:
                    requests[mode].append(_gets(log, at))
        if len(digests) != 1:
            raise SystemExit(f"the packed reads differ from the files': {digests}")
        pack_bytes = sum(storage.size(p) for p in packs)
    med = {k: statistics.median(v) for k, v in runs.items()}
    wall = {k: statistics.median(v) for k, v in walls.items()}
    groups = len(range(0, args.shards, args.group))
    opens_saved = len(ranges) * (args.shards - groups)
    return {
        "params": {k: v for k, v in vars(args).items() if k not in ("json", "report", "tmp")},
        "machine": {"cpus": os.cpu_count(), "load_before": load_before, "python": platform.python_version()},
        "spill_bytes": spill_bytes,
        "pack_bytes": pack_bytes,
        "batches": batches,
        "units": len(ranges),
        "groups": groups,
        "write_s": write_s,
        "runs": runs,
        "walls": walls,
        "requests": requests,
        "median": med,
        "wall_median": wall,
        "open_saved_us": 1e6 * (med["files"] - med["packed"]) / max(1, opens_saved),
        "open_saved_wall_us": 1e6 * (wall["files"] - wall["packed"]) / max(1, opens_saved),
        "pack_s_per_mb": med["pack"] / (spill_bytes / 1e6),
        "pack_us_per_batch": 1e6 * med["pack"] / max(1, batches),
        "net_s": med["files"] - med["packed"] - med["pack"],
        "net_wall_s": wall["files"] - wall["packed"] - wall["pack"],
        "load_after": os.getloadavg(),
    }


@contextlib.contextmanager
def _loopback_s3(tmp: Path):
    """A bucket on the tests' moto server, its storage options in effect: (folder URL, access log)."""
    import boto3

    sys.path.insert(0, str(ROOT / "tests"))
    from s3.conftest import start_moto

    from airflow_curation.core.storage_map import StorageMap

    log = tmp / "moto.log"
    proc, endpoint = start_moto(log)
    try:
        boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="k", aws_secret_access_key="s").create_bucket(
            Bucket="spill"
        )
        with storage.using(StorageMap({"s3": {"key": "k", "secret": "s", "endpoint_url": endpoint}})):
            yield "s3://spill/bench", log
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _log_size(log: Path | None) -> int:
    if log is None:
        return 0
    time.sleep(0.5)  # the server writes its log line by line: let the last request's line land
    return log.stat().st_size


def _gets(log: Path, start: int) -> int:
    """GET and HEAD requests to the bucket logged after byte ``start`` (the server colours some lines)."""
    time.sleep(0.5)
    with open(log, "rb") as f:
        f.seek(start)
        lines = f.read().decode(errors="replace")
    return len(re.findall(r'"(?:GET|HEAD) /spill/', re.sub(r"\x1b\[[0-9;]*m", "", lines)))


def _present(uri: str) -> bytes:
    return pa.ipc.open_file(storage.fetch(uri)).schema.metadata[lsh._LIST_KEY]


def table(doc: dict) -> str:
    p, m, w = doc["params"], doc["median"], doc["wall_median"]
    req = doc["requests"]
    gets = " / ".join(str(statistics.median(req[k])) if req[k] else "-" for k in ("files", "pack", "packed"))

    def spread(k: str) -> str:
        v = doc["runs"][k]
        return f"{m[k]:.2f} ({min(v):.2f}-{max(v):.2f})"

    return "\n".join(
        [
            f"{p['shards']} shards x {p['rows']} rows x {p['bands']} bands, {p['partitions']} partitions, "
            f"{doc['units']} units, packs of {p['group']} shards ({doc['groups']}): spill {doc['spill_bytes'] / 1e6:.1f} MB, "
            f"packs {doc['pack_bytes'] / 1e6:.1f} MB, {doc['batches']} batches; 1-minute load "
            f"{doc['machine']['load_before'][0]:.1f} before, {doc['load_after'][0]:.1f} after",
            "",
            "| read by file, CPU s | pack, CPU s | read packed, CPU s | per open saved | pack per MB | pack per batch | net saving |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
            f"| {spread('files')} | {spread('pack')} | {spread('packed')} | {doc['open_saved_us']:.0f} us | "
            f"{1e3 * doc['pack_s_per_mb']:.2f} ms | {doc['pack_us_per_batch']:.1f} us | {doc['net_s']:.2f} s |",
            "",
            "| wall s, median | read by file | pack | read packed | per open saved | net saving | GET+HEAD requests by file / pack / packed |",
            "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
            f"| | {w['files']:.2f} | {w['pack']:.2f} | {w['packed']:.2f} | {doc['open_saved_wall_us']:.0f} us | "
            f"{doc['net_wall_s']:.2f} s | {gets} |",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shards", type=int, default=2623)
    ap.add_argument("--rows", type=int, default=1750)
    ap.add_argument("--bands", type=int, default=9)
    ap.add_argument("--partitions", type=int, default=24)
    ap.add_argument("--units", type=int, default=13)
    ap.add_argument("--group", type=int, default=409)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--s3", action="store_true", help="the files on a loopback S3 (moto_server)")
    ap.add_argument("--tmp", default=None, help="folder for the spill files (default: the system's temp)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--report", type=Path, help="print the table of a JSON written before")
    args = ap.parse_args(argv)
    if args.report:
        print(table(json.loads(args.report.read_text())))
        return 0
    doc = measure(args)
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    print(table(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
