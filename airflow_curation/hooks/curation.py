"""Connection ``curation``: where the lake is, which backend runs jobs, and storage credentials.

One connection lets a DAG say ``curation_conn_id="curation_prod"`` instead of repeating a lake URL,
backend options and S3 credentials on every task. Every field is optional; operator arguments win.

Extra (JSON)::

    {"lake": "s3://bucket/lake", "backend": "slurm", "backend_options": {...},
     "storage_options": {"s3": {"endpoint_url": "http://127.0.0.1:9000"}}}

``login``/``password`` become the ``key``/``secret`` of the lake's storage protocol, so secrets stay in
the connection's encrypted fields. The hook only reads the connection; :mod:`airflow_curation.hooks.factory`
scopes its storage options to the lake a task uses and hands them to jobs through their environment.
"""

from __future__ import annotations

import json
from typing import Any

from airflow.sdk import BaseHook

from airflow_curation.core import storage


class CurationHook(BaseHook):
    """:param curation_conn_id: the ``curation`` connection to read."""

    conn_name_attr = "curation_conn_id"
    default_conn_name = "curation_default"
    conn_type = "curation"
    hook_name = "Curation"

    def __init__(self, curation_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.curation_conn_id = curation_conn_id

    def get_conn(self) -> dict[str, Any]:
        """The connection's settings: ``lake``, ``backend``, ``backend_options``, ``storage_options``."""
        conn = self.get_connection(self.curation_conn_id)
        extra = conn.extra_dejson if conn.extra else {}
        if isinstance(extra, str):
            extra = json.loads(extra)
        lake = extra.get("lake") or conn.host or None
        storage_options: dict[str, dict[str, Any]] = {
            k: dict(v) for k, v in (extra.get("storage_options") or {}).items()
        }
        if lake and not storage.is_local(lake) and (conn.login or conn.password):
            opts = storage_options.setdefault(storage.protocol_of(lake), {})
            if conn.login:
                opts.setdefault("key", conn.login)
            if conn.password:
                opts.setdefault("secret", conn.password)
        backend = extra.get("backend") or extra.get("extra__curation__backend") or None
        return {
            "lake": lake,
            "backend": backend,
            "backend_options": dict(extra.get("backend_options") or {}),
            "storage_options": storage_options,
        }

    @staticmethod
    def job_env(storage_options: dict[str, dict[str, Any]]) -> dict[str, str]:
        """Environment that gives a job process the same storage options (never put in a job spec)."""
        return {f"{storage.ENV_PREFIX}{p.upper()}": json.dumps(o) for p, o in storage_options.items()}

    def test_connection(self) -> tuple[bool, str]:
        settings = self.get_conn()
        lake = settings["lake"]
        if not lake:
            return True, "connection read; no lake set (operators must pass one)"
        # Explicit options for this one call: testing a connection registers nothing in the process.
        protocol = storage.protocol_of(lake)
        options = {**storage.env_options(protocol), **settings["storage_options"].get(protocol, {})}
        try:
            fs, path = storage.filesystem(lake, options)
            fs.ls(path)
        except FileNotFoundError:
            pass  # an empty lake: reachable all the same
        except Exception as e:  # noqa: BLE001 - reported to the UI, not raised
            return False, f"cannot list {lake}: {e}"
        return True, f"lake {lake} is reachable"
