"""SlurmHook: an Airflow connection of type ``slurm`` that builds a :class:`SlurmBackend`.

The connection's standard fields say where the Slurm commands run: empty host = on the Airflow worker
itself; a host (with login and port) = over SSH (``ssh -o BatchMode=yes [-p PORT] [LOGIN@]HOST``, key
based: no password is ever put on a command line). Its extra fields, declared as form fields in the
provider metadata, hold the site defaults: partition, account, QOS, time limit, default sbatch options,
shard groups, a shared work folder and the Python on the compute nodes.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from airflow_curation.backends.slurm import SlurmBackend
from airflow_curation.hooks.slurm_conn import CONNECTION_TYPE  # noqa: F401 - re-exported

def _flag(value: Any) -> bool:
    return value if isinstance(value, bool) else str(value).strip().lower() in ("1", "true", "yes", "on")


# Connection extra fields -> SlurmBackend options (and how to coerce them from the form's strings).
EXTRA_FIELDS: dict[str, Any] = {
    "partition": str, "account": str, "qos": str, "time_limit": str, "mem": str, "sbatch_options": str,
    "work_dir": str, "python": str, "cpus_per_task": int, "shard_groups": int, "array_parallelism": int,
    "max_resubmits": int, "nodes": int, "ntasks": int, "engine": str, "collect_time_limit": str,
    "remote_work_dir": _flag,
}

class SlurmHook(BaseHook):
    """Builds the Slurm backend from an Airflow connection.

    :param slurm_conn_id: the ``slurm`` connection; ``None`` for no connection (local Slurm CLI,
        settings from ``overrides`` only).
    :param overrides: backend options that win over the connection's (e.g. ``shard_groups`` per task).
    """

    conn_name_attr = "slurm_conn_id"
    default_conn_name = "slurm_default"
    conn_type = "slurm"
    hook_name = "Slurm"

    def __init__(self, slurm_conn_id: str | None = default_conn_name, **overrides: Any) -> None:
        super().__init__()
        self.slurm_conn_id = slurm_conn_id
        self.overrides = overrides

    def backend_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {}
        if self.slurm_conn_id:
            conn = self.get_connection(self.slurm_conn_id)
            extra = conn.extra_dejson
            for key, kind in EXTRA_FIELDS.items():
                # Forms of older Airflow versions stored fields as extra__<type>__<name>.
                value = extra.get(key, extra.get(f"extra__slurm__{key}"))
                if value not in (None, ""):
                    options[key] = kind(value)
            for key in ("env", "resubmit_on"):
                if extra.get(key):
                    options[key] = extra[key]
            if conn.host:
                for what, value in (("host", conn.host), ("login", conn.login or "x")):
                    if value.startswith("-") or any(c.isspace() or c == "@" for c in value):
                        raise ValueError(f"connection {self.slurm_conn_id}: SSH {what} {value!r} is not valid")
                prefix = ["ssh", "-o", "BatchMode=yes"]
                if conn.port:
                    prefix += ["-p", str(int(conn.port))]
                prefix.append(f"{conn.login}@{conn.host}" if conn.login else conn.host)
                options["ssh_host"] = conn.host
                options["command_prefix"] = prefix
        options.update({k: v for k, v in self.overrides.items() if v is not None})
        return options

    def get_backend(self) -> SlurmBackend:
        return SlurmBackend(**self.backend_options())

    def get_conn(self) -> SlurmBackend:
        return self.get_backend()

    def test_connection(self) -> tuple[bool, str]:
        """Asks the controller for the partitions (``sinfo``) where the jobs would be submitted."""
        try:
            backend = self.get_backend()
            out = backend._run(["sinfo", "-h", "-o", "%P %a %D"]).stdout.strip()
            return True, f"Slurm reachable; partitions: {out or '(none)'}; MaxArraySize {backend.max_array_size()}"
        except Exception as e:  # noqa: BLE001 - reported to the UI
            return False, str(e)
