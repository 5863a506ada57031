"""Sample the curated rows to target proportions by a key (``stages/mix``)."""

from __future__ import annotations

from typing import Any

from airflow_curation.operators.base import CurationStageOperator


class MixOperator(CurationStageOperator):
    """Select rows to reach target proportions by a key (a column, ``STAGE.COLUMN``, ``input`` or
    ``source_dir``), in documents or tokens, down- and up-sampled from a seed; writes ``attrs/mix/<shard>.parquet``
    (``id``, ``mix_key``, ``mix_epochs``, ``keep``/``drop_reason``), never rewriting a shard, and the mixture
    manifest (per key: available, selected, epochs, achieved share) in the run's manifest.

    :param input_manifest: the upstream manifest URI (usually the last of dedup, quality, decontaminate).
    :param targets: ``{"web": 0.7, "code": 0.3}``, its JSON text or ``"web=0.7,code=0.3"`` (summing to 1).
    :param key: what the targets are keyed by (default ``source_dir``, the source file's first folder).
    :param unit: ``documents`` (default) or ``tokens`` (needs ``token_column`` or ``chars_per_token``).
    :param seed: the sampling seed.
    :param total: the mixture's size in its unit (default: the largest without up-sampling).
    :param tolerance: the declared tolerance of each key's share, checked by validate.
    :param manifests: more input manifests (other datasets or snapshots) mixed with the first.
    :param max_failed_fraction: failure budget, a fraction of the shards.
    :param config: any other mix setting (``token_column``, ``chars_per_token``, ``key_bins``, ``max_epochs``...).
    """

    stage = "mix"
    ui_color = "#f0e8f8"

    def __init__(
        self,
        *,
        input_manifest: str,
        targets: str | dict[str, Any] | None = None,
        key: str | None = None,
        unit: str | None = None,
        seed: int | str | None = None,
        total: int | str | None = None,
        tolerance: float | str | None = None,
        manifests: str | list[str] | None = None,
        max_failed_fraction: float | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.input_manifest = input_manifest
        self.targets = targets
        self.key = key
        self.unit = unit
        self.seed = seed
        self.total = total
        self.tolerance = tolerance
        self.manifests = manifests
        self.max_failed_fraction = max_failed_fraction
