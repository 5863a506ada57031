"""Kubernetes connection for curation jobs: a thin layer over the cncf-kubernetes provider's hooks.

The connection (type ``kubernetes``, the provider's own: in-cluster, kubeconfig path or inline
kubeconfig, context, namespace) gives the API client; this hook hands it to a
:class:`~airflow_curation.backends.kubernetes.KubernetesBackend`. Backend options travel as plain
JSON (``kubernetes_conn_id`` instead of credentials), so a trigger or a restarted worker rebuilds
the same backend from the connection.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook, KubernetesHook

from airflow_curation.backends.base import JobState, JobStatus
from airflow_curation.backends.kubernetes import KubernetesBackend


class CurationKubernetesHook(KubernetesHook):
    """:param conn_id: the Kubernetes connection (``kubernetes_default``)."""

    def get_backend(self, **options: Any) -> KubernetesBackend:
        """A backend on this connection's cluster; ``namespace`` defaults to the connection's."""
        namespace = options.pop("namespace", None) or self.get_namespace() or "default"
        options.pop("kubernetes_conn_id", None)
        return KubernetesBackend(namespace=namespace, kubernetes_conn_id=self.conn_id,
                                 api_client=self.api_client, **options)


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
                        handle["name"], handle["namespace"])
                    obj = api.sanitize_for_serialization(obj)
                else:
                    from airflow_curation.backends.kubernetes import _crd

                    group, version, plural = _crd(handle["kind"])
                    obj = await async_client.CustomObjectsApi(api).get_namespaced_custom_object(
                        group, version, handle["namespace"], plural, handle["name"])
            except ApiException as e:
                if e.status == 404:
                    return JobStatus(JobState.UNKNOWN, f"{handle['kind']} {handle['name']} not found")
                raise
        state, message = KubernetesBackend._object_state(obj)
        return JobStatus(state, message)
