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
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "loopback",
                "clusters": [{"name": "loopback", "cluster": {"server": fake_k8s.url}}],
                "users": [{"name": "tester", "user": {"token": "test-token"}}],
                "contexts": [
                    {"name": "loopback", "context": {"cluster": "loopback", "user": "tester", "namespace": "curation"}}
                ],
            }
        )
    )
    conn = {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig), "namespace": "curation"}}
    monkeypatch.setenv("AIRFLOW_CONN_K8S_TEST", json.dumps(conn))
    return "k8s_test"


def test_hook_backend_submits_through_the_connection(fake_k8s, k8s_conn, make_spec):
    from airflow_curation.hooks.factory import backend_for, handle_options

    options = {"kubernetes_conn_id": k8s_conn, "retry_backoff": 0.01, "launch_kinds": {"enrich": "ray"}}
    backend = backend_for("kubernetes", options)
    assert backend.namespace == "curation" and "kubernetes_conn_id" not in backend.options()
    handle = backend.submit(make_spec("enrich"))
    assert fake_k8s.names("rayjobs", ns="curation") == [handle["name"]]
    assert backend.status(handle).state == JobState.PENDING
    # Token from the kubeconfig reached the server; none of it is in the options a trigger stores.
    kept = handle_options(backend, options)
    assert kept["kubernetes_conn_id"] == k8s_conn and "test-token" not in json.dumps(kept)
    # The client came from the provider's hook: its own configuration (not the process-wide default),
    # the provider's request timeouts, no urllib3 retries under the backend's own.
    from airflow.providers.cncf.kubernetes.kube_client import _TimeoutK8sApiClient
    from kubernetes import client

    assert isinstance(backend.api_client, _TimeoutK8sApiClient)
    assert backend.api_client.configuration.host == fake_k8s.url
    assert backend.api_client.configuration.retries == 0
    assert client.Configuration.get_default_copy().host != fake_k8s.url

    # A triggerer rebuilds the backend from the handle's JSON options: the connection supplies the client.
    again = backend_for("kubernetes", json.loads(json.dumps(kept)))
    assert again.api_client is not backend.api_client
    fake_k8s.set_status(
        "rayjobs", handle["name"], {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}, ns="curation"
    )
    assert again.status(handle).state == JobState.RUNNING


def test_backends_do_not_import_the_airflow_layer():
    """The import circle backends.kubernetes <-> hooks.kubernetes is gone: backends import no hooks."""
    import pathlib
    import re

    from airflow_curation import backends

    airflow_import = re.compile(r"^\s*(from|import)\s+(airflow\b(?!_)|airflow_curation\.hooks)", re.MULTILINE)
    for path in pathlib.Path(backends.__file__).parent.rglob("*.py"):
        assert not airflow_import.search(path.read_text()), path


def test_async_hook_reads_state_without_blocking(fake_k8s, k8s_conn, make_spec):
    from airflow_curation.hooks.kubernetes import AsyncCurationKubernetesHook, CurationKubernetesHook

    backend = CurationKubernetesHook(conn_id=k8s_conn).get_backend(
        launch_kinds={"preprocess": "indexed"}, retry_backoff=0.01
    )
    handle = backend.submit(make_spec())
    hook = AsyncCurationKubernetesHook(conn_id=k8s_conn)
    assert asyncio.run(hook.job_state(handle)).state == JobState.PENDING
    fake_k8s.set_status("jobs", handle["name"], {"active": 1, "ready": 1}, ns="curation")
    assert asyncio.run(hook.job_state(handle)).state == JobState.RUNNING
    backend.cancel(handle)
    assert asyncio.run(hook.job_state(handle)).state == JobState.UNKNOWN
