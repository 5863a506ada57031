"""Backends submit job specs somewhere and report on them: ``local`` (default), ``slurm``, ``kubernetes``."""

from __future__ import annotations

from airflow_curation.backends.base import Backend, JobHandle, JobState, JobStatus

BACKENDS = {
    "local": "airflow_curation.backends.local:LocalBackend",
    "slurm": "airflow_curation.backends.slurm:SlurmBackend",
    "kubernetes": "airflow_curation.backends.kubernetes:KubernetesBackend",
    "ray": "airflow_curation.backends.ray:RayJobBackend",
}


def get_backend(name: str, **options) -> Backend:
    """Backend ``name`` from plain options and, where it needs one, a ready client or transport
    (``api_client``, ``transport``): :func:`airflow_curation.hooks.factory.backend_for` builds those."""
    import importlib

    try:
        target = BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; known: {sorted(BACKENDS)}") from None
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)(**options)


__all__ = ["Backend", "JobHandle", "JobState", "JobStatus", "get_backend"]
