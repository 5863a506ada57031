"""SlurmHook: an Airflow connection of type ``slurm`` that builds a :class:`SlurmBackend`.

Its extra fields, declared as form fields in the provider metadata, hold the site defaults: partition,
account, QOS, time limit, default sbatch options, shard groups, a shared work folder and the Python on
the compute nodes. Where the Slurm commands run is an ``ssh`` connection (Airflow's SSH provider: host,
user, key, host key, proxy, timeouts) named by the extra ``ssh_conn_id``; none: on the Airflow worker.
``slurm_conn_id`` may also name an ``ssh`` connection directly (a login node, no site defaults).
"""

from __future__ import annotations

import logging
from typing import Any

from airflow.sdk import BaseHook

from airflow_curation.backends.slurm import SlurmBackend
from airflow_curation.hooks.slurm_conn import CONNECTION_TYPE  # noqa: F401 - re-exported
from airflow_curation.hooks.ssh_transport import SSHTransport

log = logging.getLogger(__name__)


def _flag(value: Any) -> bool:
    return value if isinstance(value, bool) else str(value).strip().lower() in ("1", "true", "yes", "on")


# Connection extra fields -> SlurmBackend options (and how to coerce them from the form's strings).
EXTRA_FIELDS: dict[str, Any] = {
    "partition": str,
    "account": str,
    "qos": str,
    "time_limit": str,
    "mem": str,
    "sbatch_options": str,
    "work_dir": str,
    "python": str,
    "cpus_per_task": int,
    "shard_groups": int,
    "min_group_bytes": int,
    "array_parallelism": int,
    "max_resubmits": int,
    "nodes": int,
    "ntasks": int,
    "launch_kind": str,
    "engine": str,  # launch_kind's old name: the backend warns and takes it as launch_kind
    "collect_time_limit": str,
    "remote_work_dir": _flag,
}


def _extra(extra: dict[str, Any], key: str) -> Any:
    # Forms of older Airflow versions stored fields as extra__<type>__<name>.
    return extra.get(key, extra.get(f"extra__slurm__{key}"))


class SlurmHook(BaseHook):
    """Builds the Slurm backend from an Airflow connection.

    :param slurm_conn_id: a ``slurm`` connection (site defaults, optional ``ssh_conn_id``) or an ``ssh``
        connection (the login node); ``None`` for no connection (local Slurm CLI, ``overrides`` only).
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
        self._conn: Any = None

    def _connection(self) -> Any:
        if self._conn is None and self.slurm_conn_id:
            self._conn = self.get_connection(self.slurm_conn_id)
        return self._conn

    def backend_options(self) -> dict[str, Any]:
        """The connection's site defaults under ``overrides``: plain, JSON-able backend options."""
        options: dict[str, Any] = {}
        conn = self._connection()
        if conn is not None and conn.conn_type != "ssh":
            extra = conn.extra_dejson
            for key, kind in EXTRA_FIELDS.items():
                value = _extra(extra, key)
                if value not in (None, ""):
                    options[key] = kind(value)
            for key in ("env", "resubmit_on", "export_env"):
                if extra.get(key):
                    options[key] = extra[key]
        options.update({k: v for k, v in self.overrides.items() if v is not None})
        return options

    def ssh_hook(self) -> Any:
        """The SSHHook of the login node, or None when the Slurm commands run on this machine."""
        conn = self._connection()
        if conn is None:
            return None
        from airflow.providers.ssh.hooks.ssh import SSHHook

        if conn.conn_type == "ssh":
            return SSHHook(ssh_conn_id=self.slurm_conn_id)
        ssh_conn_id = _extra(conn.extra_dejson, "ssh_conn_id")
        if ssh_conn_id:
            return SSHHook(ssh_conn_id=ssh_conn_id)
        if conn.host:
            # Connections made before the login node became an ssh connection: same fields, same keys
            # (~/.ssh, the agent), host keys from known_hosts; through the SSH provider all the same.
            log.warning(
                "connection %s: SSH host/login/port on a slurm connection are deprecated; name an "
                "ssh connection in the extra field ssh_conn_id",
                self.slurm_conn_id,
            )
            return SSHHook(remote_host=conn.host, username=conn.login or None, port=conn.port or None)
        return None

    def transport(self) -> SSHTransport | None:
        """What runs the Slurm commands on the login node (None: here)."""
        hook = self.ssh_hook()
        return SSHTransport(hook) if hook is not None else None

    def get_backend(self) -> SlurmBackend:
        """The backend on this connection, built by the factory (the one place backends are built)."""
        from airflow_curation.hooks.factory import slurm_backend

        return slurm_backend(self, {})

    def get_conn(self) -> SlurmBackend:
        return self.get_backend()

    def test_connection(self) -> tuple[bool, str]:
        """Asks the controller for the partitions (``sinfo``) where the jobs would be submitted."""
        try:
            backend = self.get_backend()
            out = backend.commands.run(["sinfo", "-h", "-o", "%P %a %D"]).stdout.strip()
            size = backend.commands.max_array_size()
            return True, f"Slurm reachable; partitions: {out or '(none)'}; MaxArraySize {size}"
        except Exception as e:  # noqa: BLE001 - reported to the UI
            return False, str(e)
