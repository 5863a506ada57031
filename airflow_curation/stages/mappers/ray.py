"""Which Ray a stage runs on (enrich's ``ray`` mapper, validate's Daft ``ray`` runner).

- No address: a **new local Ray** for this job (``ray.init(address="local")``, sized by ``num_cpus`` /
  ``num_gpus``), whatever else runs on the machine. A plain ``ray.init()`` would join any cluster that
  ``RAY_ADDRESS`` or ``/tmp/ray`` points at, and then refuse ``num_cpus``.
- ``CURATION_RAY_ADDRESS`` in the environment: the deployment's default cluster (docker-compose sets it),
  as if given as the address. ``RAY_ADDRESS`` alone is Ray's variable and is not read.
- Inside a Ray job (submitted through the job API, as the ``ray`` backend does: Ray sets
  ``RAY_JOB_CONFIG_JSON_ENV_VAR`` and ``RAY_ADDRESS`` for the driver): the job's own cluster.
- ``host:port`` (the GCS port) or ``auto``: this process joins that cluster as a driver; it must run on
  one of the cluster's nodes.
- ``ray://host:port``: Ray Client, from any machine. Ray Data cannot execute through a client (its
  executor needs the core worker a client has not: ``'Worker' object has no attribute 'core_worker'``),
  so enrich runs each shard's Ray Data pipeline in a driver actor on the cluster (``executors.py``); Daft
  supports clients itself.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass

log = logging.getLogger(__name__)

ADDRESS_ENV = "CURATION_RAY_ADDRESS"
_RAY_JOB_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"  # set by Ray's job supervisor for a submitted job's driver
CLIENT_TRIES = 3  # a Ray client's connection refused by the cluster's side is tried this often


@dataclass
class RayTarget:
    """:param address: what ``ray.init`` is given: ``"local"`` for a new instance, else the cluster.
    :param why: where the address came from (for logs and errors)."""

    address: str
    why: str

    @property
    def local(self) -> bool:
        return self.address == "local"

    @property
    def client(self) -> bool:
        return self.address.startswith("ray://")


def resolve(address: str | None) -> RayTarget:
    """The Ray that ``address`` (a stage setting, None when unset) means; see the module docstring."""
    if address:
        return RayTarget(address, "ray_address")
    if os.environ.get(ADDRESS_ENV):
        return RayTarget(os.environ[ADDRESS_ENV], ADDRESS_ENV)
    if os.environ.get(_RAY_JOB_ENV) and os.environ.get("RAY_ADDRESS"):
        return RayTarget(os.environ["RAY_ADDRESS"], "the Ray job's cluster")
    return RayTarget("local", "a new local Ray")


def check_sizes(address: str | None, num_cpus: int | None, num_gpus: int | None) -> RayTarget:
    """The target, once it is clear that ``num_cpus`` / ``num_gpus`` (sizes of a new local Ray) can apply."""
    target = resolve(address)
    if not target.local and (num_cpus or num_gpus is not None):
        raise ValueError(
            f"ray_num_cpus / ray_num_gpus size a new local Ray; with {target.why} ({target.address}) the "
            "cluster's own resources are used: unset them, or unset the address to run on a local Ray"
        )
    return target


# What this module connected the process to ((address, num_cpus, num_gpus), the session), None when it
# did not: Ray is one connection per process, and one left by an earlier stage (Daft's runner keeps its
# Ray) is replaced when another Ray is asked for, never silently reused. The session tells a connection
# made since by someone else (after a ray.shutdown() outside this module) from ours.
_ours: tuple[tuple[str, int | None, int | None], tuple] | None = None


def _session(ray) -> tuple:
    ctx = ray.get_runtime_context()
    try:
        return (ctx.gcs_address, ctx.get_job_id())
    except Exception:  # noqa: BLE001 - a Ray Client context may not say; the connection object does
        return (id(ray.util.client.ray.get_context()),)


def _current(ray) -> str:
    """The Ray this process is connected to, in words."""
    if ray.util.client.ray.is_connected():
        return "a Ray Client connection"
    return f"the Ray at {ray.get_runtime_context().gcs_address}"


def _same_cluster(ray, target: RayTarget) -> bool:
    """Whether the process's current connection (made outside this module) is ``target``'s cluster."""
    if target.local or target.address == "auto":
        return True  # the process owner's own Ray, started or joined before the stage ran
    if target.client:
        return ray.util.client.ray.is_connected()
    if ray.util.client.ray.is_connected():
        return False
    host, _, port = target.address.rpartition(":")
    have_host, _, have_port = ray.get_runtime_context().gcs_address.rpartition(":")
    try:
        return port == have_port and socket.gethostbyname(host) == socket.gethostbyname(have_host)
    except OSError:
        return False


def connect(address: str | None, num_cpus: int | None = None, num_gpus: int | None = None) -> tuple[RayTarget, bool]:
    """Initialise Ray for ``address``; returns the target and whether this call initialised it (the caller
    then calls :func:`disconnect`: a local instance stops, a connection to a cluster is closed). ``num_cpus``
    and ``num_gpus`` size a local instance; a cluster has its own, so they are refused with an address.

    A process already connected: by this module to the same Ray, it is reused; by this module to another
    (an earlier stage's), that one is shut down and the asked one connected; by its owner (``ray.init``
    before the stage ran), it is reused when it is the asked cluster (or no address was given), else
    refused: shutting down the owner's Ray under it would break the owner."""
    global _ours
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # no token file for a local, loopback-only Ray
    import ray

    target = check_sizes(address, num_cpus, num_gpus)
    key = (target.address, num_cpus, num_gpus)
    if ray.is_initialized():
        if _ours is not None and _ours[1] != _session(ray):
            _ours = None  # ours was shut down outside this module; this one is the owner's
        if _ours is None:
            if _same_cluster(ray, target):
                return target, False
            raise ValueError(
                f"this process is already connected to {_current(ray)} (ray.init outside the stage), and the "
                f"stage asks for {target.address} ({target.why}): call ray.shutdown() first, or run the stage "
                "in its own process"
            )
        if _ours[0] == key:
            return target, False
        log.info("Ray: leaving %s (%s) for %s (%s)", _current(ray), _ours[0][0], target.address, target.why)
        disconnect()
    kwargs: dict = {"log_to_driver": True}
    if target.local:
        kwargs["include_dashboard"] = False
        if num_cpus:
            kwargs["num_cpus"] = int(num_cpus)
        if num_gpus is not None:
            kwargs["num_gpus"] = int(num_gpus)
    log.info("Ray: %s (%s)", target.address, target.why)
    _init(ray, target, kwargs)
    _ours = (key, _session(ray))
    return target, True


def _init(ray, target: RayTarget, kwargs: dict) -> None:
    """``ray.init``, a Ray client's tried again where the cluster's proxy failed to start the client's server
    ("Initialization failure from server": its own process that died starting, e.g. on a port another took
    between its check and its bind): the cluster is up, the next server gets another port."""
    for attempt in range(1, CLIENT_TRIES + 1):
        try:
            ray.init(address=target.address, **kwargs)
            return
        except ConnectionAbortedError as e:
            if not target.address.startswith("ray://") or attempt == CLIENT_TRIES:
                raise
            log.warning(
                "Ray: %s could not start this client's server (%s); trying again (%d of %d)",
                target.address,
                str(e).strip().splitlines()[0],
                attempt + 1,
                CLIENT_TRIES,
            )
            ray.shutdown()
            time.sleep(attempt)


def disconnect() -> None:
    """Stop the local Ray this module started, or close its connection to a cluster."""
    global _ours
    import ray

    ray.shutdown()
    _ours = None
