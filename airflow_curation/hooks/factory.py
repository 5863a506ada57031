"""Where Airflow connections become what the layers below take: one place for every ``*_conn_id``.

The operator, the sensor and both triggers resolve connections here, in the process that uses them
(worker or triggerer), so a connection's secrets never travel in trigger kwargs, XCom or job handles:

* ``curation_conn_id`` -> :class:`CurationSettings` (lake, backend, backend options, and the storage map:
  fsspec options by protocol or URL prefix). The caller puts the map in effect for its own work only
  (``with storage.using(settings.storage)``: one task, poke or trigger; nothing process-wide), and
  :func:`backend_for` hands it to jobs through their environment (:meth:`StorageMap.to_env`).
* ``kubernetes_conn_id`` (or, without a connection, the client options ``in_cluster``, ``config_file``/
  ``context``, ``host``/``token``/``verify_ssl``) -> an API client from the cncf-kubernetes provider's
  ``KubernetesHook``, every call retried by the provider's ``generic_api_retry``, given to the
  Kubernetes backend.
* ``slurm_conn_id`` (in backend options) -> site defaults and, for a login node, an SSH transport over
  Airflow's SSH provider (``SSHHook``), given to the Slurm backend.
* ``ray_conn_id`` (or, without a connection, the ``address`` option, then ``$RAY_API_SERVER_ADDRESS`` /
  ``$RAY_ADDRESS``) -> a Ray Job Submission client (address, and the connection's token and headers),
  given to the Ray backend.

This is the one place that builds backends and their clients: the operator, the sensor, both triggers,
:class:`~airflow_curation.hooks.slurm.SlurmHook` and the CLI (``curation <stage> --backend``) all come here.
Backends take a client or transport and plain options only, import nothing from here, and refuse to
build a client themselves. Airflow is imported only to resolve a connection or build a client, so the
CLI's local, Slurm-here and Ray paths run without it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_curation.backends import Backend, get_backend
from airflow_curation.core.storage_map import StorageMap

# Backend options that name an Airflow connection: resolved here, kept (as ids) in job handles.
CONN_ID_OPTIONS = ("slurm_conn_id", "kubernetes_conn_id", "ray_conn_id")
# How to reach the Kubernetes API without a connection: the factory builds the client from them.
KUBERNETES_CLIENT_OPTIONS = ("in_cluster", "config_file", "context", "host", "token", "verify_ssl")
UNKEPT_OPTIONS = ("token",)  # a secret: never in a handle (a connection holds it instead)

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


def connection_ids(options: Mapping[str, Any]) -> dict[str, Any]:
    """The connection ids and client options among backend options (what a handle keeps to resolve them
    again), secrets excepted."""
    keys = [k for k in (*CONN_ID_OPTIONS, *KUBERNETES_CLIENT_OPTIONS) if k not in UNKEPT_OPTIONS]
    return {k: options[k] for k in keys if options.get(k) is not None}


def backend_for(name: str, options: Mapping[str, Any] | None = None, *, storage: StorageMap | None = None) -> Backend:
    """Build backend ``name`` from plain options, resolving the connections they name.

    :param name: ``local``, ``slurm``, ``kubernetes``, ``ray``.
    :param options: the backend's options, plus optionally ``slurm_conn_id`` / ``kubernetes_conn_id`` /
        ``ray_conn_id`` (their connection's settings lie under the options given) and the Kubernetes client
        options.
    :param storage: the storage map for the job's environment; only where jobs are submitted, never
        where they are only followed.
    """
    opts = dict(options or {})
    ids = {k: opts.pop(k) for k in CONN_ID_OPTIONS if k in opts}
    client_opts = {k: opts.pop(k) for k in KUBERNETES_CLIENT_OPTIONS if k in opts}
    if client_opts and name != "kubernetes":
        raise ValueError(f"backend {name!r}: {sorted(client_opts)} are options of the kubernetes backend only")
    if storage:
        opts["env"] = {**storage.to_env(), **(opts.get("env") or {})}
    if name == "slurm":
        if not ids.get("slurm_conn_id"):
            return slurm_backend(None, opts)  # the Slurm commands run here: no Airflow needed
        from airflow_curation.hooks.slurm import SlurmHook

        return slurm_backend(SlurmHook(ids["slurm_conn_id"]), opts)
    if name == "kubernetes":
        return kubernetes_backend(ids.get("kubernetes_conn_id"), client_opts, opts)
    if name == "ray":
        client = ray_client(ids.get("ray_conn_id"), address=opts.get("address"))
        return get_backend("ray", **{**opts, "address": client.address}, client=client)
    return get_backend(name, **opts)


DEFAULT_RAY_ADDRESS = "http://127.0.0.1:8265"


def ray_client(conn_id: str | None = None, *, address: str | None = None) -> RayJobClient:
    """The Ray Job Submission client of one cluster, for the Ray backend.

    :param conn_id: an Airflow connection: its host (``http://head:8265``, or host, port and schema
        ``https``) is the job server's address; its password, a token sent as ``Authorization: Bearer``;
        its extra ``headers`` (an object), more headers; extra ``verify``, TLS verification (a bool or
        a CA bundle's path). None: no Airflow needed.
    :param address: the job server's address; over the connection's. Neither: ``$RAY_API_SERVER_ADDRESS``,
        ``$RAY_ADDRESS``, then ``http://127.0.0.1:8265``.
    """
    headers: dict[str, str] = {}
    verify: bool | str = True
    if conn_id:
        from airflow.sdk import BaseHook

        conn = BaseHook.get_connection(conn_id)
        extra = conn.extra_dejson or {}
        host = conn.host or ""
        if host and "://" not in host:
            host = f"{conn.schema or 'http'}://{host}" + (f":{conn.port}" if conn.port else "")
        address = address or host or None
        headers = {str(k): str(v) for k, v in (extra.get("headers") or {}).items()}
        if conn.password:
            headers.setdefault("Authorization", f"Bearer {conn.password}")
        verify = extra.get("verify", True)
    address = address or os.environ.get("RAY_API_SERVER_ADDRESS") or os.environ.get("RAY_ADDRESS")
    return RayJobClient(address or DEFAULT_RAY_ADDRESS, headers=headers, verify=verify)


class RayJobClient:
    """Ray's ``JobSubmissionClient`` for one cluster, made on first use (making it calls the cluster, and a
    backend is also built where no call follows: a handle's options, the CLI) and again after a failed make.

    :param address: the job server's address. :param headers: sent with every request (a token).
    :param verify: TLS verification, as ``requests`` takes it.
    """

    def __init__(self, address: str, headers: Mapping[str, str] | None = None, verify: bool | str = True) -> None:
        self.address = address
        self.headers = dict(headers or {})
        self.verify = verify
        self._client: Any = None

    def __repr__(self) -> str:  # never the headers: they may hold a token
        return f"RayJobClient({self.address!r})"

    def connect(self) -> Any:
        """The ``JobSubmissionClient`` (made now if not yet)."""
        if self._client is None:
            # Ray's own token mode would want RAY_AUTH_TOKEN in this process; a token comes in the headers.
            os.environ.setdefault("RAY_AUTH_MODE", "disabled")
            from ray.job_submission import JobSubmissionClient

            self._client = JobSubmissionClient(self.address, headers=self.headers or None, verify=self.verify)
        return self._client

    def submit_job(self, **kwargs: Any) -> str:
        return self.connect().submit_job(**kwargs)

    def get_job_info(self, job_id: str) -> Any:
        return self.connect().get_job_info(job_id)

    def get_job_logs(self, job_id: str) -> str:
        return self.connect().get_job_logs(job_id)

    def stop_job(self, job_id: str) -> bool:
        return self.connect().stop_job(job_id)


def slurm_backend(hook: Any, options: Mapping[str, Any]) -> Backend:
    """The Slurm backend on a ``SlurmHook``'s site defaults (under ``options``) and the transport to its
    login node; ``hook`` None: no connection, the Slurm commands run here."""
    if hook is None:
        return get_backend("slurm", **options)
    return get_backend("slurm", **{**hook.backend_options(), **options}, transport=hook.transport())


def kubernetes_backend(conn_id: str | None, client_options: Mapping[str, Any], options: dict[str, Any]) -> Backend:
    """The Kubernetes backend on the client of :func:`kubernetes_client`; ``namespace`` defaults to the
    connection's (then ``default``)."""
    hook, api_client = kubernetes_client(conn_id, **client_options)
    if not options.get("namespace") and hook.get_namespace():
        options = {**options, "namespace": hook.get_namespace()}
    return get_backend("kubernetes", **options, api_client=api_client)


def kubernetes_client(
    conn_id: str | None = None,
    *,
    in_cluster: bool | None = None,
    config_file: str | None = None,
    context: str | None = None,
    host: str | None = None,
    token: str | None = None,
    verify_ssl: bool = True,
) -> tuple[Any, Any]:
    """The provider's ``KubernetesHook`` and its API client, every call retried by ``generic_api_retry``.

    :param conn_id: a ``kubernetes`` connection (in-cluster, kubeconfig path or inline, context,
        namespace); ``None``: the options below, else the default kubeconfig.
    :param in_cluster: / :param config_file: / :param context: as the connection's fields.
    :param host: an API server URL, with ``token`` and ``verify_ssl``: made into a kubeconfig for the hook.
    """
    try:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
        from kubernetes import client
    except ImportError as e:
        raise ImportError(
            f"the kubernetes backend's API client comes from the cncf-kubernetes provider ({e}): "
            "pip install 'airflow-curation[kubernetes]'"
        ) from e

    config_dict = _kubeconfig(host, token, verify_ssl) if host else None
    hook = KubernetesHook(
        conn_id=conn_id,
        kubernetes_conn_id=None,  # no connection named: no lookup of kubernetes_default
        in_cluster=in_cluster or None,
        config_file=config_file,
        cluster_context=context,
        config_dict=config_dict,
    )
    if not hook._coalesce_param(hook.in_cluster, hook._get_field("in_cluster")):
        # A configuration of its own: the provider would load a kubeconfig into the process-wide default,
        # and a triggerer serving two clusters would mix them up (in-cluster is one cluster either way).
        hook.client_configuration = client.Configuration()
        hook.client_configuration.retries = 0  # one retry policy: the provider's, not urllib3's under it
    return hook, _with_provider_retry(hook.get_conn())


def _kubeconfig(host: str, token: str | None, verify_ssl: bool) -> dict[str, Any]:
    cluster = {"server": host, **({} if verify_ssl else {"insecure-skip-tls-verify": True})}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "api", "cluster": cluster}],
        "users": [{"name": "user", "user": {"token": token} if token else {}}],
        "contexts": [{"name": "api", "context": {"cluster": "api", "user": "user"}}],
        "current-context": "api",
    }


