"""How many workers a node can take, from memory, open files and cores; never from cores alone.

A unit's peak memory is its input bytes times an expansion factor (Parquet is compressed, text
decompresses several-fold and the kernels keep per-document scratch arrays) plus a fixed per-process
base (interpreter, pyarrow, compiled kernels). The plan takes the smallest of what memory, the
open-file limit and the cores allow, and says which one bound it.
"""

from __future__ import annotations

import logging
import math
import os
import resource
from dataclasses import asdict, dataclass

log = logging.getLogger(__name__)

MiB = 1024 * 1024
DEFAULT_BASE_BYTES = 640 * MiB  # a worker process with distributed, pyarrow and the numba kernels
# loaded measured ~390 MiB peak; the rest is headroom
DEFAULT_FILES_PER_WORKER = 64  # a worker's sockets, Parquet readers/writers, shared libs


@dataclass(frozen=True)
class WorkerPlan:
    workers: int
    memory_limit: int  # bytes per worker: the usable memory shared out, at least one unit's need
    unit_bytes: int  # the largest unit's input bytes
    unit_memory: int  # its estimated peak memory
    available_memory: int
    open_files_limit: int
    cpus: int
    bound_by: str  # memory | open_files | cpus | units | max_workers

    def to_dict(self) -> dict:
        return asdict(self)


CGROUP_ROOT = "/sys/fs/cgroup"
PROC_CGROUP = "/proc/self/cgroup"


def cgroup_dirs(controller: str, root: str = CGROUP_ROOT, proc_cgroup: str = PROC_CGROUP) -> list[str]:
    """The cgroup folders whose limits bind this process, its own first, then each ancestor to the mount's root.

    A container with a cgroup namespace sees its own cgroup at ``root``; a Slurm task does not: slurmstepd puts it
    in ``.../job_<id>/step_<id>/...`` of the node's hierarchy and sets ``--mem`` on the job's folder, which the
    mount's root does not show. cgroup v2 (the ``0::`` line of ``/proc/self/cgroup``) and v1 (``controller``'s
    line, its hierarchy at ``root/<controllers>`` or ``root/<controller>``)."""
    try:
        with open(proc_cgroup) as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    v2 = root if os.path.exists(os.path.join(root, "cgroup.controllers")) else os.path.join(root, "unified")
    dirs: list[str] = []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers:
            if controller not in controllers.split(","):
                continue
            bases = [os.path.join(root, controllers), os.path.join(root, controller)]
            base = next((b for b in bases if os.path.isdir(b)), bases[-1])
        else:
            base = v2
        parts = [p for p in path.split("/") if p]
        dirs += [os.path.join(base, *parts[:k]) for k in range(len(parts), -1, -1)]
    # no /proc/self/cgroup, or a path the mount does not show: the mount's roots, as a namespaced container has
    dirs += [root, os.path.join(root, controller)]
    return list(dict.fromkeys(d for d in dirs if os.path.isdir(d)))


def _number(folder: str, name: str, word: int = 0) -> int | None:
    """The ``word``-th number of a cgroup file; None where the file is absent or says ``max``."""
    try:
        with open(os.path.join(folder, name)) as f:
            return int(f.read().split()[word])
    except (OSError, ValueError, IndexError):
        return None


def _inactive_file(folder: str) -> int:
    """The cgroup's inactive page cache (``memory.stat``): charged to it, but reclaimed before it hits its limit.
    v1's own ``inactive_file`` leaves out its children, whose usage its ``usage_in_bytes`` counts: its
    ``total_inactive_file`` where there is one."""
    try:
        with open(os.path.join(folder, "memory.stat")) as f:
            stat = dict(line.split(" ", 1) for line in f if " " in line)
        return int(stat.get("total_inactive_file", stat.get("inactive_file", 0)))
    except (OSError, ValueError):
        return 0


def available_memory(root: str = CGROUP_ROOT, proc_cgroup: str = PROC_CGROUP) -> int:
    """MemAvailable, capped by every memory limit on this process's cgroup and its ancestors (a container's, a
    Slurm job's ``--mem``): the smallest limit less its cgroup's working set (what it uses less the inactive page
    cache, as the kubelet counts it: a task that has read its inputs is not out of memory for their cache)."""
    avail = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    if avail is None:
        avail = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    for folder in cgroup_dirs("memory", root, proc_cgroup):
        for limit_file, used_file in (
            ("memory.max", "memory.current"),
            ("memory.limit_in_bytes", "memory.usage_in_bytes"),
        ):
            limit = _number(folder, limit_file)
            if limit is not None:
                used = max(0, (_number(folder, used_file) or 0) - _inactive_file(folder))
                avail = min(avail, max(0, limit - used))
    return avail


