"""Slurm backend: a job spec becomes ``sbatch`` submissions, on this machine or over SSH.

``shard_groups=1`` (default): one allocation runs ``jobs run SPEC``. ``shard_groups=N``: an array
``--array=0-(N-1)%K`` whose task ``i`` runs ``jobs run --group i/N``, then a *collect* job
(``--dependency=afterany``) runs ``jobs collect``; N is capped at the site's ``MaxArraySize``.

:meth:`SlurmBackend.status` only reads: the result file, ``scontrol`` (then ``sacct``), the checkpoints.
A failure in ``resubmit_on`` is ``retryable``; the follower (:mod:`airflow_curation.jobs.attempts`) relaunches
it as a new attempt in the same job folder (``current.json`` names the latest, so every handle of the run
follows it).

Secrets: the job's ``env`` goes into a ``0600`` file, :data:`ENV_FILE` (over SSH through stdin), that the
scripts source, and so do the credentials of this process's environment when sbatch runs here (sbatch
runs without them, and hands Slurm only the names of ``--export``, so no job record holds one:
:meth:`~.script.ScriptRenderer.job_env`); the last consumer of an
attempt deletes it unless the run may be relaunched, and :meth:`SlurmBackend.release` (the run is over)
and ``cancel`` delete it too.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
import warnings
from collections.abc import Sequence
from typing import Any

from airflow_curation.backends.base import Backend, JobHandle, JobState, JobStatus, read_log, status_from_result
from airflow_curation.backends.slurm.sbatch import SbatchOptions
from airflow_curation.backends.slurm.script import ATTEMPT, ENV_FILE, TASK, ScriptRenderer, check_job_dir
from airflow_curation.backends.slurm.states import (
    DEFAULT_RESUBMIT_ON,
    SlurmJobRecord,
    compress,
    failure_word,
    parse_sacct,
    parse_scontrol_jobs,
    summarize,
    task_ends,
)
from airflow_curation.backends.slurm.transport import SlurmCommands, SlurmError, _LocalFiles, _RemoteFiles, log
from airflow_curation.core import credentials, storage
from airflow_curation.core.layout import safe_name
from airflow_curation.jobs import groups as grp
from airflow_curation.jobs import progress
from airflow_curation.jobs.spec import JobSpec

SLURM_JOBS_DIR = os.path.join(".airflow-curation", "slurm-jobs")  # under $HOME: the object-store lake default
LAUNCH_KINDS = ("dask",)  # beside None: one job, or an array and its collect job (by shard_groups)


def _launch_kind(launch_kind: str | None, engine: str | None) -> str | None:
    """``launch_kind``, or its deprecated old name ``engine`` (with a warning); never both, never another."""
    if engine is not None:
        if launch_kind is not None and launch_kind != engine:
            raise ValueError(
                f"launch_kind={launch_kind!r} and its old name engine={engine!r} disagree: give launch_kind"
            )
        warnings.warn(
            "the Slurm backend's option 'engine' was renamed to 'launch_kind' (docs/glossary.md); "
            f"give launch_kind={engine!r}",
            FutureWarning,
            stacklevel=3,
        )
        launch_kind = engine
    if launch_kind not in (None, *LAUNCH_KINDS):
        raise ValueError(
            f"launch_kind {launch_kind!r}: only 'dask' (a Dask cluster across the allocation) is supported"
        )
    return launch_kind


class SlurmBackend(Backend):
    """Run job specs as Slurm batch jobs.

    :param partition: ``--partition``.
    :param account: ``--account``.
    :param qos: ``--qos``.
    :param time_limit: ``--time`` (e.g. ``"04:00:00"``).
    :param cpus_per_task: ``--cpus-per-task``.
    :param mem: ``--mem`` (e.g. ``"16G"``).
    :param sbatch_options: more sbatch options, a list of argv elements or one string split like a
        shell would (``"--gres=gpu:1 --constraint=a100"``); never interpreted by a shell.
    :param shard_groups: 1 for one allocation, N for an array over N shard groups (capped at MaxArraySize).
    :param min_group_bytes: each array task reads at least this many bytes of the input manifest's shards
        (``shard_groups`` is lowered where the run is smaller; 0: no floor), as a Kubernetes sweep's pods do.
    :param array_parallelism: the ``%K`` of ``--array``: at most K tasks at once (0: no limit).
    :param work_dir: a folder every node sees (and, over SSH, the same path here and there) for job
        scripts, specs, results and logs; default the lake's ``_jobs/`` folder when the lake is local,
        else (an object-store lake) ``$CURATION_SLURM_JOBS_DIR`` or ``~/.airflow-curation/slurm-jobs``
        (over SSH a work_dir must be given).
    :param python: interpreter on the compute nodes; default this one.
    :param env: environment for the job, secrets included (e.g. ``CURATION_STORAGE_OPTIONS_S3``):
        written to a ``0600`` file that the job sources and that is deleted after the run, never
        into the script.
    :param transport: runs the Slurm commands instead of a local process: an object with ``run(argv,
        data, timeout) -> CompletedProcess`` (bytes out; raises ``OSError`` or ``subprocess.TimeoutExpired``
        when it cannot run it). The factory (:func:`airflow_curation.hooks.factory.backend_for`) builds
        it from a ``slurm_conn_id``: the SSH provider's connection to a login node. Not part of
        :meth:`options`: whoever rebuilds the backend supplies it again.
    :param max_resubmits: how many times the follower (:func:`~airflow_curation.jobs.attempts.settle`)
        relaunches a failed run (only its unfinished shard groups) that failed for a reason in ``resubmit_on``
        (default 2: three attempts in all, as Slurm's own requeue would give a task lost to a node or a cancel).
    :param resubmit_on: Slurm states reported as ``retryable`` (``GONE``: the job vanished without a result).
    :param collect_time_limit: ``--time`` of the collect job of an array run.
    :param command_timeout: seconds a Slurm command may take.
    :param nodes: ``--nodes`` of a one-allocation job.
    :param ntasks: ``--ntasks`` of a one-allocation job (with ``launch_kind="dask"``: one Dask worker
        process group per task, ``cpus_per_task`` worker processes each).
    :param remote_work_dir: the work folder exists only where the Slurm commands run (the SSH login
        node and the cluster), not on the Airflow worker: job files are written and read over SSH.
    :param export_env: names of more variables of the submitting environment that sbatch hands Slurm
        (``--export``), beside :data:`~.script.EXPORTED`; Slurm saves them in the job record, so a
        credential's name is refused (put it in ``env``).
    :param launch_kind: ``None``: one job (``shard_groups=1``) or an array and its collect job;
        ``"dask"``: the one-allocation job first starts a Dask scheduler on its batch node and Dask
        workers on every task of the allocation (``srun``), then runs the stage on that cluster
        (``--scheduler-address``); stages with the Dask mapper (preprocess, dedup) spread over all nodes.
    :param engine: the old name of ``launch_kind`` (deprecated: a warning, then taken as ``launch_kind``).

    The backend is composed of its :class:`~.sbatch.SbatchOptions` (``self.sbatch``), its
    :class:`~.script.ScriptRenderer` (``self.script``) and its :class:`~.transport.SlurmCommands`
    (``self.commands``), each built here from these arguments.
    """

    name = "slurm"
    _unshared_options = ("transport",)  # a live connection: the triggerer's factory supplies its own

    def __init__(
        self,
        partition: str | None = None,
        account: str | None = None,
        qos: str | None = None,
        time_limit: str | None = None,
        cpus_per_task: int | None = None,
        mem: str | None = None,
        sbatch_options: Sequence[str] | str | None = None,
        shard_groups: int = 1,
        min_group_bytes: int = grp.MIN_GROUP_BYTES,
        array_parallelism: int = 0,
        work_dir: str | None = None,
        python: str | None = None,
        env: dict[str, str] | None = None,
        max_resubmits: int = 2,
        resubmit_on: Sequence[str] = DEFAULT_RESUBMIT_ON,
        collect_time_limit: str | None = None,
        command_timeout: float = 60.0,
        nodes: int | None = None,
        ntasks: int | None = None,
        launch_kind: str | None = None,
        remote_work_dir: bool = False,
        export_env: Sequence[str] = (),
        transport: Any = None,
        engine: str | None = None,
    ) -> None:
        launch_kind = _launch_kind(launch_kind, engine)
        # The sbatch options, checked once (before any connection is made).
        self.sbatch = SbatchOptions(
            partition=partition,
            account=account,
            qos=qos,
            time_limit=time_limit,
            cpus_per_task=cpus_per_task,
            mem=mem,
            extra=sbatch_options,
            nodes=nodes,
            ntasks=ntasks,
            collect_time_limit=collect_time_limit,
            export_env=export_env,
        )
        self.shard_groups = int(shard_groups)
        self.min_group_bytes = int(min_group_bytes)
        self.array_parallelism = int(array_parallelism)
        if self.shard_groups < 1 or self.array_parallelism < 0:
            raise ValueError("shard_groups must be >= 1 and array_parallelism >= 0")
        self.work_dir = work_dir
        self.transport = transport
        # Whether the Slurm commands (and so the paths they name) are on another host.
        self.remote = transport is not None and getattr(transport, "remote", True)
        self.commands = SlurmCommands(transport=transport, timeout=command_timeout)
        self.max_resubmits = int(max_resubmits)
        self.resubmit_on = tuple(s.upper() for s in resubmit_on)
        self.script = ScriptRenderer(
            python=python or sys.executable,
            env=env,
            max_resubmits=self.max_resubmits,
            inherit_credentials=self.commands.here,
        )
        credentials.warn_unmaskable(self.script.env, "slurm env")
        self.launch_kind = launch_kind
        self.remote_work_dir = bool(remote_work_dir)
        if self.remote_work_dir and not (self.remote and work_dir):
            raise ValueError(
                "remote_work_dir needs a login node (slurm_conn_id: the factory's SSH transport) and a work_dir on that side"
            )
        self.files: _LocalFiles | _RemoteFiles = _RemoteFiles(self.commands) if self.remote_work_dir else _LocalFiles()

    def options(self) -> dict[str, Any]:
        """Constructor options (JSON-able), so the triggerer rebuilds the backend: the composed parts' own
        and the backend's (not ``transport``, a live connection, nor ``engine``, ``launch_kind``'s old name)."""
        return {
            **self.sbatch.options(),
            "shard_groups": self.shard_groups,
            "min_group_bytes": self.min_group_bytes,
            "array_parallelism": self.array_parallelism,
            "work_dir": self.work_dir,
            "python": self.script.python,
            "env": dict(self.script.env),
            "max_resubmits": self.max_resubmits,
            "resubmit_on": list(self.resubmit_on),
            "command_timeout": self.commands.timeout,
            "launch_kind": self.launch_kind,
            "remote_work_dir": self.remote_work_dir,
        }

    def groups_for(self, spec: JobSpec) -> int:
        """Array tasks of a run: ``shard_groups``, at most MaxArraySize, and (as a Kubernetes sweep) few enough
        that each task reads ``min_group_bytes`` of its input manifest's shards or more (small shards go
        several to a task: its fixed cost is paid once for them)."""
        if self.shard_groups <= 1:
            return 1
        cap = grp.group_count(self.shard_groups, self.commands.max_array_size())
        return grp.groups_for_input(cap, spec.config.get("input_manifest"), self.min_group_bytes) or cap

    def job_dir_for(self, spec: JobSpec) -> str:
        key = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
        if self.work_dir:
            work_dir = self.work_dir if self.remote else os.path.abspath(self.work_dir)
            return os.path.join(work_dir, safe_name(spec.run_id, "run id"), safe_name(spec.stage, "stage"), key)
        lake = spec.lake_obj
        if not storage.is_local(lake.root):
            if self.remote:
                raise ValueError(
                    f"the lake {lake.root} is not a local folder and the Slurm commands run over SSH: give the "
                    "Slurm backend a work_dir that the login node and the compute nodes share"
                )
            # An object-store lake cannot hold job files (sbatch reads the script, slurmd writes the log):
            # a folder under this user's home, shared with the compute nodes on most clusters.
            base = os.environ.get("CURATION_SLURM_JOBS_DIR") or os.path.join(os.path.expanduser("~"), SLURM_JOBS_DIR)
            parts = (safe_name(spec.run_id, "run id"), safe_name(spec.stage, "stage"), key)
            return os.path.abspath(os.path.join(base, *parts))
        base = lake.jobs_dir(spec.run_id, spec.stage)
        return os.path.abspath(os.path.join(storage.local_path(base), key))

    # -- Backend ---------------------------------------------------------------------------------

    def launch(
        self, spec: JobSpec, groups: Sequence[int] | None = None, *, previous: JobHandle | None = None
    ) -> JobHandle:
        if previous is None:
            base, attempt = self._prepare(spec), 1
        else:  # the follower has checked the environment (prepare_relaunch) and holds the attempt's lock
            base, attempt = dict(previous), previous["attempt"] + 1
        n = base["groups"]
        indices = None if n == 1 else sorted(groups) if groups is not None else list(range(n))
        handle = self._submit_attempt(base, attempt, indices)
        if previous is not None:
            what = f"groups {compress(indices)}" if indices else "the job"
            self.files.append(
                base["log"], f"airflow-curation: attempt {attempt} resubmitted {what} as job {handle['job_id']}\n"
            )
        return handle

    def _prepare(self, spec: JobSpec) -> JobHandle:
        """The job folder of a new run: spec, environment file, scripts (reused by every attempt)."""
        job_dir = check_job_dir(self.job_dir_for(spec))
        self.files.makedirs(job_dir)
        spec_path = os.path.join(job_dir, "spec.json")
        groups = self.groups_for(spec)
        spec = grp.with_min_units(spec, groups)  # a unit for each array task where the input allows
        self.files.write(spec_path, spec.to_json().encode())
        base = {
            "backend": self.name,
            "job_dir": job_dir,
            "spec": spec_path,
            "log": os.path.join(job_dir, "job.log"),
            "manifest_uri": spec.manifest_uri,
            "stage": spec.stage,
            "run_id": spec.run_id,
            "lake": spec.lake,
            "groups": groups,
        }
        if self.script.job_env():
            base["env_file"] = os.path.join(job_dir, ENV_FILE)
            self.files.write(base["env_file"], self.script.render_env(), mode=0o600)  # the owner's only
        result = (os.path.join(job_dir, "result-"), ATTEMPT, ".json")
        if groups == 1:
            dask_cluster = self.launch_kind == "dask"
            self._write_script(job_dir, "job.sh", grp.run_args(spec_path, result), dask_cluster=dask_cluster)
        else:
            group_result = (os.path.join(job_dir, "result-"), ATTEMPT, f"-group-{grp.GROUP}.json")
            self._write_script(
                job_dir, "group.sh", grp.group_args(spec_path, group_result, TASK, groups), last_consumer=False
            )
            # The follower's budget: a collect before the last attempt that lost units says a relaunch is
            # pending, so a stage streaming from this run waits for the reopen instead of giving up.
            attempts = ((ATTEMPT,), self.max_resubmits + 1)
            self._write_script(job_dir, "collect.sh", grp.collect_args(spec_path, result, attempts=attempts))
        return base

    def spec_of(self, handle: JobHandle) -> JobSpec:
        data = self.files.read_json(handle["spec"])
        if data is None:
            raise SlurmError(f"cannot read the job spec {handle['spec']}")
        return JobSpec.from_dict(data)

    def _submit_attempt(self, base: JobHandle, attempt: int, indices: list[int] | None) -> JobHandle:
        """Submit one attempt: the whole job, or the array tasks ``indices`` plus the collect job."""
        job_dir, name = base["job_dir"], f"curation-{base['stage']}"
        handle = {
            **base,
            "attempt": attempt,
            "result": os.path.join(job_dir, f"result-{attempt}.json"),
            "array_job_id": None,
            "array": None,
            "submitted": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 3600)),
        }

        def sbatch(script: str, job_name: str = name, **options: Any) -> str:
            argv = self.sbatch.argv(
                os.path.join(job_dir, script), job_name, base["log"], job_dir, script_args=[str(attempt)], **options
            )
            return self.commands.sbatch(argv)

        if base["groups"] == 1:
            handle["job_id"] = sbatch("job.sh")
            return handle
        dependency = None
        if indices:
            handle["array"] = compress(indices) + (f"%{self.array_parallelism}" if self.array_parallelism else "")
            handle["array_job_id"] = sbatch("group.sh", array=handle["array"])
            dependency = f"afterany:{handle['array_job_id']}"
        try:
            handle["job_id"] = sbatch("collect.sh", f"{name}-collect", dependency=dependency, collect=True)
        except SlurmError:
            if handle["array_job_id"]:
                self.commands.run(["scancel", handle["array_job_id"]], check=False)
            raise
        return handle

    def _write_script(
        self, job_dir: str, name: str, args: list[str | tuple], dask_cluster: bool = False, last_consumer: bool = True
    ) -> str:
        path = check_job_dir(os.path.join(job_dir, name))
        self.files.write(path, self.script.render(job_dir, args, dask_cluster, last_consumer).encode(), mode=0o750)
        return path

    def _drop_env(self, handle: JobHandle) -> None:
        """Delete the job's environment file (idempotent): nothing of this run will read it again."""
        if handle.get("env_file"):
            self.files.remove(handle["env_file"])

    def prepare_relaunch(self, handle: JobHandle) -> None:
        """Before another attempt (and before its lock, so a refusal blocks no later relaunch): this
        backend's environment (fresh credentials, say) replaces the file; without one, the file the run
        kept must still be there."""
        if not handle.get("env_file"):
            return
        if self.script.env:
            self.files.write(handle["env_file"], self.script.render_env(), mode=0o600)
        elif not self.files.exists(handle["env_file"]):
            raise SlurmError(
                f"the job's environment file {handle['env_file']} was deleted when the run "
                "finished; resubmit with a backend that has the job's env (its storage options)"
            )

    def run_files(self) -> _LocalFiles | _RemoteFiles:
        return self.files  # the job folder, maybe only over SSH

    def job_records(self, handle: JobHandle) -> tuple[list[SlurmJobRecord], str]:
        """What Slurm says about the attempt's jobs, and where it came from (scontrol, sacct, none)."""
        ids = [j for j in (handle.get("array_job_id"), handle["job_id"]) if j]
        records: list[SlurmJobRecord] = []
        missing = []
        for job_id in ids:
            proc = self.commands.run(["scontrol", "show", "job", "-o", job_id], check=False)
            if proc.returncode == 0:
                records += parse_scontrol_jobs(proc.stdout)
            elif "Invalid job id" in (proc.stderr + proc.stdout):
                missing.append(job_id)  # finished longer ago than MinJobAge
            else:
                raise SlurmError(f"scontrol show job {job_id}: {(proc.stderr or proc.stdout).strip()}")
        if not missing:
            return records, "scontrol"
        # sacct looks at today only unless told where to start.
        since = handle.get("submitted") or time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 7 * 86400))
        proc = self.commands.run(
            ["sacct", "-n", "-P", "-X", "-o", "JobID,State,ExitCode,Reason", "-S", since, "-j", ",".join(missing)],
            check=False,
        )
        text = proc.stderr + proc.stdout
        if proc.returncode != 0 or "accounting storage is disabled" in text:
            return records, "none"  # no accounting: the files in the job folder decide
        return records + parse_sacct(proc.stdout), "sacct"

    def status(self, handle: JobHandle) -> JobStatus:
        """Reads the attempt's result file, ``scontrol``/``sacct`` and the checkpoints; changes nothing."""
        try:
            return self._status(handle)
        except SlurmError as e:  # SSH or the controller is down: not a verdict on the job
            return JobStatus(JobState.UNKNOWN, f"cannot reach Slurm: {e}")

    def release(self, handle: JobHandle) -> None:
        # The run is over: the secrets go now, also when the job could not delete them itself (killed at
        # its time limit, a failed attempt that might have been relaunched).
        try:
            self._drop_env(handle)
        except SlurmError as e:
            log.warning("cannot delete %s: %s", handle.get("env_file"), e)

    def _retryable(self, word: str | None) -> bool:
        return word is not None and word in self.resubmit_on

    def _status(self, handle: JobHandle) -> JobStatus:
        result = self._result(handle)
        try:
            records, source = self.job_records(handle)
        except SlurmError as e:
            if result is None:
                return JobStatus(JobState.UNKNOWN, f"cannot reach Slurm: {e}")
            records, source = [], "unreachable"  # the result file alone decides
        if result is None:
            result = self._result(handle)  # it may have landed while we asked
        cancelled = self._was_cancelled(handle)
        main = [r for r in records if r.job_id == handle["job_id"] and r.array_task_id is None]
        if result is not None:
            if main and main[0].mapped in (JobState.RUNNING, JobState.PENDING):
                return JobStatus(JobState.RUNNING, f"job {handle['job_id']} is finishing (result written)")
            st = status_from_result(result)
            if not result.succeeded and cancelled:
                return JobStatus(JobState.CANCELLED, "cancelled", st.result)
            if not result.succeeded:
                word, ends = self._array_failure(handle)
                st.retryable = self._retryable(word)
                ends = "; ".join(x for x in (ends, self._advice(word)) if x)
                st.message = f"{ends}: {st.message}" if ends else st.message
            return st
        state, message = summarize(records)
        if records and not state.finished:
            # The collect job may be dead already (e.g. cancelled) while array tasks are still listed.
            if main and main[0].mapped.finished and main[0].mapped != JobState.SUCCEEDED:
                state, message = summarize(main)
            else:
                return JobStatus(state, f"job {handle['job_id']}: {message}")
        if cancelled or state == JobState.CANCELLED:
            return JobStatus(JobState.CANCELLED, f"job {handle['job_id']} cancelled")
        if records and state == JobState.FAILED:
            return JobStatus(
                JobState.FAILED,
                f"job {handle['job_id']}: {message}; log: {handle['log']}",
                retryable=self._retryable(failure_word(records)),
            )
        # Finished (or forgotten by Slurm) without a result: the checkpoints say how far it got.
        try:
            done, total = progress.checkpointed(handle["manifest_uri"])
        except Exception:  # noqa: BLE001 - a detail of the message, not the verdict
            done, total = 0, 0
        where = f"{source} has no record" if not records else f"Slurm says {message}"
        return JobStatus(
            JobState.FAILED,
            f"job {handle['job_id']} ended without a result ({where}); "
            f"{done}/{total} units checkpointed; log: {handle['log']}",
            retryable=self._retryable("GONE"),
        )

    def _advice(self, word: str | None) -> str:
        """What to change after a failure that a relaunch as it is would repeat (an array task's OOM)."""
        if word != "OUT_OF_MEMORY":
            return ""
        now = f"now {self.sbatch.mem}" if self.sbatch.mem else "unset: the partition's default"
        return (
            f"out of memory (OOM): raise the Slurm backend's mem option (sbatch --mem, {now}) or spread the run "
            "over more shard_groups; not relaunched as it is"
        )

    def _array_failure(self, handle: JobHandle) -> tuple[str | None, str]:
        """Why an attempt whose collect step wrote a failed result failed, from its array tasks: the Slurm
        state that explains it, and what happened to each task that did not complete."""
        try:
            records, _ = self.job_records(
                {**handle, "job_id": handle.get("array_job_id") or handle["job_id"], "array_job_id": None}
            )
        except SlurmError:
            return None, ""
        return failure_word(records), task_ends(records, int(handle.get("groups", 1)))

    def cancel(self, handle: JobHandle) -> None:
        self._mark_cancelled(handle)
        ids = [j for j in (handle["job_id"], handle.get("array_job_id")) if j]
        self.commands.run(["scancel", *ids], check=False)  # idempotent: finished ids are not an error worth raising
        self.release(handle)  # running tasks have read it; tasks not started yet must not start

    def logs(self, handle: JobHandle, offset: int = 0) -> tuple[str, int]:
        path = handle["log"]
        if self.remote_work_dir or (self.remote and not os.path.exists(path)):
            data = self.commands.read(path, offset)  # the work folder is not mounted here
            return data.decode("utf-8", "replace"), offset + len(data)
        return read_log(path, offset)
