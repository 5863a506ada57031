"""Slurm backend: a job spec becomes one ``sbatch`` submission, on this machine or over SSH.

Two shapes:

* ``shard_groups=1`` (default): one allocation runs ``python -m airflow_curation.jobs run SPEC``; the
  stage's engine (process pool, Dask, Ray) uses what the allocation gives it.
* ``shard_groups=N``: an array ``--array=0-(N-1)%K`` whose task ``i`` runs units ``i::N`` of the plan
  (``--shard-group i/N``), then a small *collect* job (``--dependency=afterany``) gathers the
  checkpoints into the manifest and applies the failure budget. N is capped at the site's
  ``MaxArraySize`` (read from ``scontrol show config``).

State comes from ``scontrol show job`` while Slurm remembers the job (``MinJobAge``), then ``sacct``
where accounting exists, and in the end from the files the job leaves in its folder: the result JSON
and, per unit, the checkpoint records, which are the final truth. A failed run is resubmitted with
only the array tasks whose units lack a checkpoint (:meth:`SlurmBackend.resubmit`, automatic up to
``max_resubmits`` for the states in ``resubmit_on``).

No parameter ever reaches a shell unquoted: sbatch options are argv elements (never ``#SBATCH``
lines), the job script quotes every value with :func:`shlex.quote`, and over SSH the whole remote
command line is one :func:`shlex.join` string, which is what the remote shell parses.

No secret is written into a script, the spec, a result or a log: the job's ``env`` (which holds the
lake's storage options) goes into a ``0600`` file, :data:`ENV_FILE`, in the job folder (over SSH
streamed through stdin, never on a command line) that the scripts source. The last consumer of an
attempt (the job, or the collect job of an array) deletes it unless the poller may still resubmit the
run; :meth:`SlurmBackend.status` deletes it once it reports the run finished, and ``cancel`` at once.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from airflow_curation.backends.base import Backend, JobHandle, JobState, JobStatus
from airflow_curation.core import storage
from airflow_curation.core.checkpoint import CheckpointStore
from airflow_curation.core.layout import Lake, safe_name
from airflow_curation.core.manifest import Manifest, ManifestError
from airflow_curation.jobs.spec import JobSpec

log = logging.getLogger(__name__)

# Slurm job states (``scontrol``/``sacct`` spelling) -> our states, with a note for the failures.
_PENDING = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING", "SUSPENDED",
            "STAGE_OUT", "SIGNALING", "SPECIAL_EXIT"}
_RUNNING = {"RUNNING", "COMPLETING", "STOPPED"}
FAILURE_NOTES = {
    "FAILED": "a task exited non-zero",
    "TIMEOUT": "hit its time limit; raise --time (resubmission resumes from the checkpoints)",
    "OUT_OF_MEMORY": "ran out of memory; raise --mem or use more shard groups",
    "NODE_FAIL": "its node failed",
    "BOOT_FAIL": "its node failed to boot",
    "PREEMPTED": "was preempted by a higher-priority job",
    "DEADLINE": "missed its deadline",
    "REVOKED": "was revoked (federation)",
}
# Final states after which running the same units again may well succeed.
DEFAULT_RESUBMIT_ON = ("TIMEOUT", "NODE_FAIL", "BOOT_FAIL", "PREEMPTED", "GONE")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_JOB_ID = re.compile(r"^\d+$")
_FIELD = re.compile(r"(?:^|\s)(JobId|ArrayJobId|ArrayTaskId|JobState|Reason|ExitCode)=(\S*)")


class _Task:
    def __repr__(self) -> str:
        return "TASK"


TASK = _Task()  # stands for $SLURM_ARRAY_TASK_ID in a rendered script argument


class _Attempt:
    def __repr__(self) -> str:
        return "ATTEMPT"


# Stands for the script's first argument, the attempt number: a resubmission reuses the scripts (and
# the environment file) of the first submission, so a poller that lacks the job's secrets can still
# resubmit it.
ATTEMPT = _Attempt()
# The job's environment (secrets included), 0600, in the job folder, while the run may still use it.
ENV_FILE = "secrets.env"
_EXPANSIONS = {TASK: '"${SLURM_ARRAY_TASK_ID}"', ATTEMPT: '"$1"'}


class SlurmError(RuntimeError):
    """A Slurm command failed (submission refused, controller unreachable...)."""


def map_state(slurm_state: str) -> JobState:
    """Our state for a Slurm state word (``CANCELLED by 0`` counts as ``CANCELLED``)."""
    word = slurm_state.split()[0].rstrip("+").upper() if slurm_state.strip() else ""
    if word in _PENDING:
        return JobState.PENDING
    if word in _RUNNING:
        return JobState.RUNNING
    if word == "COMPLETED":
        return JobState.SUCCEEDED
    if word == "CANCELLED":
        return JobState.CANCELLED
    if word in FAILURE_NOTES:
        return JobState.FAILED
    return JobState.UNKNOWN


@dataclass
class SlurmJobRecord:
    """One job (or array task) as ``scontrol`` or ``sacct`` reports it."""

    job_id: str
    state: str
    reason: str = ""
    exit_code: str = ""
    array_task_id: str | None = None

    @property
    def mapped(self) -> JobState:
        return map_state(self.state)


def parse_scontrol_jobs(text: str) -> list[SlurmJobRecord]:
    """Parse ``scontrol show job -o`` output: one job or array task per line."""
    records = []
    for line in text.splitlines():
        fields: dict[str, str] = {}
        for key, value in _FIELD.findall(line):
            fields.setdefault(key, value)  # first occurrence: the job's own field, not a later value
        if "JobId" in fields and "JobState" in fields:
            records.append(SlurmJobRecord(fields["JobId"], fields["JobState"], fields.get("Reason", ""),
                                          fields.get("ExitCode", ""), fields.get("ArrayTaskId")))
    return records


def parse_sacct(text: str) -> list[SlurmJobRecord]:
    """Parse ``sacct -n -P -X -o JobID,State,ExitCode,Reason`` output (``1234_5`` is an array task)."""
    records = []
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 3 or not parts[0]:
            continue
        job_id, _, task = parts[0].partition("_")
        records.append(SlurmJobRecord(job_id, parts[1], parts[3] if len(parts) > 3 else "", parts[2],
                                      task or None))
    return records


def summarize(records: Sequence[SlurmJobRecord]) -> tuple[JobState, str]:
    """One state for a job and its array tasks: failures first, then running, pending, success."""
    if not records:
        return JobState.UNKNOWN, "no record"
    states = [r.mapped for r in records]
    bad = [r for r in records if r.mapped in (JobState.FAILED, JobState.CANCELLED)]
    if any(s in (JobState.RUNNING, JobState.PENDING, JobState.UNKNOWN) for s in states):
        running = sum(s == JobState.RUNNING for s in states)
        state = JobState.RUNNING if running else JobState.PENDING
        if any(s == JobState.UNKNOWN for s in states):
            state = JobState.RUNNING if running else JobState.UNKNOWN
        return state, f"{running} running, {sum(s == JobState.PENDING for s in states)} pending" + (
            f", {len(bad)} failed so far" if bad else "")
    if bad:
        words = sorted({r.state.split()[0] for r in bad})
        cancelled_only = all(r.mapped == JobState.CANCELLED for r in bad)
        notes = "; ".join(f"{w}: {FAILURE_NOTES.get(w, w.lower())}" for w in words)
        who = ", ".join(_label(r) for r in bad[:10])
        return (JobState.CANCELLED if cancelled_only else JobState.FAILED), f"{notes} ({who})"
    return JobState.SUCCEEDED, "completed"


def _label(r: SlurmJobRecord) -> str:
    return f"{r.job_id}" + (f"[{r.array_task_id}]" if r.array_task_id is not None else "") + (
        f" exit {r.exit_code}" if r.exit_code not in ("", "0:0") else "")


def _check_arg(value: str, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a string, got {type(value).__name__}")
    if "\x00" in value:
        raise ValueError(f"{what} contains a NUL byte")
    return value


def check_job_dir(path: str) -> str:
    """Slurm expands ``%`` patterns (and ``\\`` turns them off) in ``--output``; a newline breaks its
    messages. A job folder with any of them is refused rather than silently writing logs elsewhere."""
    _check_arg(path, "job folder")
    bad = sorted({c for c in path if c in "%\\\n\r"})
    if bad:
        raise ValueError(f"job folder {path!r} contains {bad}, which Slurm would interpret in --output; "
                         "choose a work_dir (or lake root) without them")
    return path


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
    :param array_parallelism: the ``%K`` of ``--array``: at most K tasks at once (0: no limit).
    :param work_dir: a folder every node sees (and, over SSH, the same path here and there) for job
        scripts, specs, results and logs; default the lake's ``_jobs/`` folder when the lake is local.
    :param python: interpreter on the compute nodes; default this one.
    :param env: environment for the job, secrets included (e.g. ``CURATION_STORAGE_OPTIONS_S3``):
        written to a ``0600`` file that the job sources and that is deleted after the run, never
        into the script.
    :param ssh_host: run the Slurm commands on this host over SSH (``ssh -o BatchMode=yes HOST``).
    :param command_prefix: argv that runs one shell command line somewhere (overrides ``ssh_host``);
        the Slurm command is appended as a single, fully quoted string, exactly as ssh passes it.
    :param transport: runs the Slurm commands instead of a local process (overrides ``command_prefix``
        and ``ssh_host``): an object with ``run(argv, data, timeout) -> CompletedProcess`` (bytes out;
        raises ``OSError`` or ``subprocess.TimeoutExpired`` when it cannot run it), e.g. the Airflow
        layer's SSH transport for a login node. Not part of :meth:`options`: whoever rebuilds the
        backend supplies it again.
    :param max_resubmits: resubmit a failed run automatically (only its unfinished shard groups) this
        many times when it failed for a reason in ``resubmit_on``.
    :param resubmit_on: Slurm states worth a resubmission (``GONE``: the job vanished without a result).
    :param collect_time_limit: ``--time`` of the collect job of an array run.
    :param command_timeout: seconds a Slurm command may take.
    :param nodes: ``--nodes`` of a one-allocation job.
    :param ntasks: ``--ntasks`` of a one-allocation job (with ``engine="dask"``: one Dask worker process
        group per task, ``cpus_per_task`` worker processes each).
    :param remote_work_dir: the work folder exists only where the Slurm commands run (the SSH login
        node and the cluster), not on the Airflow worker: job files are written and read over SSH.
    :param engine: ``"dask"``: the one-allocation job first starts a Dask scheduler on its batch node and
        Dask workers on every task of the allocation (``srun``), then runs the stage on that cluster
        (``--scheduler-address``); stages with a Dask engine (preprocess, dedup) spread over all nodes.
    """

    name = "slurm"

    def __init__(self, partition: str | None = None, account: str | None = None, qos: str | None = None,
                 time_limit: str | None = None, cpus_per_task: int | None = None, mem: str | None = None,
                 sbatch_options: Sequence[str] | str | None = None, shard_groups: int = 1,
                 array_parallelism: int = 0, work_dir: str | None = None, python: str | None = None,
                 env: dict[str, str] | None = None, ssh_host: str | None = None,
                 command_prefix: Sequence[str] | None = None, max_resubmits: int = 0,
                 resubmit_on: Sequence[str] = DEFAULT_RESUBMIT_ON, collect_time_limit: str | None = None,
                 command_timeout: float = 60.0, nodes: int | None = None, ntasks: int | None = None,
                 engine: str | None = None, remote_work_dir: bool = False, transport: Any = None) -> None:
        self.partition, self.account, self.qos = partition, account, qos
        self.time_limit, self.mem = time_limit, mem
        self.cpus_per_task = int(cpus_per_task) if cpus_per_task else None
        if isinstance(sbatch_options, str):
            sbatch_options = shlex.split(sbatch_options)
        self.sbatch_options = [_check_arg(o, "sbatch option") for o in (sbatch_options or [])]
        for opt in self.sbatch_options:
            if not opt.startswith("-"):
                raise ValueError(f"sbatch option {opt!r} does not start with '-' (sbatch would take it "
                                 "for the script)")
            if opt.split("=", 1)[0] in ("--wrap", "--array", "-a", "--dependency", "-d", "--parsable"):
                raise ValueError(f"sbatch option {opt!r} is set by the backend itself")
        for what, value in (("partition", partition), ("account", account), ("qos", qos),
                            ("time_limit", time_limit), ("mem", mem), ("ssh_host", ssh_host),
                            ("collect_time_limit", collect_time_limit)):
            if value is not None:
                _check_arg(value, what)
        self.shard_groups = int(shard_groups)
        self.array_parallelism = int(array_parallelism)
        if self.shard_groups < 1 or self.array_parallelism < 0:
            raise ValueError("shard_groups must be >= 1 and array_parallelism >= 0")
        self.work_dir = work_dir
        self.python = _check_arg(python or sys.executable, "python")
        self.env = dict(env or {})
        for key, value in self.env.items():
            if not _ENV_NAME.match(str(key)):
                raise ValueError(f"environment variable name {key!r} is not a valid identifier")
            _check_arg(value, f"env {key}")
        if ssh_host is not None and (not ssh_host or ssh_host.startswith("-") or any(c.isspace() for c in ssh_host)):
            raise ValueError(f"ssh_host {ssh_host!r} is not a host name (ssh would read it as an option)")
        self.ssh_host = ssh_host
        if command_prefix is not None:
            self.command_prefix = [_check_arg(a, "command_prefix") for a in command_prefix]
        elif ssh_host:
            self.command_prefix = ["ssh", "-o", "BatchMode=yes", ssh_host]
        else:
            self.command_prefix = []
        self.transport = transport
        # Whether the Slurm commands (and so the paths they name) are on another host.
        self.remote = bool(self.command_prefix) or (transport is not None and getattr(transport, "remote", True))
        self.max_resubmits = int(max_resubmits)
        self.resubmit_on = tuple(s.upper() for s in resubmit_on)
        self.collect_time_limit = collect_time_limit
        self.command_timeout = command_timeout
        self.nodes = int(nodes) if nodes else None
        self.ntasks = int(ntasks) if ntasks else None
        if engine not in (None, "dask"):
            raise ValueError(f"engine {engine!r}: only 'dask' (a Dask cluster across the allocation) is supported")
        self.engine = engine
        self.remote_work_dir = bool(remote_work_dir)
        if self.remote_work_dir and not (self.remote and work_dir):
            raise ValueError("remote_work_dir needs ssh_host (or command_prefix, or a transport) and a work_dir "
                             "on that side")
        self.files: _LocalFiles | _RemoteFiles = _RemoteFiles(self) if self.remote_work_dir else _LocalFiles()
        self._max_array_size: int | None = None

    def options(self) -> dict[str, Any]:
        return {"partition": self.partition, "account": self.account, "qos": self.qos,
                "time_limit": self.time_limit, "cpus_per_task": self.cpus_per_task, "mem": self.mem,
                "sbatch_options": list(self.sbatch_options), "shard_groups": self.shard_groups,
                "array_parallelism": self.array_parallelism, "work_dir": self.work_dir,
                "python": self.python, "env": dict(self.env), "ssh_host": self.ssh_host,
                "command_prefix": list(self.command_prefix), "max_resubmits": self.max_resubmits,
                "resubmit_on": list(self.resubmit_on), "collect_time_limit": self.collect_time_limit,
                "command_timeout": self.command_timeout, "nodes": self.nodes, "ntasks": self.ntasks,
                "engine": self.engine, "remote_work_dir": self.remote_work_dir}

    # -- running Slurm commands ------------------------------------------------------------------

    def command_argv(self, argv: Sequence[str]) -> list[str]:
        """The argv that runs ``argv`` here or, through the prefix, as one quoted remote command line."""
        argv = [_check_arg(a, "argument") for a in argv]
        return [*self.command_prefix, shlex.join(argv)] if self.command_prefix else argv

    def _exec(self, argv: Sequence[str], data: bytes | None = None) -> subprocess.CompletedProcess:
        """Run ``argv`` where the Slurm commands run (the transport, the prefix, or here), bytes in and
        out; raises ``OSError`` or ``subprocess.TimeoutExpired`` when it cannot."""
        if self.transport is not None:
            return self.transport.run([_check_arg(a, "argument") for a in argv], data, self.command_timeout)
        stdin = {"input": data} if data is not None else {"stdin": subprocess.DEVNULL}
        return subprocess.run(self.command_argv(argv), capture_output=True, timeout=self.command_timeout, **stdin)

    def _run(self, argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess:
        try:
            raw = self._exec(argv)
        except OSError as e:
            hint = " (is Slurm installed, or set ssh_host?)" if isinstance(e, FileNotFoundError) else ""
            raise SlurmError(f"cannot run {argv[0]!r}: {e}{hint}") from e
        except subprocess.TimeoutExpired as e:
            raise SlurmError(f"{shlex.join(argv)} took longer than {self.command_timeout}s") from e
        proc = subprocess.CompletedProcess(raw.args, raw.returncode, raw.stdout.decode("utf-8", "replace"),
                                           raw.stderr.decode("utf-8", "replace"))
        if check and proc.returncode != 0:
            raise SlurmError(f"{shlex.join(argv)} failed ({proc.returncode}): "
                             f"{(proc.stderr or proc.stdout).strip()}")
        return proc

    def run_raw(self, argv: Sequence[str], data: bytes | None = None) -> subprocess.CompletedProcess:
        """Run ``argv`` where the Slurm commands run, with bytes in and out (no check)."""
        try:
            return self._exec(argv, data if data is not None else b"")
        except (OSError, subprocess.TimeoutExpired) as e:
            raise SlurmError(f"{shlex.join(argv)}: {e}") from e

    def read_remote(self, path: str, offset: int = 0) -> bytes:
        """Bytes of a file where the Slurm commands run, from ``offset`` (empty if it does not exist)."""
        try:
            proc = self._exec(["tail", "-c", f"+{int(offset) + 1}", "--", path])
        except (OSError, subprocess.TimeoutExpired) as e:
            raise SlurmError(f"cannot read {path}: {e}") from e
        return proc.stdout if proc.returncode == 0 else b""

    def max_array_size(self) -> int:
        """The site's MaxArraySize (array indices go up to MaxArraySize - 1)."""
        if self._max_array_size is None:
            text = self._run(["scontrol", "show", "config"]).stdout
            m = re.search(r"^\s*MaxArraySize\s*=\s*(\d+)", text, re.M)
            self._max_array_size = int(m.group(1)) if m else 1001  # Slurm's default
        return self._max_array_size

    # -- the job folder and script ---------------------------------------------------------------

    def job_dir_for(self, spec: JobSpec) -> str:
        key = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
        if self.work_dir:
            work_dir = self.work_dir if self.remote else os.path.abspath(self.work_dir)
            return os.path.join(work_dir, safe_name(spec.run_id, "run id"), safe_name(spec.stage, "stage"), key)
        lake = spec.lake_obj
        if not storage.is_local(lake.root):
            raise ValueError(f"the lake {lake.root} is not a local folder: give the Slurm backend a "
                             "work_dir on a filesystem that the compute nodes share")
        base = lake.jobs_dir(spec.run_id, spec.stage)
        return os.path.abspath(os.path.join(base[len("file://"):] if base.startswith("file://") else base, key))

    def render_script(self, job_dir: str, args: Sequence[str | tuple], dask_cluster: bool = False,
                      last_consumer: bool = True) -> str:
        """The batch script: sources the job's environment file and runs the jobs entrypoint with ``args``.

        Each arg is a literal string, or a tuple of literal strings, :data:`TASK` (the array task
        index) and :data:`ATTEMPT` (the script's first argument): those two are all the shell expands.

        :param job_dir: the job folder (the script's working directory, where :data:`ENV_FILE` is).
        :param args: the entrypoint's arguments.
        :param dask_cluster: start a Dask cluster across the allocation first.
        :param last_consumer: this script is the last one of an attempt to need the environment file
            (a single job, or the collect job of an array): it deletes the file when it is done.
        """
        lines = ["#!/bin/bash", "# airflow-curation job (generated; every value is shell-quoted)",
                 "set -eu"]
        if self.env:
            lines += [f"env_file={shlex.quote(os.path.join(job_dir, ENV_FILE))}",
                      # Gone means the run was cancelled or finished: running without it would only
                      # fail later, on a missing credential.
                      '[ -r "$env_file" ] || { echo "airflow-curation: $env_file is gone (run cancelled or '
                      'finished)" >&2; exit 1; }',
                      '. "$env_file"']
        lines.append(f"export CURATION_JOB_DIR={shlex.quote(job_dir)}")
        lines.append(f"cd {shlex.quote(job_dir)}")
        py = shlex.quote(_check_arg(self.python, "python"))
        words = [py, "-m", "airflow_curation.jobs"]
        for arg in args:
            parts = arg if isinstance(arg, tuple) else (arg,)
            words.append("".join(_EXPANSIONS[p] if isinstance(p, (_Task, _Attempt))
                                 else shlex.quote(_check_arg(p, "argument")) for p in parts))
        drop_env = bool(self.env) and last_consumer
        if not dask_cluster and not drop_env:
            lines.append("exec " + " ".join(words))
            return "\n".join(lines) + "\n"
        if not dask_cluster:
            return "\n".join(lines + self._run_then_drop_env(" ".join(words))) + "\n"
        # A Dask cluster across the allocation: scheduler here, workers on every task (srun), then the
        # stage on it; the trap stops the cluster however the stage ends.
        sched_file = shlex.quote(os.path.join(job_dir, "dask-scheduler-")) + '"$1".json'
        lines += [
            f"sched_file={sched_file}",
            'rm -f "$sched_file"',
            f'{py} -m distributed.cli.dask_scheduler --scheduler-file "$sched_file" --port 0 --no-dashboard &',
            "sched=$!",
            f'srun --overlap --kill-on-bad-exit=0 {py} -m distributed.cli.dask_worker --scheduler-file '
            '"$sched_file" --nthreads 1 --nworkers "${SLURM_CPUS_PER_TASK:-1}" --no-dashboard &',
            "workers=$!",
            # Workers first (srun passes the TERM on to its tasks), then the scheduler they report to.
            "trap 'kill \"$workers\" 2>/dev/null || true; wait \"$workers\" 2>/dev/null || true; "
            "kill \"$sched\" 2>/dev/null || true; wait \"$sched\" 2>/dev/null || true' EXIT",
            "tries=0",
            f"until address=\"$({py} -c 'import json, sys; print(json.load(open(sys.argv[1]))[\"address\"])' "
            '"$sched_file" 2>/dev/null)"; do',
            '  kill -0 "$sched" 2>/dev/null || { echo "airflow-curation: the Dask scheduler exited" >&2; exit 1; }',
            "  tries=$((tries + 1))",
            '  [ "$tries" -lt 1200 ] || { echo "airflow-curation: no Dask scheduler after 120 s" >&2; exit 1; }',
            "  sleep 0.1",
            "done",
            'echo "airflow-curation: Dask cluster at $address"',
        ]
        command = " ".join(words) + ' --scheduler-address "$address"'
        lines += self._run_then_drop_env(command) if drop_env else [command]
        return "\n".join(lines) + "\n"

    def _run_then_drop_env(self, command: str) -> list[str]:
        """Script lines that run ``command`` and then delete the environment file, unless the attempt
        failed and the poller may still resubmit it (the resubmission reuses the file)."""
        return ["rc=0",
                f"{command} || rc=$?",
                f'if [ "$rc" -eq 0 ] || [ "$1" -gt {int(self.max_resubmits)} ]; then rm -f -- "$env_file"; fi',
                'exit "$rc"']

    def render_env(self) -> bytes:
        """The environment file's text: one ``export NAME=value`` line per variable, values quoted."""
        return "".join(f"export {key}={shlex.quote(self.env[key])}\n" for key in sorted(self.env)).encode()

    def sbatch_argv(self, script: str, job_name: str, log_path: str, job_dir: str,
                    array: str | None = None, dependency: str | None = None,
                    time_limit: str | None = None, collect: bool = False,
                    script_args: Sequence[str] = ()) -> list[str]:
        argv = ["sbatch", "--parsable", f"--job-name={job_name}", f"--output={log_path}",
                "--open-mode=append", f"--chdir={job_dir}"]
        for flag, value in (("--partition", self.partition), ("--account", self.account),
                            ("--qos", self.qos), ("--time", time_limit or self.time_limit)):
            if value:
                argv.append(f"{flag}={value}")
        # The collect job runs the stage's finalize (e.g. dedup's global phase): it keeps the CPUs and
        # memory, but not the extra options (GPUs, constraints) that the shard work asked for.
        if self.cpus_per_task:
            argv.append(f"--cpus-per-task={self.cpus_per_task}")
        if self.mem:
            argv.append(f"--mem={self.mem}")
        if not collect:
            if self.nodes and not array:
                argv.append(f"--nodes={self.nodes}")
            if self.ntasks and not array:
                argv.append(f"--ntasks={self.ntasks}")
            argv += self.sbatch_options
        if array:
            argv.append(f"--array={array}")
        if dependency:
            argv += [f"--dependency={dependency}", "--kill-on-invalid-dep=no"]
        argv.append(script)
        argv += [_check_arg(a, "script argument") for a in script_args]
        return argv

    def _sbatch(self, argv: list[str]) -> str:
        out = self._run(argv).stdout.strip()
        job_id = out.split(";", 1)[0].strip()  # --parsable prints "id" or "id;cluster"
        if not _JOB_ID.match(job_id):
            raise SlurmError(f"sbatch printed {out!r}, not a job id")
        return job_id

    # -- Backend ---------------------------------------------------------------------------------

    def submit(self, spec: JobSpec) -> JobHandle:
        job_dir = check_job_dir(self.job_dir_for(spec))
        self.files.makedirs(job_dir)
        spec_path = os.path.join(job_dir, "spec.json")
        self.files.write(spec_path, spec.to_json().encode())
        groups = min(self.shard_groups, self.max_array_size()) if self.shard_groups > 1 else 1
        base = {"backend": self.name, "job_dir": job_dir, "spec": spec_path,
                "log": os.path.join(job_dir, "job.log"), "manifest_uri": spec.manifest_uri,
                "stage": spec.stage, "run_id": spec.run_id, "lake": spec.lake, "groups": groups}
        if self.env:
            base["env_file"] = os.path.join(job_dir, ENV_FILE)
            self._write_env(base["env_file"])
        result = (os.path.join(job_dir, "result-"), ATTEMPT, ".json")
        if groups == 1:
            self._write_script(job_dir, "job.sh", ["run", spec_path, "--result", result],
                               dask_cluster=self.engine == "dask")
        else:
            self._write_script(job_dir, "group.sh", [
                "run", spec_path, "--result", (os.path.join(job_dir, "result-"), ATTEMPT, "-group-", TASK, ".json"),
                "--shard-group", (TASK, f"/{groups}")], last_consumer=False)
            self._write_script(job_dir, "collect.sh", ["run", spec_path, "--result", result, "--collect"])
        handle = self._submit_attempt(base, attempt=1, indices=list(range(groups)) if groups > 1 else None)
        self._write_current(handle)
        return handle

    def _submit_attempt(self, base: JobHandle, attempt: int, indices: list[int] | None) -> JobHandle:
        """Submit one attempt: the whole job, or the array tasks ``indices`` plus the collect job."""
        job_dir, groups = base["job_dir"], base["groups"]
        name = f"curation-{base['stage']}"
        result = os.path.join(job_dir, f"result-{attempt}.json")
        handle = {**base, "attempt": attempt, "result": result, "array_job_id": None, "array": None,
                  "submitted": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 3600))}
        attempt_arg = [str(int(attempt))]
        if groups == 1:
            handle["job_id"] = self._sbatch(self.sbatch_argv(
                os.path.join(job_dir, "job.sh"), name, base["log"], job_dir, script_args=attempt_arg))
            return handle
        dependency = None
        if indices:
            spans = _compress(indices)
            k = f"%{self.array_parallelism}" if self.array_parallelism else ""
            handle["array"] = f"{spans}{k}"
            handle["array_job_id"] = self._sbatch(self.sbatch_argv(
                os.path.join(job_dir, "group.sh"), name, base["log"], job_dir, array=handle["array"],
                script_args=attempt_arg))
            dependency = f"afterany:{handle['array_job_id']}"
        try:
            handle["job_id"] = self._sbatch(self.sbatch_argv(
                os.path.join(job_dir, "collect.sh"), f"{name}-collect", base["log"], job_dir,
                dependency=dependency, time_limit=self.collect_time_limit, collect=True,
                script_args=attempt_arg))
        except SlurmError:
            if handle["array_job_id"]:
                self._run(["scancel", handle["array_job_id"]], check=False)
            raise
        return handle

    def _write_script(self, job_dir: str, name: str, args: list[str | tuple], dask_cluster: bool = False,
                      last_consumer: bool = True) -> str:
        path = check_job_dir(os.path.join(job_dir, name))
        self.files.write(path, self.render_script(job_dir, args, dask_cluster, last_consumer).encode(),
                         mode=0o750)
        return path

    def _write_env(self, path: str) -> None:
        """Write the job's environment file, readable by its owner only (over SSH: through stdin)."""
        self.files.write(path, self.render_env(), mode=0o600)

    def _drop_env(self, handle: JobHandle) -> None:
        """Delete the job's environment file (idempotent): nothing of this run will read it again."""
        if handle.get("env_file"):
            self.files.remove(handle["env_file"])

    def _env_for_resubmit(self, handle: JobHandle) -> None:
        """Before another attempt: this backend's environment (fresh credentials, say) replaces the
        file; without one, the file the run kept must still be there."""
        if not handle.get("env_file"):
            return
        if self.env:
            self._write_env(handle["env_file"])
        elif not self.files.exists(handle["env_file"]):
            raise SlurmError(f"the job's environment file {handle['env_file']} was deleted when the run "
                             "finished; resubmit with a backend that has the job's env (its storage options)")

    def _write_current(self, handle: JobHandle) -> None:
        self.files.write(os.path.join(handle["job_dir"], "current.json"),
                         json.dumps(handle, indent=1, sort_keys=True).encode())

    def current(self, handle: JobHandle) -> JobHandle:
        """The latest attempt of the job ``handle`` names (resubmissions keep the first handle valid)."""
        latest = self.files.read_json(os.path.join(handle["job_dir"], "current.json"))
        if latest is None:
            return handle
        return latest if latest.get("attempt", 1) >= handle.get("attempt", 1) else handle

    def job_records(self, handle: JobHandle) -> tuple[list[SlurmJobRecord], str]:
        """What Slurm says about the attempt's jobs, and where it came from (scontrol, sacct, none)."""
        ids = [j for j in (handle.get("array_job_id"), handle["job_id"]) if j]
        records: list[SlurmJobRecord] = []
        missing = []
        for job_id in ids:
            proc = self._run(["scontrol", "show", "job", "-o", job_id], check=False)
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
        proc = self._run(["sacct", "-n", "-P", "-X", "-o", "JobID,State,ExitCode,Reason", "-S", since,
                          "-j", ",".join(missing)], check=False)
        text = proc.stderr + proc.stdout
        if proc.returncode != 0 or "accounting storage is disabled" in text:
            return records, "none"  # no accounting: the files in the job folder decide
        return records + parse_sacct(proc.stdout), "sacct"

    def status(self, handle: JobHandle) -> JobStatus:
        try:
            handle = self.current(handle)
            status, retry_reason = self._status(handle)
        except SlurmError as e:  # SSH or the controller is down: not a verdict on the job
            return JobStatus(JobState.UNKNOWN, f"cannot reach Slurm: {e}")
        if (status.state == JobState.FAILED and retry_reason in self.resubmit_on
                and handle["attempt"] <= self.max_resubmits):
            try:
                new = self.resubmit(handle)
            except SlurmError as e:  # reported as the run's end, like any other failure
                status = JobStatus(JobState.FAILED, f"{status.message}; resubmission failed: {e}", status.result)
            else:
                if new is None:  # another poller resubmitted first: report its attempt
                    return JobStatus(JobState.PENDING, f"{status.message}; resubmitted by another poller")
                return JobStatus(JobState.PENDING, f"{status.message}; resubmitted as attempt "
                                                   f"{new['attempt']} (job {new['job_id']})")
        if status.state.finished:
            self._drop_env_quietly(handle)
        return status

    def _drop_env_quietly(self, handle: JobHandle) -> None:
        # The run is over (a resubmission by hand writes the file again): the secrets go now, also
        # when the job could not delete them itself (killed at its time limit, a failed attempt that
        # might have been resubmitted).
        try:
            self._drop_env(handle)
        except SlurmError as e:
            log.warning("cannot delete %s: %s", handle["env_file"], e)

    def _status(self, handle: JobHandle) -> tuple[JobStatus, str | None]:
        """The attempt's status and, for a failure, the Slurm state that explains it (or ``GONE``)."""
        result = self.files.read_json(handle["result"])
        try:
            records, source = self.job_records(handle)
        except SlurmError as e:
            if result is None:
                return JobStatus(JobState.UNKNOWN, f"cannot reach Slurm: {e}"), None
            records, source = [], "unreachable"  # the result file alone decides
        if result is None:
            result = self.files.read_json(handle["result"])  # it may have landed while we asked
        cancelled = self.files.exists(os.path.join(handle["job_dir"], "cancelled"))
        main = [r for r in records if r.job_id == handle["job_id"] and r.array_task_id is None]
        if result is not None:
            if main and main[0].mapped in (JobState.RUNNING, JobState.PENDING):
                return JobStatus(JobState.RUNNING, f"job {handle['job_id']} is finishing (result written)"), None
            ok = result.get("status") == "succeeded"
            if ok:
                return JobStatus(JobState.SUCCEEDED, "completed", result), None
            if cancelled:
                return JobStatus(JobState.CANCELLED, "cancelled", result), None
            return JobStatus(JobState.FAILED, result.get("error", "failed"), result), self._retry_reason(handle)
        state, message = summarize(records)
        if records and not state.finished:
            # The collect job may be dead already (e.g. cancelled) while array tasks are still listed.
            if main and main[0].mapped.finished and main[0].mapped != JobState.SUCCEEDED:
                state, message = summarize(main)
            else:
                return JobStatus(state, f"job {handle['job_id']}: {message}"), None
        if cancelled or state == JobState.CANCELLED:
            return JobStatus(JobState.CANCELLED, f"job {handle['job_id']} cancelled"), None
        if records and state == JobState.FAILED:
            return JobStatus(JobState.FAILED, f"job {handle['job_id']}: {message}; log: {handle['log']}"), \
                self._failure_word(records)
        # Finished (or forgotten by Slurm) without a result: the checkpoints say how far it got.
        done, total = self.progress(handle)
        where = f"{source} has no record" if not records else f"Slurm says {message}"
        return JobStatus(JobState.FAILED, f"job {handle['job_id']} ended without a result ({where}); "
                                          f"{done}/{total} units checkpointed; log: {handle['log']}"), "GONE"

    @staticmethod
    def _failure_word(records: Sequence[SlurmJobRecord]) -> str | None:
        words = [r.state.split()[0].upper() for r in records if r.mapped == JobState.FAILED]
        # The most specific cause wins: an infrastructure failure explains a collect job's FAILED.
        for word in ("NODE_FAIL", "BOOT_FAIL", "PREEMPTED", "TIMEOUT", "OUT_OF_MEMORY", "DEADLINE"):
            if word in words:
                return word
        return words[0] if words else None

    def _retry_reason(self, handle: JobHandle) -> str | None:
        """Why an attempt whose collect step wrote a failed result failed, from its array tasks."""
        try:
            records, _ = self.job_records({**handle, "job_id": handle.get("array_job_id") or handle["job_id"],
                                           "array_job_id": None})
        except SlurmError:
            return None
        return self._failure_word(records)

    def progress(self, handle: JobHandle) -> tuple[int, int]:
        """(units with a checkpoint, units planned), from the planned manifest and the checkpoint store."""
        units, done = self._units_and_done(handle)
        return len(done & set(units)), len(units)

    def _units_and_done(self, handle: JobHandle) -> tuple[list[str], set[str]]:
        try:
            manifest = Manifest.read(handle["manifest_uri"])
        except ManifestError:
            return [], set()
        lake = Lake.from_dict(handle["lake"])
        done, _failed = CheckpointStore(lake.checkpoint_dir(manifest.stage, manifest.fingerprint)).scan()
        return [u.unit_id for u in manifest.units], done

    def unfinished_groups(self, handle: JobHandle) -> list[int]:
        """Array task indices with at least one unit lacking a checkpoint (all of them if no plan yet)."""
        groups = handle["groups"]
        units, done = self._units_and_done(handle)
        if not units:
            return list(range(groups))
        return sorted({i % groups for i, unit_id in enumerate(units) if unit_id not in done})

    def reopen_manifest(self, handle: JobHandle) -> dict[str, str]:
        """Before a resubmission: mark the run's manifest planned again and clear the failure markers
        of its unfinished units, so that checkpoint gates wait for the new attempt instead of failing
        on the old one. Returns {unit id: previous error} for the units that will run again."""
        try:
            manifest = Manifest.read(handle["manifest_uri"])
        except ManifestError:
            return {}
        lake = Lake.from_dict(handle["lake"])
        store = CheckpointStore(lake.checkpoint_dir(manifest.stage, manifest.fingerprint))
        done, failed = store.scan()
        reopened = {}
        for unit in manifest.units:
            if unit.unit_id in done:
                continue
            reopened[unit.unit_id] = unit.error or "not finished"
            unit.status, unit.error = "pending", None
            if unit.unit_id in failed:
                storage.remove(storage.join(store.directory, f"{unit.unit_id}.failed.json"))
        manifest.status, manifest.shards, manifest.accounting = "planned", [], {}
        manifest.write(handle["manifest_uri"])
        return reopened

    def resubmit(self, handle: JobHandle) -> JobHandle | None:
        """Submit the next attempt with only the shard groups whose units are not all checkpointed
        (for a one-allocation job: the whole job, which skips checkpointed units). Returns the new
        handle, or None when another poller resubmitted first."""
        handle = self.current(handle)
        state = self._status(handle)[0].state
        if not state.finished:  # two attempts on the same units would only race each other
            raise SlurmError(f"attempt {handle['attempt']} (job {handle['job_id']}) is still {state.value}; "
                             "cancel it before resubmitting")
        self._env_for_resubmit(handle)  # before the lock: a refusal must not block a later resubmission
        attempt = handle["attempt"] + 1
        lock = os.path.join(handle["job_dir"], f"attempt-{attempt}.lock")
        if not self.files.create_exclusive(lock):
            return None
        indices = self.unfinished_groups(handle) if handle["groups"] > 1 else None
        base = {k: handle[k] for k in ("backend", "job_dir", "spec", "log", "manifest_uri", "stage",
                                       "run_id", "lake", "groups", "env_file") if k in handle}
        reopened = self.reopen_manifest(handle)
        if reopened:
            self.files.append(handle["log"], f"airflow-curation: attempt {attempt} runs again: " + "; ".join(
                f"{u}: {e}" for u, e in sorted(reopened.items())[:20]) + "\n")
        new = self._submit_attempt(base, attempt, indices)
        self._write_current(new)
        self.files.append(handle["log"], f"airflow-curation: attempt {attempt} resubmitted "
                                   f"{'groups ' + _compress(indices) if indices else 'the job'} "
                                   f"as job {new['job_id']}\n")
        return new

    def cancel(self, handle: JobHandle) -> None:
        handle = self.current(handle)
        self.files.write(os.path.join(handle["job_dir"], "cancelled"), b"")
        ids = [j for j in (handle["job_id"], handle.get("array_job_id")) if j]
        self._run(["scancel", *ids], check=False)  # idempotent: finished ids are not an error worth raising
        self._drop_env_quietly(handle)  # running tasks have read it; tasks not started yet must not start

    def logs(self, handle: JobHandle, offset: int = 0) -> tuple[str, int]:
        path = handle["log"]
        if self.remote_work_dir or (self.remote and not os.path.exists(path)):
            data = self.read_remote(path, offset)  # the work folder is not mounted here
        else:
            try:
                with open(path, "rb") as f:
                    f.seek(offset)
                    data = f.read()
            except FileNotFoundError:
                return "", offset
        return data.decode("utf-8", "replace"), offset + len(data)


