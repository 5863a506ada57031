"""Global exact and MinHash-LSH near dedup of a lake (``stages/dedup``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_curation.operators.base import CurationStageOperator


def _opt(value: Any, cast) -> Any:
    # Templated params arrive as strings; "" and "None" mean "the stage's default".
    if value is None or (isinstance(value, str) and value.strip() in ("", "None", "null")):
        return None
    if cast is bool and isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return cast(value)


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
    :param engine: ``local`` (process pool) or ``dask``; ``scheduler_address`` uses an existing Dask cluster.
    :param memory_budget: bytes for one partition of the global phase.
    :param max_failed_fraction: failure budget, a fraction of the shards.
    :param config: any other dedup setting (``tokenizer``, ``bands``, ``rows``, ``only_kept``...).
    """

    stage = "dedup"
    template_fields: Sequence[str] = (*CurationStageOperator.template_fields, "input_manifest", "threshold",
                                      "num_perm", "ngram", "verify", "engine", "scheduler_address",
                                      "memory_budget", "max_failed_fraction")
    ui_color = "#e8f0f8"

    def __init__(self, *, input_manifest: str, threshold: float | str | None = None,
                 num_perm: int | str | None = None, ngram: int | str | None = None,
                 verify: bool | str | None = None, engine: str | None = None, scheduler_address: str | None = None,
                 memory_budget: int | str | None = None, max_failed_fraction: float | str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.input_manifest = input_manifest
        self.threshold = threshold
        self.num_perm = num_perm
        self.ngram = ngram
        self.verify = verify
        self.engine = engine
        self.scheduler_address = scheduler_address
        self.memory_budget = memory_budget
        self.max_failed_fraction = max_failed_fraction

    def build_config(self, context: Any) -> dict[str, Any]:
        if not self.input_manifest:
            raise ValueError(f"{self.task_id}: no input_manifest given")
        config = {**self.config, "input_manifest": self.input_manifest}
        optional = {
            "threshold": _opt(self.threshold, float), "num_perm": _opt(self.num_perm, int),
            "ngram": _opt(self.ngram, int), "verify": _opt(self.verify, bool), "engine": _opt(self.engine, str),
            "scheduler_address": _opt(self.scheduler_address, str),
            "memory_budget": _opt(self.memory_budget, int),
            "max_failed_fraction": _opt(self.max_failed_fraction, float),
        }
        config.update({k: v for k, v in optional.items() if v is not None})
        return config
