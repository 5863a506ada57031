"""Connection ``curation``: where the lake is, which backend runs jobs, and storage credentials.

One connection lets a DAG say ``curation_conn_id="curation_prod"`` instead of repeating a lake URL,
backend options and S3 credentials on every task. Every field is optional; operator arguments win.

Extra (JSON)::

    {"lake": "s3://bucket/lake", "backend": "slurm", "backend_options": {...},
     "storage_options": {"s3": {"endpoint_url": "http://127.0.0.1:9000"}}}

``login``/``password`` become the ``key``/``secret`` of the lake's storage protocol, so secrets stay in
the connection's encrypted fields.
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
            k: dict(v) for k, v in (extra.get("storage_options") or {}).items()}
        if lake and not storage.is_local(lake) and (conn.login or conn.password):
            opts = storage_options.setdefault(storage.protocol_of(lake), {})
            if conn.login:
                opts.setdefault("key", conn.login)
            if conn.password:
                opts.setdefault("secret", conn.password)
        backend = extra.get("backend") or extra.get("extra__curation__backend") or None
        return {"lake": lake, "backend": backend,
                "backend_options": dict(extra.get("backend_options") or {}),
                "storage_options": storage_options}

    def apply_storage_options(self) -> dict[str, dict[str, Any]]:
        """Register the connection's storage options in this process; return them."""
        options = self.get_conn()["storage_options"]
        for protocol, opts in options.items():
            storage.set_storage_options(protocol, **opts)
        return options

    @staticmethod
    def job_env(storage_options: dict[str, dict[str, Any]]) -> dict[str, str]:
        """Environment that gives a job process the same storage options (never put in a job spec)."""
        return {f"CURATION_STORAGE_OPTIONS_{p.upper()}": json.dumps(o) for p, o in storage_options.items()}

    def test_connection(self) -> tuple[bool, str]:
        settings = self.get_conn()
        if not settings["lake"]:
            return True, "connection read; no lake set (operators must pass one)"
        self.apply_storage_options()
        try:
            storage.listdir(settings["lake"])
        except Exception as e:  # noqa: BLE001 - reported to the UI, not raised
            return False, f"cannot list {settings['lake']}: {e}"
        return True, f"lake {settings['lake']} is reachable"
