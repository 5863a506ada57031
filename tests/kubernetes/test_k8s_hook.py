"""The Airflow hook builds the backend from a real Airflow connection (kubeconfig pointing at the
loopback API server), sync and async."""

from __future__ import annotations

import asyncio
import json

import pytest
import yaml

from airflow_curation.backends.base import JobState


@pytest.fixture
def k8s_conn(fake_k8s, tmp_path, monkeypatch):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "loopback",
        "clusters": [{"name": "loopback", "cluster": {"server": fake_k8s.url}}],
        "users": [{"name": "tester", "user": {"token": "test-token"}}],
        "contexts": [{"name": "loopback", "context": {"cluster": "loopback", "user": "tester",
                                                      "namespace": "curation"}}],
    }))
    conn = {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig), "namespace": "curation"}}
    monkeypatch.setenv("AIRFLOW_CONN_K8S_TEST", json.dumps(conn))
    return "k8s_test"


def test_hook_backend_submits_through_the_connection(fake_k8s, k8s_conn, make_spec):
    from airflow_curation.hooks.kubernetes import CurationKubernetesHook

    backend = CurationKubernetesHook(conn_id=k8s_conn).get_backend(retry_backoff=0.01, launch_kinds={"enrich": "ray"})
    assert backend.namespace == "curation" and backend.options()["kubernetes_conn_id"] == k8s_conn
    handle = backend.submit(make_spec("enrich"))
    assert fake_k8s.names("rayjobs", ns="curation") == [handle["name"]]
    assert backend.status(handle).state == JobState.PENDING
    # Token from the kubeconfig reached the server; none of it is in the options a trigger stores.
    assert "test-token" not in json.dumps(backend.options())

    # A triggerer rebuilds the backend from its JSON options alone: the connection supplies the client.
    from airflow_curation.backends import get_backend

    again = get_backend("kubernetes", **backend.options())
    fake_k8s.set_status("rayjobs", handle["name"], {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"},
                        ns="curation")
    assert again.status(handle).state == JobState.RUNNING


def test_async_hook_reads_state_without_blocking(fake_k8s, k8s_conn, make_spec):
    from airflow_curation.hooks.kubernetes import AsyncCurationKubernetesHook, CurationKubernetesHook

    backend = CurationKubernetesHook(conn_id=k8s_conn).get_backend(launch_kinds={"preprocess": "indexed"})
    handle = backend.submit(make_spec())
    hook = AsyncCurationKubernetesHook(conn_id=k8s_conn)
    assert asyncio.run(hook.job_state(handle)).state == JobState.PENDING
    fake_k8s.set_status("jobs", handle["name"], {"active": 1, "ready": 1}, ns="curation")
    assert asyncio.run(hook.job_state(handle)).state == JobState.RUNNING
    backend.cancel(handle)
    assert asyncio.run(hook.job_state(handle)).state == JobState.UNKNOWN
