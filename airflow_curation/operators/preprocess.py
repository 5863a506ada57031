"""Quality signals and keep/drop columns for every shard of a lake (``stages/preprocess``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_curation.operators.base import CurationStageOperator


class PreprocessOperator(CurationStageOperator):
    """Compute per-document signals and apply filter rules; writes ``attrs/preprocess/<shard>.parquet``
    (``id``, signals, ``keep``, ``drop_reason``), never rewriting a shard. The job runs the shards on a
    Dask LocalCluster sized from the memory budget, or on the cluster at ``scheduler_address``.

    :param input_manifest: the upstream manifest URI (usually the ingest gate's ``manifest_uri``).
    :param preset: filter preset(s): ``gopher``, ``c4``, ``fineweb``, ``code``, comma-separated, or ``none``.
    :param rules: extra rules ``{name, signal, min, max}``, applied after the preset's.
    :param engine: ``dask`` (default) or ``local``.
    :param scheduler_address: an existing Dask scheduler (``tcp://host:8786``).
    :param workers: at most this many local Dask workers (the memory plan may choose fewer).
    :param max_failed_fraction: failure budget, a fraction of the shards.
    :param config: any other preprocess setting (``signals``, ``code``, ``code_language``, ``batch_rows``...).
    """

    stage = "preprocess"
    template_fields: Sequence[str] = (*CurationStageOperator.template_fields, "input_manifest", "preset",
                                      "engine", "scheduler_address", "max_failed_fraction")
    ui_color = "#e8eef8"

    def __init__(self, *, input_manifest: str, preset: str = "gopher", rules: list[dict] | None = None,
                 engine: str = "dask", scheduler_address: str | None = None, workers: int | None = None,
                 max_failed_fraction: float | str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.input_manifest = input_manifest
        self.preset = preset
        self.rules = list(rules or [])
        self.engine = engine
        self.scheduler_address = scheduler_address
        self.workers = workers
        self.max_failed_fraction = max_failed_fraction

    def build_config(self, context: Any) -> dict[str, Any]:
        if not self.input_manifest:
            raise ValueError(f"{self.task_id}: no input_manifest given")
        config = {**self.config, "input_manifest": self.input_manifest, "preset": self.preset,
                  "engine": self.engine}
        if self.rules:
            config["rules"] = self.rules
        if self.scheduler_address:
            config["scheduler_address"] = self.scheduler_address
        if self.workers:
            config["workers"] = int(self.workers)
        if self.max_failed_fraction not in (None, ""):
            # Templated params arrive as strings.
            config["max_failed_fraction"] = float(self.max_failed_fraction)
        return config
