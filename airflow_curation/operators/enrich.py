"""Enrich a lake's kept documents with a model: classify, score, generate or embed (``stages/enrich``)."""

from __future__ import annotations

from typing import Any

from airflow_curation.links.curation import CurationPluginLink
from airflow_curation.operators.base import CurationStageOperator


class RayDashboardLink(CurationPluginLink):
    """The Ray dashboard of the cluster the enrich job runs on (its job page when submitted to one)."""

    name = "Ray dashboard"
    target = "ray_dashboard"

    def url(self, ti_key, uri: str) -> str:
        return uri


class EnrichOperator(CurationStageOperator):
    """Run a model over every kept document; outputs go to ``attrs/enrich-<name>/`` keyed by ``id``.

    Deferrable and durable like every stage operator (the job handle survives a worker restart). The job
    starts a new local Ray by default; ``ray_address`` points it at an existing cluster instead
    (``ray://host:10001`` from anywhere, ``host:6379`` from a cluster node), and the ``ray`` backend submits
    the whole job through the Ray Job Submission API of that cluster (docs/backends/ray.md).

    :param input_manifest: the upstream manifest URI (usually the dedup gate's ``manifest_uri``).
    :param task: ``embed``, ``classify``, ``score`` or ``generate``.
    :param model: model folder (Hugging Face layout) visible to the job.
    :param name: output name, ``attrs/enrich-<name>/`` (default: the task).
    :param model_runtime: what runs the model: ``vllm`` (default) or ``transformers``.
    :param mapper: where the model runs: ``ray`` (default: Ray Data model actors) or ``local`` (in the job
        process).
    :param ray_address: an existing Ray cluster for the job's model actors (default: a new local Ray).
    :param ray_dashboard_url: the cluster's dashboard, shown as an extra link.
    :param batch_size: rows per model call. :param replicas: model replicas (data parallel).
    :param gpus_per_replica: GPUs per replica (default ``auto``: ``tensor_parallel_size`` when the machine
        or Ray cluster has GPUs, else CPU). :param tensor_parallel_size: GPUs one model instance spans.
    :param max_failed_fraction: failure budget, a fraction of the shards.
    :param config: any other enrich setting (``prompt_template``, ``max_tokens``, ``labels``...).
    """

    stage = "enrich"
    airflow_params = ("ray_dashboard_url",)
    renamed_params = {"engine": "model_runtime", "engine_executor": "mapper"}
    operator_extra_links = (*CurationStageOperator.operator_extra_links, RayDashboardLink())
    ui_color = "#f3e8f8"

    def __init__(
        self,
        *,
        input_manifest: str,
        task: str,
        model: str,
        name: str | None = None,
        model_runtime: str | None = None,
        mapper: str | None = None,
        ray_address: str | None = None,
        ray_dashboard_url: str | None = None,
        batch_size: int | str | None = None,
        replicas: int | str | None = None,
        gpus_per_replica: float | str | None = None,
        tensor_parallel_size: int | str | None = None,
        max_failed_fraction: float | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.input_manifest = input_manifest
        self.task = task
        self.model = model
        self.name = name
        self.model_runtime = model_runtime
        self.mapper = mapper
        self.ray_address = ray_address
        self.ray_dashboard_url = ray_dashboard_url
        self.batch_size = batch_size
        self.replicas = replicas
        self.gpus_per_replica = gpus_per_replica
        self.tensor_parallel_size = tensor_parallel_size
        self.max_failed_fraction = max_failed_fraction

    def submit_job(self, context: Any) -> dict[str, Any]:
        handle = super().submit_job(context)
        RayDashboardLink.persist(context, handle.get("dashboard_url") or self.ray_dashboard_url)
        return handle
