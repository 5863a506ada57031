"""What a benchmark's child process measures of itself: its peak RSS from /proc (VmHWM) and its CPU seconds.

VmHWM, not getrusage: a process's ru_maxrss keeps, across exec, the size of the parent it was forked from
(a child of a large benchmark process measured ~40% less growth that way)."""

from __future__ import annotations

import resource


def hwm() -> int:
    """Peak resident bytes of this process so far."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


def cpu() -> float:
    """User + system CPU seconds of this process so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
