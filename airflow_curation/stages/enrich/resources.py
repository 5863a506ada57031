"""GPUs and CPUs of enrich's model replicas: checked up front, ``auto`` resolved against what the mapper reaches.

Two steps, so that a wrong combination fails before any work and a cluster that cannot hold the replicas
fails with a message instead of Ray's "may hang forever" wait for resources that never come:

- :func:`check_settings` (the stage's constructor): the settings alone, e.g. ``tensor_parallel_size`` 8
  with 1 GPU per replica, ``tensor_parallel_size`` 0, ``gpus_per_replica`` -1;
- :func:`place` (the mapper, once it knows the machine or the Ray cluster): ``gpus_per_replica: auto``
  becomes ``tensor_parallel_size`` GPUs when there are GPUs, else 0 (CPU), and the replicas must fit:
  every replica's GPUs on one node, all replicas' GPUs and CPUs in the cluster.

A replica is one model instance (one Ray actor): ``replicas`` of them run side by side (data parallel),
each reserving ``gpus_per_replica`` GPUs, which vLLM spans with ``tensor_parallel_size`` (tensor parallel,
its worker processes inside the actor's reservation). So on GPUs the two are equal, or a replica uses a
fraction of one GPU (several small models sharing it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from airflow_curation.stages.mappers.budget import cpu_count

AUTO = "auto"


def gpus_setting(value: Any) -> str | float:
    """``auto``, or a number of GPUs (``0``: CPU; a fraction shares one GPU between replicas)."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    if isinstance(value, bool):
        raise ValueError(f"expected 'auto' or a number of GPUs, got {value!r}")
    try:
        gpus = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"expected 'auto' or a number of GPUs, got {value!r}") from None
    return gpus


@dataclass(frozen=True)
class Available:
    """What the mapper can place replicas on (``where`` names it in errors)."""

    gpus: float
    cpus: float
    node_gpus: float  # the most GPUs of one node: a replica's GPUs are on one node
    where: str


@dataclass(frozen=True)
class Placement:
    """The resources of each replica, resolved."""

    replicas: int
    gpus_per_replica: float
    cpus_per_replica: float
    tensor_parallel_size: int

    @property
    def device(self) -> str:
        """Where the engine runs: on the replica's GPUs, or on CPU (never "whatever is visible")."""
        return "cuda" if self.gpus_per_replica > 0 else "cpu"

    def ray_map_args(self) -> dict[str, Any]:
        """Resources of each ``map_batches`` actor (``num_gpus`` None: no GPU asked)."""
        return {"num_cpus": self.cpus_per_replica, "num_gpus": self.gpus_per_replica or None}


def check_settings(config: dict[str, Any]) -> None:
    """The settings alone, together (each alone, e.g. ``tensor_parallel_size`` and ``replicas`` at least 1, is
    its Setting's bound); a ``ValueError`` naming them and what to set."""
    tp, cpus, gpus = config["tensor_parallel_size"], config["cpus_per_replica"], config["gpus_per_replica"]
    if not float(cpus) >= 0:
        raise ValueError(f"enrich: cpus_per_replica must be 0 or more, not {cpus}")
    if tp > 1 and config["model_runtime"] != "vllm":
        raise ValueError(
            f"enrich: tensor_parallel_size {tp} needs model_runtime vllm (transformers runs one model on one device)"
        )
    if gpus == AUTO:
        return
    if not (gpus >= 0 and math.isfinite(gpus)):
        raise ValueError(f"enrich: gpus_per_replica must be auto, 0 (CPU) or a number of GPUs, not {gpus}")
    if gpus > 1 and not float(gpus).is_integer():
        raise ValueError(f"enrich: gpus_per_replica above 1 must be a whole number of GPUs, not {gpus}")
    if tp > 1 and gpus != tp:
        raise ValueError(
            f"enrich: tensor_parallel_size {tp} spans {tp} GPUs, so each replica needs gpus_per_replica {tp} "
            f"(or auto), not {gpus:g}"
        )
    if tp == 1 and gpus > 1:
        raise ValueError(
            f"enrich: gpus_per_replica {gpus:g} with tensor_parallel_size 1 leaves {gpus - 1:g} GPUs of each "
            "replica idle: for throughput raise replicas (data parallel), for a model too big for one GPU set "
            f"tensor_parallel_size {gpus:g}"
        )


def place(config: dict[str, Any], available: Available, replicas: int | None = None) -> Placement:
    """Resolve ``auto`` and check that the replicas fit ``available`` (``replicas``: how many run at once,
    default the setting; the local mapper runs one)."""
    check_settings(config)
    tp = int(config["tensor_parallel_size"])
    n = int(config["replicas"] if replicas is None else replicas)
    cpus = float(config["cpus_per_replica"])
    gpus = config["gpus_per_replica"]
    if gpus == AUTO:
        gpus = float(tp) if available.gpus > 0 else 0.0
        if tp > 1 and not gpus:
            raise ValueError(
                f"enrich: tensor_parallel_size {tp} needs {tp} GPUs per replica, and {available.where} has no GPU"
            )
    gpus = float(gpus)
    if gpus > 0:
        if available.gpus <= 0:
            raise ValueError(
                f"enrich: gpus_per_replica {gpus:g} asks for GPUs, and {available.where} has none "
                "(gpus_per_replica auto or 0 runs on CPU)"
            )
        if gpus > available.node_gpus:
            raise ValueError(
                f"enrich: a replica needs {gpus:g} GPUs on one node (tensor_parallel_size {tp}); the largest node "
                f"of {available.where} has {available.node_gpus:g}"
            )
        if n * gpus > available.gpus:
            raise ValueError(
                f"enrich: replicas {n} x gpus_per_replica {gpus:g} = {n * gpus:g} GPUs; {available.where} has "
                f"{available.gpus:g}: lower replicas"
            )
    if n * cpus > available.cpus:
        raise ValueError(
            f"enrich: replicas {n} x cpus_per_replica {cpus:g} = {n * cpus:g} CPUs; {available.where} has "
            f"{available.cpus:g}: lower replicas or cpus_per_replica"
        )
    return Placement(replicas=n, gpus_per_replica=gpus, cpus_per_replica=cpus, tensor_parallel_size=tp)


def ray_available(address: str | None) -> Available:
    """The connected Ray cluster's resources now (``ray.cluster_resources()``, nodes that are alive).

    An autoscaling cluster whose GPU workers scale from zero shows no GPU until one starts: give the
    cluster a GPU worker at its minimum, or run with an explicit count on a cluster that has them."""
    import ray

    total = ray.cluster_resources()
    node_gpus = max((float(n.get("Resources", {}).get("GPU", 0)) for n in ray.nodes() if n.get("Alive")), default=0.0)
    return Available(
        gpus=float(total.get("GPU", 0)),
        cpus=float(total.get("CPU", 0)),
        node_gpus=node_gpus,
        where=f"the Ray cluster {address}" if address else "the local Ray",
    )


def local_available() -> Available:
    """This process's machine: the GPUs torch sees (none without torch), the cores it may use (affinity, CPU quota)."""
    try:
        import torch

        gpus = float(torch.cuda.device_count()) if torch.cuda.is_available() else 0.0
    except ImportError:
        gpus = 0.0
    return Available(gpus=gpus, cpus=float(cpu_count()), node_gpus=gpus, where="this machine")
