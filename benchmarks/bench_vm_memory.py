"""System CPU of touching memory the guest freed a moment ago against memory it freed a while ago.

Validate's system CPU per GB read rises with the bytes a process reads (RESULTS.md, *Validate's user and
system CPU apart*; ``bench_read_sys.py``). This measures what that read cost is made of on a VM whose
virtio balloon has free page reporting (a device feature bit, printed): the guest tells the host which pages
it freed and the host takes them back, so the next first touch of such a page is a fault on the host too,
which the guest sees as system CPU. Page cache pages are such pages: a read of a lake allocates one per 4 KiB.

Each round, in fresh processes pinned to ``--cpu``: a child touches ``--gb`` GB of anonymous memory and exits
(the memory is freed), then a measured child touches ``--gb`` GB again, at once (``reused``) or after
``--idle-s`` seconds (``after idle``); the two conditions alternate in order round by round. Reported: system
and user CPU seconds per GB touched, median and every run.

    python benchmarks/bench_vm_memory.py --gb 2 --idle-s 30 --rounds 3 --json benchmarks/results/vm_memory.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

CHILD = r"""
import json, os, sys
import numpy as np
gb = float(sys.argv[1])
t0 = os.times()
a = np.ones(int(gb * 1e9) // 8)  # every page written once
t1 = os.times()
print(json.dumps({"user_s": t1.user - t0.user, "sys_s": t1.system - t0.system}))
"""

# virtio balloon feature bits (the virtio spec's numbering)
BALLOON_FEATURES = {1: "stats", 2: "deflate on OOM", 3: "free page hint", 4: "page poison", 5: "free page reporting"}


def balloon_features() -> list[str] | None:
    """The virtio balloon's negotiated features, or None where the machine has no balloon device."""
    for dev in Path("/sys/bus/virtio/devices").glob("*"):
        driver = dev / "driver"
        if driver.exists() and driver.resolve().name == "virtio_balloon":
            bits = (dev / "features").read_text().strip()
            return [name for bit, name in BALLOON_FEATURES.items() if bit < len(bits) and bits[bit] == "1"]
    return None


def touch(gb: float, cpu: int) -> dict:
    cmd = ["taskset", "-c", str(cpu), sys.executable, "-c", CHILD, str(gb)]
    r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return {**r, "sys_s_per_gb": r["sys_s"] / gb, "user_s_per_gb": r["user_s"] / gb}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=2.0)
    ap.add_argument("--idle-s", type=float, default=30.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cpu", type=int, default=0)
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    runs: dict[str, list[dict]] = {"reused": [], "after idle": []}
    load = []
    for r in range(args.rounds):
        order = list(runs) if r % 2 == 0 else list(runs)[::-1]
        for cond in order:
            touch(args.gb, args.cpu)  # fill, then free on exit
            if cond == "after idle":
                time.sleep(args.idle_s)
            load.append(os.getloadavg()[0])
            got = touch(args.gb, args.cpu)
            runs[cond].append(got)
            print(
                f"round {r + 1} {cond:10s}: sys {got['sys_s_per_gb']:.2f} user {got['user_s_per_gb']:.2f} CPU-s per GB"
            )
    out = {
        "command": f"python benchmarks/bench_vm_memory.py --gb {args.gb} --idle-s {args.idle_s} --rounds {args.rounds}",
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "balloon_features": balloon_features(),
        "kernel": os.uname().release,
        "load_1min_before_each_run": load,
        "runs": runs,
        "median_sys_s_per_gb": {c: statistics.median(x["sys_s_per_gb"] for x in v) for c, v in runs.items()},
    }
    print(json.dumps({"balloon_features": out["balloon_features"], "median_sys_s_per_gb": out["median_sys_s_per_gb"]}))
    Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
