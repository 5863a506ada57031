"""Where Airflow connections become what the layers below take: one place for every ``*_conn_id``.

The operator, the sensor and both triggers resolve connections here, in the process that uses them
(worker or triggerer), so a connection's secrets never travel in trigger kwargs, XCom or job handles:

* ``curation_conn_id`` -> :class:`CurationSettings` (lake, backend, backend options, and the storage map:
  fsspec options by protocol or URL prefix). The caller puts the map in effect for its own work only
  (``with storage.using(settings.storage)``: one task, poke or trigger; nothing process-wide), and
  :func:`backend_for` hands it to jobs through their environment (:meth:`StorageMap.to_env`).
* ``kubernetes_conn_id`` (in backend options) -> the cncf-kubernetes ``KubernetesHook``'s API client,
  given to the Kubernetes backend.
* ``slurm_conn_id`` (in backend options) -> site defaults and, for a login node, an SSH transport over
  Airflow's ``SSHHook``, given to the Slurm backend.

Backends get clients and plain options only; they import nothing from here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_curation.backends import Backend, get_backend
from airflow_curation.core.storage_map import StorageMap

# Backend options that name an Airflow connection: resolved here, kept (as ids) in job handles.
CONN_ID_OPTIONS = ("slurm_conn_id", "kubernetes_conn_id")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CurationSettings:
    """What a ``curation`` connection says (all empty without one).

    :param lake: the lake's root URL.
    :param backend: the backend's name.
    :param backend_options: the backend's options (may name connections: ``slurm_conn_id``...).
    :param storage: fsspec options by protocol or URL prefix, credentials included: never serialized.
    """

    lake: str | None = None
    backend: str | None = None
    backend_options: dict[str, Any] = field(default_factory=dict)
    storage: StorageMap = field(default_factory=StorageMap, repr=False)


def curation_settings(curation_conn_id: str | None) -> CurationSettings:
    """Read a ``curation`` connection (``None``: no connection, empty settings)."""
    if not curation_conn_id:
        return CurationSettings()
    from airflow.sdk.exceptions import AirflowNotFoundException

    from airflow_curation.hooks.curation import CurationHook

    try:
        conf = CurationHook(curation_conn_id).get_conn()
    except AirflowNotFoundException:
        # A connection named by a copied DAG may not exist in this deployment: the task's own arguments
        # must then say everything (the operator says what is missing).
        log.info("No connection %r: lake, backend and storage come from the task's arguments", curation_conn_id)
        return CurationSettings()
    return CurationSettings(
        lake=conf["lake"], backend=conf["backend"], backend_options=conf["backend_options"], storage=conf["storage"]
    )


def connection_ids(options: Mapping[str, Any]) -> dict[str, str]:
    """The connection ids among backend options (what a handle keeps to resolve them again)."""
    return {k: options[k] for k in CONN_ID_OPTIONS if options.get(k)}


def backend_for(name: str, options: Mapping[str, Any] | None = None, *, storage: StorageMap | None = None) -> Backend:
    """Build backend ``name`` from plain options, resolving the connections they name.

    :param name: ``local``, ``slurm``, ``kubernetes``, ``ray``.
    :param options: the backend's options, plus optionally ``slurm_conn_id`` / ``kubernetes_conn_id``
        (their connection's settings lie under the options given).
    :param storage: the storage map for the job's environment; only where jobs are submitted, never
        where they are only followed.
    """
    opts = dict(options or {})
    ids = {k: opts.pop(k) for k in CONN_ID_OPTIONS if k in opts}
    if storage:
        opts["env"] = {**storage.to_env(), **(opts.get("env") or {})}
    if name == "slurm" and ids.get("slurm_conn_id"):
        from airflow_curation.hooks.slurm import SlurmHook

        hook = SlurmHook(ids["slurm_conn_id"])
        return get_backend(name, **{**hook.backend_options(), **opts}, transport=hook.transport())
    if name == "kubernetes" and ids.get("kubernetes_conn_id"):
        from airflow_curation.hooks.kubernetes import CurationKubernetesHook

        return CurationKubernetesHook(conn_id=ids["kubernetes_conn_id"]).get_backend(**opts)
    return get_backend(name, **opts)


def handle_options(backend: Backend, options: Mapping[str, Any]) -> dict[str, Any]:
    """What a job handle keeps to rebuild ``backend`` in a trigger or a retry: its plain options without
    the job's environment (storage secrets), plus the connection ids of ``options`` to resolve again."""
    kept = {k: v for k, v in backend.options().items() if k != "env"}
    return {**kept, **connection_ids(options)}