def cpu_count(root: str = CGROUP_ROOT, proc_cgroup: str = PROC_CGROUP) -> int:
    """Cores this process may use: its CPU affinity (a Slurm task's cpuset, ``taskset``), capped by the smallest
    cgroup CPU quota on its cgroup and ancestors, rounded up (a Kubernetes CPU limit leaves the affinity at every
    core of the node). ``os.cpu_count()`` and DuckDB's default see the node: a one-core task of a 64-core node
    would run 64 threads on its core."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    quota = cgroup_cpu_quota(root, proc_cgroup)
    return max(1, min(cores, math.ceil(quota))) if quota else cores


def cgroup_cpu_quota(root: str = CGROUP_ROOT, proc_cgroup: str = PROC_CGROUP) -> float | None:
    """CPUs the smallest quota on this process's cgroup and its ancestors allows (quota / period), None where
    none sets one: v2 ``cpu.max`` (``max 100000``: none; ``150000 100000``: 1.5), v1 ``cpu.cfs_quota_us``
    (``-1``: none) over ``cpu.cfs_period_us``."""
    quotas = []
    for folder in cgroup_dirs("cpu", root, proc_cgroup):
        v2 = _number(folder, "cpu.max"), _number(folder, "cpu.max", 1)
        v1 = _number(folder, "cpu.cfs_quota_us"), _number(folder, "cpu.cfs_period_us")
        quotas += [q / p for q, p in (v2, v1) if q and q > 0 and p and p > 0]
    return min(quotas) if quotas else None


def plan_workers(
    unit_bytes: list[int],
    expansion: float,
    *,
    base_bytes: int = DEFAULT_BASE_BYTES,
    memory: int | None = None,
    open_files: int | None = None,
    cpus: int | None = None,
    files_per_worker: int = DEFAULT_FILES_PER_WORKER,
    reserve_fraction: float = 0.2,
    max_workers: int | None = None,
) -> WorkerPlan:
    """Workers for a node.

    :param unit_bytes: input bytes of each unit to run.
    :param expansion: peak memory of a unit per input byte.
    :param memory: bytes available (default: measured); ``reserve_fraction`` of it is left alone.
    :param open_files: the soft ``RLIMIT_NOFILE`` (default: measured).
    :param cpus: usable cores (default: the process's CPU affinity).
    :param max_workers: an upper bound set by the user.
    """
    memory = available_memory() if memory is None else memory
    open_files = resource.getrlimit(resource.RLIMIT_NOFILE)[0] if open_files is None else open_files
    if open_files == resource.RLIM_INFINITY or open_files < 0:
        open_files = 1 << 20
    cpus = cpu_count() if cpus is None else cpus
    biggest = max(unit_bytes, default=0)
    unit_memory = int(biggest * expansion)
    per_worker = unit_memory + base_bytes
    limits = {
        "memory": max(1, int(memory * (1 - reserve_fraction)) // per_worker),
        "open_files": max(1, (open_files - 256) // files_per_worker),
        "cpus": max(1, cpus),
        "units": max(1, len(unit_bytes)),
    }
    if max_workers:
        limits["max_workers"] = max(1, int(max_workers))
    bound_by = min(limits, key=lambda k: (limits[k], k))
    workers = limits[bound_by]
    # Share the usable memory out: a worker may use more than the estimate, never less.
    memory_limit = max(per_worker, int(memory * (1 - reserve_fraction)) // workers)
    plan = WorkerPlan(
        workers=workers,
        memory_limit=memory_limit,
        unit_bytes=biggest,
        unit_memory=unit_memory,
        available_memory=memory,
        open_files_limit=open_files,
        cpus=cpus,
        bound_by=bound_by,
    )
    log.info(
        "worker plan: %d workers (bound by %s; limits %s); largest unit %.1f MiB x expansion %.1f "
        "= %.1f MiB + base %.0f MiB per worker, memory limit %.0f MiB each; %.1f GiB available, "
        "open-file limit %d, %d cpus",
        plan.workers,
        bound_by,
        limits,
        biggest / MiB,
        expansion,
        unit_memory / MiB,
        base_bytes / MiB,
        memory_limit / MiB,
        memory / 1024**3,
        open_files,
        cpus,
    )
    return plan
