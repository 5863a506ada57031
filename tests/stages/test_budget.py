"""The cores and memory a stage process may use: its affinity and the cgroup limits on its own cgroup and every
ancestor, as a namespaced container, a Slurm task (no cgroup namespace: its job's ``--mem`` is on an ancestor of
its folder) and a cgroup v1 node lay them out. The trees are real files in the kernel's formats; the affinity is
this process's, set for real."""

from __future__ import annotations

import os

from airflow_curation.stages.mappers.budget import available_memory, cgroup_cpu_quota, cgroup_dirs, cpu_count

GiB = 1024**3
SLURM_TASK = "system.slice/slurmstepd.scope/job_7/step_0/user/task_0"


def _write(folder, **files: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name.replace("_", ".", 1)).write_text(text + "\n")


def _meminfo_available() -> int:
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))


def test_a_namespaced_container_reads_its_limits_at_the_mount_root(tmp_path):
    root, proc = tmp_path / "cg", tmp_path / "cgroup"
    _write(root, cgroup_controllers="cpu memory", cpu_max="50000 100000", memory_max=str(2 * GiB))
    _write(root, memory_current=str(GiB // 2))
    proc.write_text("0::/\n")
    assert cgroup_cpu_quota(str(root), str(proc)) == 0.5 and cpu_count(str(root), str(proc)) == 1
    assert available_memory(str(root), str(proc)) == min(_meminfo_available(), 2 * GiB - GiB // 2)
    _write(root, cpu_max="max 100000")
    assert cgroup_cpu_quota(str(root), str(proc)) is None
    assert cpu_count(str(root), str(proc)) == len(os.sched_getaffinity(0))


def test_a_slurm_task_reads_its_jobs_limits_on_an_ancestor_of_its_cgroup(tmp_path):
    root, proc = tmp_path / "cg", tmp_path / "cgroup"
    _write(root, cgroup_controllers="cpu memory")
    job = root / "system.slice/slurmstepd.scope/job_7"
    _write(job, memory_max=str(GiB), memory_current=str(GiB // 4), cpu_max="200000 100000")
    _write(root / SLURM_TASK, memory_max="max", cpu_max="max 100000")
    proc.write_text(f"0::/{SLURM_TASK}\n")
    dirs = cgroup_dirs("memory", str(root), str(proc))
    assert dirs[0] == str(root / SLURM_TASK) and str(job) in dirs and dirs[-1] == str(root)
    assert available_memory(str(root), str(proc)) == min(_meminfo_available(), GiB - GiB // 4)
    assert cgroup_cpu_quota(str(root), str(proc)) == 2.0
    assert cpu_count(str(root), str(proc)) == min(2, len(os.sched_getaffinity(0)))
    # the job's inactive page cache (its inputs, read) is reclaimed before the limit: not counted as used
    (job / "memory.stat").write_text(f"anon 1000\nactive_file 0\ninactive_file {GiB // 8}\nunevictable 0\n")
    assert available_memory(str(root), str(proc)) == min(_meminfo_available(), GiB - GiB // 4 + GiB // 8)
    # the mount's root alone (all that was read before) holds no limit: the node's memory, past the job's
    assert available_memory(str(root), str(tmp_path / "no-such-file")) > GiB


def test_cgroup_v1_controllers_in_their_own_hierarchies(tmp_path):
    root, proc = tmp_path / "cg", tmp_path / "cgroup"
    step = "slurm/uid_0/job_7/step_0"
    _write(root / "memory" / "slurm/uid_0/job_7", memory_limit_in_bytes=str(GiB), memory_usage_in_bytes=str(GiB // 2))
    (root / "memory" / "slurm/uid_0/job_7" / "memory.stat").write_text(
        f"inactive_file 0\ntotal_inactive_file {GiB // 4}\n"
    )
    _write(root / "memory" / step, memory_limit_in_bytes="9223372036854771712")  # v1's "no limit"
    _write(root / "cpu,cpuacct" / "slurm/uid_0/job_7", cpu_cfs_quota_us="150000", cpu_cfs_period_us="100000")
    _write(root / "cpu,cpuacct" / step, cpu_cfs_quota_us="-1", cpu_cfs_period_us="100000")
    proc.write_text(f"4:memory:/{step}\n3:cpu,cpuacct:/{step}\n1:name=systemd:/\n")
    assert available_memory(str(root), str(proc)) == min(_meminfo_available(), GiB - GiB // 2 + GiB // 4)
    assert cgroup_cpu_quota(str(root), str(proc)) == 1.5
    assert cpu_count(str(root), str(proc)) == min(2, len(os.sched_getaffinity(0)))


def test_cpu_count_is_the_affinity_where_no_quota_is_set(tmp_path):
    empty = str(tmp_path / "none")
    assert cgroup_cpu_quota(empty, empty) is None
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})  # a Slurm task's cpuset of one core
    try:
        assert cpu_count(empty, empty) == 1
    finally:
        os.sched_setaffinity(0, before)
    assert cpu_count(empty, empty) == len(before)
