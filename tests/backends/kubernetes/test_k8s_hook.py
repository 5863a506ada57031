"""The factory builds the backend and its client from a real Airflow connection (kubeconfig pointing at
the loopback API server) with the cncf-kubernetes provider's hook and retry; the backend builds none."""

from __future__ import annotations

import inspect
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

    options = {"kubernetes_conn_id": k8s_conn, "launch_kinds": {"enrich": "ray"}}
    backend = backend_for("kubernetes", options)
    assert backend.namespace == "curation" and "kubernetes_conn_id" not in backend.options()
    handle = backend.submit(make_spec("enrich"))
    assert fake_k8s.names("rayjobs", ns="curation") == [handle["name"]]
    assert backend.status(handle).state == JobState.PENDING
    # Token from the kubeconfig reached the server; none of it is in the options a trigger stores.
    kept = handle_options(backend, options)
    assert kept["kubernetes_conn_id"] == k8s_conn and "test-token" not in json.dumps(kept)
    # The client came from the provider's hook: its own configuration (not the process-wide default),
    # the provider's request timeouts, no urllib3 retries under the provider's own.
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


def test_the_factory_is_the_only_builder_of_clients(fake_k8s):
    """The backend takes a client and refuses to make one: no connection options, no retry knobs, no
    environment defaults; without a client it names the factory. The registry builds none either."""
    from airflow_curation.backends import get_backend
    from airflow_curation.backends.kubernetes import KubernetesBackend
    from airflow_curation.backends.slurm import SlurmBackend

    params = set(inspect.signature(KubernetesBackend).parameters)
    assert "api_client" in params
    assert not params & {"host", "token", "verify_ssl", "in_cluster", "config_file", "context", "retries"}
    assert not {"ssh_host", "command_prefix"} & set(inspect.signature(SlurmBackend).parameters)
    assert not [n for n in vars(KubernetesBackend) if n in ("_make_client", "_call")]
    with pytest.raises(TypeError, match="hooks.factory.backend_for"):
        get_backend("kubernetes", namespace="ns1")
    with pytest.raises(TypeError):
        get_backend("kubernetes", host=fake_k8s.url)
    with pytest.raises(ValueError, match="kubernetes backend only"):
        from airflow_curation.hooks.factory import backend_for

        backend_for("local", {"in_cluster": True})


def test_the_factory_client_is_the_provider_hook_client_with_its_retry(fake_k8s, k8s_conn, make_spec):
    """No stand-in: the client the backend uses is the one the provider's KubernetesHook returns, every call
    going through ``generic_api_retry`` (a transient 503 on a read is retried, a 409 on a create is the
    backend's reconnect and is not), and ``host`` without a connection becomes a kubeconfig for that hook."""
    from airflow.providers.cncf.kubernetes.kube_client import _TimeoutK8sApiClient

    from airflow_curation.hooks.factory import backend_for

    backend = backend_for("kubernetes", {"kubernetes_conn_id": k8s_conn})
    assert isinstance(backend.api_client, _TimeoutK8sApiClient)
    handle = backend.submit(make_spec("preprocess"))
    fake_k8s.fault("GET", r"/jobs/", 503, count=2)
    assert backend.status(handle).state == JobState.PENDING and not fake_k8s.faults[-1].count
    posts = len([r for r in fake_k8s.requests if r[0] == "POST"])
    assert backend.submit(make_spec("preprocess")) == handle  # every create answered 409: reconnected
    # ConfigMap, group Job and collect Job: each POSTed once (the provider would retry a 409 five times).
    assert len([r for r in fake_k8s.requests if r[0] == "POST"]) - posts == 3

    by_host = backend_for("kubernetes", {"host": fake_k8s.url, "token": "t0k", "namespace": "curation"})
    assert (
        isinstance(by_host.api_client, _TimeoutK8sApiClient) and by_host.api_client.configuration.host == fake_k8s.url
    )
    assert by_host.status(handle).state == JobState.PENDING
