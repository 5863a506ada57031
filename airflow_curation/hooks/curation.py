"""Connection ``curation``: where the lake is, which backend runs jobs, and storage credentials.

One connection lets a DAG say ``curation_conn_id="curation_prod"`` instead of repeating a lake URL,
backend options and S3 credentials on every task. Every field is optional; operator arguments win.

Extra (JSON)::

    {"lake": "s3://lake/curated", "backend": "slurm", "backend_options": {...},
     "storage_options": {"s3": {"endpoint_url": "http://127.0.0.1:9000"},
                         "s3://raw": {"conn_id": "raw_bucket"},
                         "s3://partner/drop": {"key": "...", "secret": "...", "endpoint_url": "..."}}}

``storage_options`` is keyed by protocol (``s3``: every bucket) or by URL prefix (a bucket, a folder); a URL
gets the options of every key that covers it, the longest winning (:class:`~airflow_curation.core.storage_map.
StorageMap`). ``login``/``password`` become the ``key``/``secret`` of the lake's protocol, so secrets stay in
the connection's encrypted fields. ``{"conn_id": X}`` takes a prefix's options from connection ``X`` (any
type: its login/password as key/secret, its extra as options: one connection per bucket). The hook only
reads connections; operators, sensors and triggers put the map in effect for their own work
(:func:`airflow_curation.core.storage_map.using`) and hand it to jobs through their environment.
"""

from __future__ import annotations

import json
from typing import Any

from airflow.sdk import BaseHook

from airflow_curation.core import storage
from airflow_curation.core.storage_map import StorageMap


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
        storage_options: dict[str, dict[str, Any]] = {}
        for key, value in (extra.get("storage_options") or {}).items():
            storage_options[key] = self._prefix_options(key, value)
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
            "storage": StorageMap(storage_options, source=self.storage_source(self.curation_conn_id)),
        }

    @staticmethod
    def storage_source(conn_id: str) -> str:
        """Where a connection's storage options are set, in the words an error names them."""
        return (
            f"the `storage_options` extra of connection {conn_id!r} (keys: a protocol or a URL prefix; "
            'or its login/password for the lake\'s protocol; or {"conn_id": ...} naming a connection per bucket)'
        )

    def _prefix_options(self, key: str, value: Any) -> dict[str, Any]:
        """One ``storage_options`` entry: options as given, or those of the connection it names."""
        if not isinstance(value, dict):
            raise ValueError(
                f"connection {self.curation_conn_id!r}: storage_options[{key!r}] must be an object of fsspec "
                f'options or {{"conn_id": ...}}, not {type(value).__name__}'
            )
        if "conn_id" not in value:
            return dict(value)
        other = self.get_connection(value["conn_id"])
        extra = other.extra_dejson if other.extra else {}
        opts = {k: v for k, v in extra.items() if k != "region_name"}
        if extra.get("region_name"):  # the amazon provider's spelling
            opts.setdefault("client_kwargs", {}).setdefault("region_name", extra["region_name"])
        if other.login:
            opts.setdefault("key", other.login)
        if other.password:
            opts.setdefault("secret", other.password)
        return {**opts, **{k: v for k, v in value.items() if k != "conn_id"}}

    def test_connection(self) -> tuple[bool, str]:
        settings = self.get_conn()
        lake = settings["lake"]
        if not lake:
            return True, "connection read; no lake set (operators must pass one)"
        # Explicit options for this one call: testing a connection puts nothing in effect.
        options = settings["storage"].over(storage.StorageMap.from_env()).resolve(lake)
        try:
            fs, path = storage.filesystem(lake, options)
            fs.ls(path)
        except FileNotFoundError:
            pass  # an empty lake: reachable all the same
        except Exception as e:  # noqa: BLE001 - reported to the UI, not raised
            return False, f"cannot list {lake}: {e}"
        return True, f"lake {lake} is reachable"
