"""Fixtures of the Kubernetes backend tests: a fake API server on loopback and a backend bound to it."""

from __future__ import annotations

from pathlib import Path

import pytest
from k8s_fake_apiserver import FakeKubernetes

from airflow_curation.backends.kubernetes import KubernetesBackend
from airflow_curation.core.manifest import Manifest, ShardEntry
from airflow_curation.hooks.factory import backend_for
from airflow_curation.jobs.spec import JobSpec


@pytest.fixture
def fake_k8s():
    with FakeKubernetes() as fake:
        yield fake


@pytest.fixture(autouse=True)
def fast_provider_retry(monkeypatch):
    """The provider's own retry (``generic_api_retry``: its statuses, attempts and Retry-After), on a
    faster clock: its exponential wait starts at 10 ms instead of ``[workers] api_retry_wait_min``."""
    import tenacity
    from airflow.providers.cncf.kubernetes import kubernetes_helper_functions as helpers

    monkeypatch.setattr(helpers, "_default_wait", tenacity.wait_exponential(min=0.01, max=0.05))


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    return tmp_path / "lake"


# Which launch kind runs which stage is deployment configuration (the helm chart's jobs.launchKinds).
CHART_LAUNCH_KINDS = {"ingest": "job", "preprocess": "dask", "dedup": "dask", "enrich": "ray", "validate": "job"}


@pytest.fixture
def make_backend(fake_k8s, lake):
    def make(**kw) -> KubernetesBackend:
        kw.setdefault("pod", {"storage_secret": "lake-creds"})
        kw.setdefault("min_group_bytes", 1)  # make_spec's shards are 1 byte each: one pod per shard
        kw["launch_kinds"] = {**CHART_LAUNCH_KINDS, **kw.get("launch_kinds", {})}
        backend = backend_for("kubernetes", {"host": fake_k8s.url, "namespace": "default", **kw})
        assert isinstance(backend, KubernetesBackend)
        return backend

    return make


@pytest.fixture
def make_spec(lake):
    def make(stage: str = "preprocess", shards: int = 3, shard_bytes: int = 1, **config) -> JobSpec:
        manifest = lake / "d" / "_manifests" / "r1" / "ingest.json"
        # Only the shard count and bytes (the manifest's head) are read when sizing a sweep.
        Manifest(
            dataset="d",
            stage="ingest",
            run_id="r1",
            fingerprint="f",
            lake={"root": str(lake), "dataset": "d", "snapshot": None},
            shards=[
                ShardEntry(
                    f"part-{i:05d}", str(lake / "d" / "shards" / f"part-{i:05d}.parquet"), 1, shard_bytes, "xxh64:0"
                )
                for i in range(shards)
            ],
            status="complete",
        ).write(str(manifest))
        # What a stage needs to be submitted at all (the backend checks the settings first).
        needs = {"enrich": {"task": "embed", "model": "/models/minilm"}}.get(stage, {})
        return JobSpec(
            stage=stage,
            lake={"root": str(lake), "dataset": "d", "snapshot": None},
            run_id="r1",
            config={"input_manifest": str(manifest), **needs, **config},
        )

    return make
