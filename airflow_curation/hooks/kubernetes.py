"""Kubernetes connection for curation jobs: a thin layer over the cncf-kubernetes provider's hooks.

The connection (type ``kubernetes``, the provider's own: in-cluster, kubeconfig path or inline
kubeconfig, context, namespace) gives the API client, with the provider's request timeouts; this hook
hands it to a :class:`~airflow_curation.backends.kubernetes.KubernetesBackend`. The backend never sees
the connection: a trigger or a restarted worker gets a new client through
:func:`airflow_curation.hooks.factory.backend_for` from the ``kubernetes_conn_id`` kept in the handle.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook, KubernetesHook

from airflow_curation.backends.base import JobState, JobStatus
from airflow_curation.backends.kubernetes import KubernetesBackend


def _airflow_retries() -> dict[str, Any]:
    """The provider's API retry settings (``[workers] api_retries``: attempts, ``api_retry_wait_min``)
    as the backend's ``retries`` (after the first attempt) and ``retry_backoff``."""
    from airflow.providers.cncf.kubernetes.kubernetes_helper_functions import API_RETRIES, API_RETRY_WAIT_MIN

    return {"retries": max(int(API_RETRIES) - 1, 0), "retry_backoff": float(API_RETRY_WAIT_MIN)}


class CurationKubernetesHook(KubernetesHook):
    """:param conn_id: the Kubernetes connection (``kubernetes_default``)."""

    def curation_api_client(self) -> Any:
        """The connection's API client, loaded into a configuration of its own.

        The provider loads a kubeconfig into the process-wide default configuration unless given one;
        in a triggerer serving two clusters that would mix them up. urllib3's own retries are off: the
        backend retries (429, 5xx, dropped connections) with backoff. In-cluster is left to the provider
        (it loads the default configuration either way; every in-cluster connection is the same one).
        """
        in_cluster = self._coalesce_param(self.in_cluster, self._get_field("in_cluster"))
        if self.client_configuration is None and not in_cluster:
            from kubernetes import client

            self.client_configuration = client.Configuration()
            self.client_configuration.retries = 0
        return self.api_client

    def get_backend(self, **options: Any) -> KubernetesBackend:
        """A backend on this connection's cluster; ``namespace`` defaults to the connection's (then the
        deployment's, then ``default``), retries to Airflow's ``[workers] api_retries``. Options given win."""
        options.pop("kubernetes_conn_id", None)
        namespace = options.pop("namespace", None) or self.get_namespace()
        options = {**_airflow_retries(), **({"namespace": namespace} if namespace else {}), **options}
        from airflow_curation.backends import get_backend

        # Through the registry: deployment defaults ($CURATION_KUBERNETES_OPTIONS) apply as for any backend.
        return get_backend("kubernetes", api_client=self.curation_api_client(), **options)


class AsyncCurationKubernetesHook(AsyncKubernetesHook):
    """Reads a curation job's object without blocking the triggerer's event loop."""

    async def job_state(self, handle: dict[str, Any]) -> JobStatus:
        """State of the job's main object (not the result file, not the gather pass): enough for a
        trigger to decide whether to wake the operator, which then calls the backend's full ``status``."""
        from kubernetes_asyncio import client as async_client
        from kubernetes_asyncio.client.exceptions import ApiException

        async with self.get_conn() as api:
            try:
                if handle["kind"] == "Job":
                    obj = await async_client.BatchV1Api(api).read_namespaced_job_status(
                        handle.get("main") or handle["name"], handle["namespace"]
                    )
                    obj = api.sanitize_for_serialization(obj)
                else:
                    from airflow_curation.backends.k8s_objects import CRDS

                    group, version, plural = CRDS[handle["kind"]]
                    obj = await async_client.CustomObjectsApi(api).get_namespaced_custom_object(
                        group, version, handle["namespace"], plural, handle.get("main") or handle["name"]
                    )
            except ApiException as e:
                if e.status == 404:
                    return JobStatus(JobState.UNKNOWN, f"{handle['kind']} {handle['name']} not found")
                raise
        state, message = KubernetesBackend._object_state(obj)
        return JobStatus(state, message)
