"""What a benchmark's child process measures of itself: its peak RSS from /proc (VmHWM) and its CPU seconds; and
:func:`run_in_tree`, which runs such a child on one tree of the code.

VmHWM, not getrusage: a process's ru_maxrss keeps, across exec, the size of the parent it was forked from
(a child of a large benchmark process measured ~40% less growth that way)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def hwm() -> int:
    """Peak resident bytes of this process so far."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


def cpu() -> float:
    """User + system CPU seconds of this process so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_in_tree(code: str, tree: str, args: list[str]) -> dict:
    """Run ``code`` (a child that prints one JSON object) in a fresh ``python -P`` with ``tree`` first on its path
    (this checkout's ``benchmarks`` after it); its JSON with the 1-minute load average at its end."""
    got = subprocess.run(
        [sys.executable, "-P", "-c", code, *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{REPO}"},
    )
    return json.loads(got.stdout) | {"load_1min": round(os.getloadavg()[0], 2)}
