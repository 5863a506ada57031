"""Global exact and MinHash-LSH near dedup of a lake (``stages/dedup``)."""

from __future__ import annotations

from typing import Any

from airflow_curation.operators.base import CurationStageOperator


class DedupOperator(CurationStageOperator):
    """Find exact (normalised content) and near (MinHash-LSH, Jaccard >= ``threshold``) duplicates across
    every shard of the input manifest and write ``attrs/dedup/<shard>.parquet`` with ``cluster_id`` and
    ``is_duplicate`` (plus ``exact_duplicate``, ``near_duplicate``). A barrier: the job signs every shard,
    clusters globally (partitions spilled to the lake, bounded by ``memory_budget``), then writes the
    per-shard attrs, each step checkpointed so that a rerun resumes.

    :param input_manifest: the upstream manifest URI (usually the preprocess gate's ``manifest_uri``).
    :param threshold: Jaccard similarity of near duplicates (default 0.8).
    :param num_perm: MinHash permutations (128). :param ngram: tokens per shingle (5).
    :param verify: keep only candidate pairs whose exact Jaccard reaches the threshold.
    :param mapper: ``local`` (process pool) or ``dask``.
    :param scheduler_address: an existing Dask cluster (``tcp://host:8786``) for the ``dask`` mapper.
    :param memory_budget: bytes for one partition of the global phase (``"512MiB"`` works too).
    :param max_failed_fraction: failure budget, a fraction of the shards.
    :param config: any other dedup setting (``tokenizer``, ``bands``, ``rows``, ``only_kept``...).
    """

    stage = "dedup"
    renamed_params = {"engine": "mapper"}
    ui_color = "#e8f0f8"

    def __init__(
        self,
        *,
        input_manifest: str,
        threshold: float | str | None = None,
        num_perm: int | str | None = None,
        ngram: int | str | None = None,
        verify: bool | str | None = None,
        mapper: str | None = None,
        scheduler_address: str | None = None,
        memory_budget: int | str | None = None,
        max_failed_fraction: float | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.input_manifest = input_manifest
        self.threshold = threshold
        self.num_perm = num_perm
        self.ngram = ngram
        self.verify = verify
        self.mapper = mapper
        self.scheduler_address = scheduler_address
        self.memory_budget = memory_budget
        self.max_failed_fraction = max_failed_fraction