class _Exists(Exception):
    """A create answered 409 AlreadyExists: a final answer (the object is there), not a transient one."""


def _with_provider_retry(api_client: Any) -> Any:
    """Every API call of ``api_client`` retried as the provider retries its own (``generic_api_retry``:
    429 honouring Retry-After, 5xx and dropped connections with exponential backoff, ``[workers]
    api_retries`` attempts). A create's 409 is the backend's reconnect signal, so it is not retried."""
    from airflow.providers.cncf.kubernetes.kubernetes_helper_functions import generic_api_retry
    from kubernetes.client.exceptions import ApiException

    call_api = api_client.call_api

    @generic_api_retry
    def attempt(resource_path: str, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return call_api(resource_path, method, *args, **kwargs)
        except ApiException as e:
            if e.status == 409 and method == "POST":
                raise _Exists() from e
            raise

    def call(resource_path: str, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return attempt(resource_path, method, *args, **kwargs)
        except _Exists as e:
            raise e.__cause__ from None

    api_client.call_api = call
    return api_client


def handle_options(backend: Backend, options: Mapping[str, Any]) -> dict[str, Any]:
    """What a job handle keeps to rebuild ``backend`` in a trigger or a retry: its plain options without
    the job's environment (storage secrets), plus the connection ids and client options of ``options``
    (a token excepted) to resolve again."""
    kept = {k: v for k, v in backend.options().items() if k != "env"}
    return {**kept, **connection_ids(options)}
