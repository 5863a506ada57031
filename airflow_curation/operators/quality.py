"""Score a lake's documents with a trained quality classifier and drop those below the threshold
(``stages/quality``)."""

from __future__ import annotations

from typing import Any

from airflow_curation.operators.base import CurationStageOperator


class QualityOperator(CurationStageOperator):
    """Write ``attrs/quality/<fingerprint>/<shard>.parquet`` (``id``, ``quality_score``, ``keep``,
    ``drop_reason``) with a model trained by ``curation quality-train``; rows below the threshold are
    dropped with reason ``quality_classifier``. A hashed n-gram model runs on CPU; an embedding-based one
    runs its embedding model with the enrich stage's runtime (on the GPU where the worker has one).

    :param input_manifest: the upstream manifest URI (usually the dedup or preprocess gate's ``manifest_uri``).
    :param model: the model folder, visible to the job (a path or an fsspec URL).
    :param preset: threshold preset(s): ``quality`` (default: keep ``quality_score >= 0.5``) or ``none``.
    :param min_score: the lowest score kept, instead of the preset's.
    :param rules: extra rules ``{name, signal, min, max}`` over ``quality_score``.
    :param max_failed_fraction: failure budget, a fraction of the shards.
    :param config: any other quality setting (``batch_rows``, ``workers``, ``embed_model``...).
    """

    stage = "quality"
    ui_color = "#eef8e8"

    def __init__(
        self,
        *,
        input_manifest: str,
        model: str,
        preset: str | None = None,
        min_score: float | str | None = None,
        rules: list[dict] | None = None,
        max_failed_fraction: float | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.input_manifest = input_manifest
        self.model = model
        self.preset = preset
        self.min_score = min_score
        self.rules = rules
        self.max_failed_fraction = max_failed_fraction
