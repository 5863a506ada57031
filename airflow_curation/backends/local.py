"""Local backend (the embedded default): the job runs as a subprocess on this machine.

The subprocess starts its own session, so it outlives the Airflow worker that launched it; a restarted
worker or the triggerer finds it again by pid plus the process start time (which guards against pid
reuse), and reads its result file once it has ended.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from airflow_curation.backends.base import Backend, JobHandle, JobState, JobStatus, read_log, status_from_result
from airflow_curation.core import credentials, storage
from airflow_curation.jobs import groups as grp
from airflow_curation.jobs.spec import JobSpec


def _proc_start_time(pid: int) -> str | None:
    """Start time of ``pid`` in clock ticks since boot, or None if it is gone (or a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return fields[19]


class LocalBackend(Backend):
    """:param work_dir: where job folders (spec, log, result) go; default ``$CURATION_LOCAL_JOBS_DIR``
        or ``~/.airflow-curation/jobs``.
    :param python: interpreter that runs the job; default this one.
    :param env: extra environment for the job.
    """

    name = "local"
    status_poll_s = 0.5  # a /proc read

    def __init__(
        self, work_dir: str | None = None, python: str | None = None, env: dict[str, str] | None = None
    ) -> None:
        self.work_dir = (
            work_dir or os.environ.get("CURATION_LOCAL_JOBS_DIR") or str(Path.home() / ".airflow-curation" / "jobs")
        )
        self.python = python or sys.executable
        self.env = env or {}
        credentials.warn_unmaskable(self.env, "local env")

    def launch(
        self, spec: JobSpec, groups: Sequence[int] | None = None, *, previous: JobHandle | None = None
    ) -> JobHandle:
        """One process runs the whole stage (its mapper spreads the units over this machine's cores), so
        there are no groups to pick: a relaunch runs it whole again and skips the checkpointed units."""
        job_id = f"{spec.stage}-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
        job_dir = Path(self.work_dir) / job_id
        job_dir.mkdir(parents=True, exist_ok=True)
        spec_path, log_path, result_path = job_dir / "spec.json", job_dir / "job.log", job_dir / "result.json"
        storage.write_bytes(str(spec_path), spec.to_json().encode())
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                grp.command(grp.run_args(str(spec_path), str(result_path)), self.python),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, **self.env},
                cwd=str(job_dir),
            )
        return {
            "backend": self.name,
            "job_id": job_id,
            "pid": proc.pid,
            "start_time": _proc_start_time(proc.pid),
            "job_dir": str(job_dir),
            "log": str(log_path),
            "result": str(result_path),
            "spec": str(spec_path),
            "manifest_uri": spec.manifest_uri,
            "attempt": int((previous or {}).get("attempt", 0)) + 1,
        }

    def spec_of(self, handle: JobHandle) -> JobSpec:
        return JobSpec.read(handle.get("spec") or str(Path(handle["job_dir"], "spec.json")))

    def _alive(self, handle: JobHandle) -> bool:
        with contextlib.suppress(ChildProcessError):  # our child: collect its exit status, no zombie left
            os.waitpid(handle["pid"], os.WNOHANG)
        started = _proc_start_time(handle["pid"])
        return started is not None and started == handle.get("start_time")

    def status(self, handle: JobHandle) -> JobStatus:
        if self._alive(handle):
            return JobStatus(JobState.RUNNING, f"pid {handle['pid']} running")
        done = status_from_result(self._result(handle))
        if done is not None:
            return done
        if self._was_cancelled(handle):
            return JobStatus(JobState.CANCELLED, "cancelled")
        return JobStatus(
            JobState.FAILED, f"job process {handle['pid']} ended without a result (killed?); see {handle['log']}"
        )

    def cancel(self, handle: JobHandle, grace_seconds: float = 10.0) -> None:
        self._mark_cancelled(handle)
        if not self._alive(handle):
            return
        pgid = handle["pid"]  # start_new_session makes the job its own process group leader
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.time() + grace_seconds
        while time.time() < deadline and self._alive(handle):
            time.sleep(0.1)
        if self._alive(handle):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def logs(self, handle: JobHandle, offset: int = 0) -> tuple[str, int]:
        return read_log(handle["log"], offset)
