"""Export tokenize's packed sequences, globally shuffled, in the trainers' formats (``stages/export``)."""

from __future__ import annotations

from typing import Any

from airflow_curation.operators.base import CurationStageOperator


class ExportOperator(CurationStageOperator):
    """Shuffle the packed sequences of a tokenize run across shards (seeded, byte-for-byte deterministic) and
    write them as a Megatron-LM indexed dataset (``.bin``/``.idx``), MosaicML streaming (MDS) shards and/or
    Parquet; the files and counts go in the manifest (``config["export"]``).

    :param input_manifest: the tokenize manifest URI (the tokenize gate's ``manifest_uri``).
    :param formats: any of ``megatron``, ``mds``, ``parquet`` (a list, or comma-separated).
    :param seed: the shuffle seed.
    :param file_size: target bytes of tokens per output file (``1GiB``): sets the number of files.
    :param max_failed_fraction: failure budget, a fraction of the units.
    :param config: any other export setting (``vocab_size``, ``mds_size_limit``, ``memory_budget``...).
    """

    stage = "export"
    ui_color = "#f0e8f8"

    def __init__(
        self,
        *,
        input_manifest: str,
        formats: list[str] | str | None = None,
        seed: int | str | None = None,
        file_size: int | str | None = None,
        max_failed_fraction: float | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.input_manifest = input_manifest
        self.formats = formats
        self.seed = seed
        self.file_size = file_size
        self.max_failed_fraction = max_failed_fraction
