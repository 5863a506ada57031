"""System CPU of reading a lake's files from disk, whole and its first part: what the kernel charges per byte.

Validate's system CPU per GB rose past 8 GB while its user CPU stayed flat (RESULTS.md, *Validate's user and
system CPU apart*). This reads every Parquet file of each lake (shards, then attrs) the way validate's integrity
pass does (:func:`~airflow_curation.core.fingerprint.checksum_url`), after dropping the page cache (root), and
then only the first ``--first`` files, in fresh processes, and reports user and system CPU per GB read and the
page-reclaim counters of ``/proc/vmstat`` around each read. ``--drop-behind`` adds a third read of the whole
lake that drops each file's pages from the page cache once it is hashed (``POSIX_FADV_DONTNEED``), so the
process reuses the same few pages instead of taking fresh ones (``bench_vm_memory.py``: on this VM a fresh
page costs the host a fault); ``--rounds`` repeats the reads, in alternated order.

    python benchmarks/bench_read_sys.py --first 600 --json benchmarks/results/read_sys.json \\
        benchmarks/data/scale/lake-validate-stationary-{4,8,16}
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from bench_scale import drop_page_cache

CHILD = r"""
import glob, json, os, sys, time
from airflow_curation.core.fingerprint import checksum_url
root, first, drop = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "drop"
files = sorted(glob.glob(root + "/*/shards/*.parquet")) + sorted(glob.glob(root + "/*/attrs/*/*/*.parquet"))
files = files[:first] if first else files
n = sum(os.path.getsize(f) for f in files)
r0, t0 = os.times(), time.perf_counter()
for f in files:
    checksum_url(f)
    if drop:
        fd = os.open(f, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
r1 = os.times()
print(json.dumps({"files": len(files), "bytes": n, "wall_s": time.perf_counter() - t0,
                  "user_s": r1.user - r0.user, "sys_s": r1.system - r0.system}))
"""

RECLAIM = ("pgscan_kswapd", "pgscan_direct", "pgsteal_kswapd", "pgsteal_direct")


def reclaimed() -> int:
    stats = dict(line.split() for line in Path("/proc/vmstat").read_text().splitlines())
    return sum(int(stats.get(k, 0)) for k in RECLAIM)


def cold_read(lake: str, first: int, cpu: int, drop: bool = False) -> dict:
    drop_page_cache()
    before = reclaimed()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    cmd = ["taskset", "-c", str(cpu), sys.executable, "-P", "-c", CHILD, lake, str(first), "drop" if drop else "keep"]
    r = json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout)
    r["reclaimed_pages"] = reclaimed() - before
    r["sys_s_per_gb"] = r["sys_s"] / (r["bytes"] / 1e9)
    r["user_s_per_gb"] = r["user_s"] / (r["bytes"] / 1e9)
    return r


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("lakes", nargs="+")
    ap.add_argument("--first", type=int, default=600, help="files of the partial read")
    ap.add_argument("--cpu", type=int, default=0)
    ap.add_argument("--drop-behind", action="store_true", help="also read the whole lake dropping pages behind")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    out = {"load_start": os.getloadavg(), "lakes": {}}
    reads = {"whole": (0, False), "first": (args.first, False)}
    if args.drop_behind:
        reads["whole, dropped behind"] = (0, True)
    for rnd in range(args.rounds):
        for lake in args.lakes:
            for k in list(reads) if rnd % 2 == 0 else list(reads)[::-1]:
                r = cold_read(lake, reads[k][0], args.cpu, reads[k][1])
                r["load_1min"] = os.getloadavg()[0]
                got = out["lakes"].setdefault(lake, {})
                if args.rounds == 1:
                    got[k] = r
                else:
                    got.setdefault(k, []).append(r)
                print(
                    f"{lake} {k}: {r['files']} files, {r['bytes'] / 1e9:.2f} GB, user {r['user_s_per_gb']:.2f} "
                    f"sys {r['sys_s_per_gb']:.2f} CPU-s per GB, pages reclaimed {r['reclaimed_pages']}",
                    flush=True,
                )
    out["load_end"] = os.getloadavg()
    Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
