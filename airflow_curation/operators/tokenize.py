"""Tokenize a lake's curated rows and pack them into fixed-length training sequences (``stages/tokenize``)."""

from __future__ import annotations

from typing import Any

from airflow_curation.operators.base import CurationStageOperator


class TokenizeOperator(CurationStageOperator):
    """Write packed training shards (``packed/<fingerprint>/<shard>.parquet``: ``input_ids`` of ``seq_len``
    tokens with document boundaries) and per-row ``token_count``/``keep``/``drop_reason`` attrs; token
    counts per shard and in total go in the manifest.

    :param input_manifest: the upstream manifest URI (usually the dedup gate's ``manifest_uri``).
    :param tokenizer: a ``tokenizers`` tokenizer.json visible to the job (a path or an fsspec URL).
    :param seq_len: tokens per packed sequence (default 2048).
    :param eos_token: the token appended to every document (default: the tokenizer's EOS).
    :param max_failed_fraction: failure budget, a fraction of the shards.
    :param config: any other tokenize setting (``pad_token``, ``only_kept``, ``batch_rows``...).
    """

    stage = "tokenize"
    ui_color = "#f8f0e8"

    def __init__(
        self,
        *,
        input_manifest: str,
        tokenizer: str,
        seq_len: int | str | None = None,
        eos_token: str | None = None,
        max_failed_fraction: float | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.input_manifest = input_manifest
        self.tokenizer = tokenizer
        self.seq_len = seq_len
        self.eos_token = eos_token
        self.max_failed_fraction = max_failed_fraction
