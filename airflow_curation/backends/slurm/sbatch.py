"""The ``sbatch`` command lines of a run: the site's and the run's options, checked once, as argv elements
(never ``#SBATCH`` lines, never through a shell)."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from airflow_curation.backends.slurm.script import EXPORTED, _check_arg, export_names

# Options the backend sets itself: a user's copy would change what the run is (or how sbatch answers).
_RESERVED = ("--wrap", "--array", "-a", "--dependency", "-d", "--parsable")


class SbatchOptions:
    """What every ``sbatch`` of a run asks Slurm for.

    :param partition: ``--partition``.
    :param account: ``--account``.
    :param qos: ``--qos``.
    :param time_limit: ``--time`` (e.g. ``"04:00:00"``).
    :param cpus_per_task: ``--cpus-per-task``.
    :param mem: ``--mem`` (e.g. ``"16G"``).
    :param extra: more options, argv elements or one string split like a shell would; each must start
        with ``-`` and none may be one the backend sets (``--array``, ``--dependency``...).
    :param nodes: ``--nodes`` of a one-allocation job.
    :param ntasks: ``--ntasks`` of a one-allocation job.
    :param collect_time_limit: ``--time`` of an array run's collect job (default ``time_limit``).
    :param export_env: names sbatch hands Slurm (``--export``) beside :data:`~.script.EXPORTED`; no
        credential's name.
    """

    def __init__(
        self,
        partition: str | None = None,
        account: str | None = None,
        qos: str | None = None,
        time_limit: str | None = None,
        cpus_per_task: int | None = None,
        mem: str | None = None,
        extra: Sequence[str] | str | None = None,
        nodes: int | None = None,
        ntasks: int | None = None,
        collect_time_limit: str | None = None,
        export_env: Sequence[str] | str = (),
    ) -> None:
        self.partition, self.account, self.qos = partition, account, qos
        self.time_limit, self.mem, self.collect_time_limit = time_limit, mem, collect_time_limit
        for what in ("partition", "account", "qos", "time_limit", "mem", "collect_time_limit"):
            if getattr(self, what) is not None:
                _check_arg(getattr(self, what), what)
        self.cpus_per_task = int(cpus_per_task) if cpus_per_task else None
        self.nodes = int(nodes) if nodes else None
        self.ntasks = int(ntasks) if ntasks else None
        if isinstance(extra, str):
            extra = shlex.split(extra)
        self.extra = [_check_arg(o, "sbatch option") for o in (extra or [])]
        for opt in self.extra:
            if not opt.startswith("-"):
                raise ValueError(f"sbatch option {opt!r} does not start with '-' (sbatch would take it for the script)")
            if opt.split("=", 1)[0] in _RESERVED:
                raise ValueError(f"sbatch option {opt!r} is set by the backend itself")
        self.export_env = export_names(export_env)

    def options(self) -> dict[str, Any]:
        """The backend options these came from (JSON-able), under the backend's argument names."""
        return {
            "partition": self.partition,
            "account": self.account,
            "qos": self.qos,
            "time_limit": self.time_limit,
            "cpus_per_task": self.cpus_per_task,
            "mem": self.mem,
            "sbatch_options": list(self.extra),
            "nodes": self.nodes,
            "ntasks": self.ntasks,
            "collect_time_limit": self.collect_time_limit,
            "export_env": list(self.export_env),
        }

    def argv(
        self,
        script: str,
        job_name: str,
        log_path: str,
        job_dir: str,
        array: str | None = None,
        dependency: str | None = None,
        collect: bool = False,
        script_args: Sequence[str] = (),
    ) -> list[str]:
        """The ``sbatch --parsable`` argv that submits ``script`` with ``script_args``.

        :param script: the batch script's path.
        :param job_name: ``--job-name``.
        :param log_path: ``--output`` (appended to: every attempt writes the same log).
        :param job_dir: ``--chdir``.
        :param array: ``--array`` (an array job over shard groups).
        :param dependency: ``--dependency`` (the collect job waits for the array).
        :param collect: the collect job: ``collect_time_limit``, and none of the shard work's requests.
        :param script_args: the script's arguments (the attempt).
        """
        # The collect job runs the stage's collect hook (e.g. dedup's global phase): it keeps the CPUs and
        # memory, but not what the shard work asked for (nodes, tasks, GPUs, constraints).
        whole = not collect and not array  # one allocation runs the whole stage
        options = {
            "--job-name": job_name,
            "--output": log_path,
            "--open-mode": "append",
            "--chdir": job_dir,
            "--partition": self.partition,
            "--account": self.account,
            "--qos": self.qos,
            "--time": (collect and self.collect_time_limit) or self.time_limit,
            "--cpus-per-task": self.cpus_per_task,
            "--mem": self.mem,
            "--nodes": whole and self.nodes,
            "--ntasks": whole and self.ntasks,
            "--array": array,
            "--dependency": dependency,
        }
        argv = ["sbatch", "--parsable", *(f"{flag}={value}" for flag, value in options.items() if value)]
        argv.append("--export=" + ",".join((*EXPORTED, *self.export_env)))
        argv += ([] if collect else self.extra) + (["--kill-on-invalid-dep=no"] if dependency else [])
        return [*argv, script, *(_check_arg(a, "script argument") for a in script_args)]
