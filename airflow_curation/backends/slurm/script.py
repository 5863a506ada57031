"""The Slurm job scripts and the environment file they source. No parameter ever reaches a shell
unquoted: sbatch options are argv elements (:mod:`.sbatch`) and the script quotes every value with
:func:`shlex.quote`; the only expansions are the array task id and the attempt (the script's ``$1``)."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence

from airflow_curation.core import credentials


class _Placeholder(str):
    """A script argument part that the shell expands (never a literal to quote)."""


TASK = _Placeholder("TASK")  # $SLURM_ARRAY_TASK_ID
# The script's first argument, the attempt number: a relaunch reuses the scripts (and the environment
# file) of the first launch, so a follower that lacks the job's secrets can still relaunch it.
ATTEMPT = _Placeholder("ATTEMPT")
# The job's environment (secrets included), 0600, in the job folder, while the run may still use it.
ENV_FILE = "secrets.env"
_EXPANSIONS = {TASK: '"${SLURM_ARRAY_TASK_ID}"', ATTEMPT: '"$1"'}
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# What sbatch hands Slurm of the submitting environment (``--export``; Slurm adds its own ``SLURM_*``), and
# so all a job record holds of it: where programs and the home are, the locale, the temp folder, and the
# Python path of the code. Never ``ALL``: the controller saves a job's environment (StateSaveLocation,
# accounting with ``job_env``), and the submitter's may hold credentials. ``export_env`` adds names; the
# job's ``env`` and credentials reach it through :data:`ENV_FILE` instead.
EXPORTED = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "TMPDIR", "PYTHONPATH")


def export_names(names: Sequence[str] | str) -> tuple[str, ...]:
    """``export_env`` (a list, or one string of names split at commas and spaces) checked: identifiers,
    none of them a credential's name (those go in ``env``)."""
    if isinstance(names, str):
        names = [n for n in re.split(r"[,\s]+", names) if n]
    out: list[str] = []
    for name in names:
        if not isinstance(name, str) or not ENV_NAME.match(name):
            raise ValueError(f"export_env: {name!r} is not an environment variable name")
        if credentials.secret_name(name):
            raise ValueError(
                f"export_env: {name} names a credential, which Slurm would save in the job record; "
                "give it in env (the job's 0600 secrets.env) instead"
            )
        if name not in EXPORTED and name not in out:
            out.append(name)
    return tuple(out)


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
        raise ValueError(
            f"job folder {path!r} contains {bad}, which Slurm would interpret in --output; "
            "choose a work_dir (or lake root) without them"
        )
    return path


class ScriptRenderer:
    """The text of a run's batch scripts and of its environment file.

    :param python: interpreter on the compute nodes.
    :param env: the job's environment, secrets included (checked: names are identifiers, no NUL).
    :param max_resubmits: the follower's relaunch budget: a failed attempt up to it keeps the environment
        file for the next one.
    :param inherit_credentials: sbatch runs here, as this process's child: the credentials of this
        process's environment go into the environment file too (over SSH they are not the job's).
    """

    def __init__(
        self, python: str, env: dict[str, str] | None = None, max_resubmits: int = 0, inherit_credentials: bool = False
    ) -> None:
        self.python = _check_arg(python, "python")
        self.env = dict(env or {})
        for key, value in self.env.items():
            if not ENV_NAME.match(str(key)):
                raise ValueError(f"environment variable name {key!r} is not a valid identifier")
            _check_arg(value, f"env {key}")
        self.max_resubmits = int(max_resubmits)
        self.inherit_credentials = bool(inherit_credentials)

    def render(
        self, job_dir: str, args: Sequence[str | tuple], dask_cluster: bool = False, last_consumer: bool = True
    ) -> str:
        """The batch script: sources the job's environment file and runs the jobs entrypoint with ``args``.

        Each arg is a literal string, or a tuple of literal strings, :data:`TASK` (the array task
        index) and :data:`ATTEMPT` (the script's first argument): those two are all the shell expands.

        :param job_dir: the job folder (the script's working directory, where :data:`ENV_FILE` is).
        :param args: the entrypoint's arguments.
        :param dask_cluster: start a Dask cluster across the allocation first.
        :param last_consumer: this script is the last one of an attempt to need the environment file
            (a single job, or the collect job of an array): it deletes the file when it is done.
        """
        lines = ["#!/bin/bash", "# airflow-curation job (generated; every value is shell-quoted)", "set -eu"]
        has_env = bool(self.job_env())
        if has_env:
            lines += [
                f"env_file={shlex.quote(os.path.join(job_dir, ENV_FILE))}",
                # Gone means the run was cancelled or finished: running without it would only
                # fail later, on a missing credential.
                '[ -r "$env_file" ] || { echo "airflow-curation: $env_file is gone (run cancelled or '
                'finished)" >&2; exit 1; }',
                '. "$env_file"',
            ]
        # Job steps (srun) take the script's environment, secrets.env included, not sbatch's --export list.
        lines.append("export SLURM_EXPORT_ENV=ALL")
        lines.append(f"export CURATION_JOB_DIR={shlex.quote(job_dir)}")
        lines.append(f"cd {shlex.quote(job_dir)}")
        py = shlex.quote(_check_arg(self.python, "python"))
        words = [py, "-m", "airflow_curation.jobs"]
        for arg in args:
            parts = arg if isinstance(arg, tuple) else (arg,)
            words.append(
                "".join(
                    _EXPANSIONS[p] if isinstance(p, _Placeholder) else shlex.quote(_check_arg(p, "argument"))
                    for p in parts
                )
            )
        drop_env = has_env and last_consumer
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
            f"srun --overlap --kill-on-bad-exit=0 {py} -m distributed.cli.dask_worker --scheduler-file "
            '"$sched_file" --nthreads 1 --nworkers "${SLURM_CPUS_PER_TASK:-1}" --no-dashboard &',
            "workers=$!",
            # Workers first (srun passes the TERM on to its tasks), then the scheduler they report to.
            'trap \'kill "$workers" 2>/dev/null || true; wait "$workers" 2>/dev/null || true; '
            'kill "$sched" 2>/dev/null || true; wait "$sched" 2>/dev/null || true\' EXIT',
            "tries=0",
            f'until address="$({py} -c \'import json, sys; print(json.load(open(sys.argv[1]))["address"])\' '
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
        failed and the follower may still relaunch it (the relaunch reuses the file)."""
        return [
            "rc=0",
            f"{command} || rc=$?",
            f'if [ "$rc" -eq 0 ] || [ "$1" -gt {int(self.max_resubmits)} ]; then rm -f -- "$env_file"; fi',
            'exit "$rc"',
        ]

    def job_env(self) -> dict[str, str]:
        """What the environment file holds: ``env`` and, when sbatch runs on this machine, the credentials
        of this process's environment (:mod:`airflow_curation.core.credentials`). Slurm keeps what sbatch
        exports in the job's record (``sacct --env-vars``, the controller's state): only the
        :data:`EXPORTED` and ``export_env`` names (``--export``), and the Slurm commands run without those
        credentials anyway (:meth:`~.transport.SlurmCommands.exec`), so the job gets them from the ``0600``
        file."""
        inherited = credentials.split(os.environ)[1] if self.inherit_credentials else {}
        return {**{k: v for k, v in inherited.items() if ENV_NAME.match(k) and "\x00" not in v}, **self.env}

    def render_env(self) -> bytes:
        """The environment file's text: one ``export NAME=value`` line per variable, values quoted."""
        env = self.job_env()
        return "".join(f"export {key}={shlex.quote(env[key])}\n" for key in sorted(env)).encode()