def _compress(indices: Sequence[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` -> ``"0-2,5,7-8"`` (Slurm's --array syntax)."""
    spans, start, prev = [], None, None
    for i in sorted(set(indices)):
        if start is None:
            start = prev = i
        elif i == prev + 1:
            prev = i
        else:
            spans.append((start, prev))
            start = prev = i
    if start is not None:
        spans.append((start, prev))
    return ",".join(f"{a}-{b}" if a != b else f"{a}" for a, b in spans)


def _read_json(path: str) -> dict | None:
    """A local JSON file, or None while it does not exist (or is not whole yet)."""
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except (FileNotFoundError, ValueError):
        return None


def _write_local(path: str, data: bytes, mode: int = 0o640) -> None:
    """Write a job file atomically with plain file IO (job folders are local or shared POSIX paths)."""
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp-{uuid.uuid4().hex[:8]}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class _LocalFiles:
    """Job files on a filesystem mounted here (local, or shared with the cluster)."""

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def write(self, path: str, data: bytes, mode: int = 0o640) -> None:
        _write_local(path, data, mode)

    def read_json(self, path: str) -> dict | None:
        return _read_json(path)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def create_exclusive(self, path: str) -> bool:
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True

    def append(self, path: str, text: str) -> None:
        try:
            with open(path, "a") as f:
                f.write(text)
        except OSError:
            log.info("%s", text.strip())

    def remove(self, path: str) -> None:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass


class _RemoteFiles:
    """Job files where the Slurm commands run, reached through the backend's command prefix (SSH).
    Paths are positional parameters of fixed ``sh -c`` scripts: never part of the script text."""

    def __init__(self, backend: SlurmBackend) -> None:
        self.backend = backend

    def _sh(self, script: str, *args: str, data: bytes | None = None) -> subprocess.CompletedProcess:
        return self.backend.run_raw(["sh", "-c", script, "sh", *args], data)

    def makedirs(self, path: str) -> None:
        proc = self._sh('mkdir -p -- "$1"', path)
        if proc.returncode != 0:
            raise SlurmError(f"cannot create {path}: {proc.stderr.decode(errors='replace').strip()}")

    def write(self, path: str, data: bytes, mode: int = 0o640) -> None:
        # umask 077: the file is never readable by others, not even before its chmod (secrets.env).
        proc = self._sh('umask 077 && tmp="$1.tmp.$$" && cat > "$tmp" && chmod "$2" "$tmp" && mv -f -- "$tmp" "$1"',
                        path, format(mode, "o"), data=data)
        if proc.returncode != 0:
            raise SlurmError(f"cannot write {path}: {proc.stderr.decode(errors='replace').strip()}")

    def read_json(self, path: str) -> dict | None:
        proc = self._sh('cat -- "$1"', path)
        if proc.returncode != 0:
            return None
        try:
            return json.loads(proc.stdout)
        except ValueError:
            return None

    def exists(self, path: str) -> bool:
        return self._sh('test -e "$1"', path).returncode == 0

    def create_exclusive(self, path: str) -> bool:
        return self._sh('set -C; : > "$1"', path).returncode == 0  # noclobber: O_EXCL

    def append(self, path: str, text: str) -> None:
        self._sh('cat >> "$1"', path, data=text.encode())

    def remove(self, path: str) -> None:
        proc = self._sh('rm -f -- "$1"', path)
        if proc.returncode != 0:
            raise SlurmError(f"cannot remove {path}: {proc.stderr.decode(errors='replace').strip()}")


__all__ = ["SlurmBackend", "SlurmError", "SlurmJobRecord", "map_state", "parse_sacct", "parse_scontrol_jobs",
           "summarize", "FAILURE_NOTES", "DEFAULT_RESUBMIT_ON", "TASK", "ATTEMPT", "ENV_FILE"]
