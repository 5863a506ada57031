"""PII spans, counts and the redacted text for every shard of a lake (``stages/pii``)."""

from __future__ import annotations

from typing import Any

from airflow_curation.operators.base import CurationStageOperator


class PiiOperator(CurationStageOperator):
    """Find emails, IP addresses, phone numbers and keys/tokens in every document; writes
    ``attrs/pii/<shard>.parquet`` (``id``, ``pii_spans``, ``pii_count``, ``pii_<kind>``, ``redacted_text``),
    never rewriting a shard and never dropping a row.

    :param input_manifest: the upstream manifest URI (usually the dedup gate's ``manifest_uri``).
    :param kinds: the kinds to find (a list or ``"email,ipv4"``); default all: ``email``, ``ipv4``,
        ``ipv6``, ``phone``, ``aws_key``, ``github_token``, ``private_key``, ``secret``.
    :param ip_public_only: report only global IP addresses (default true).
    :param redacted_text: write the redacted text column (default true).
    :param workers: parallel local workers (one shard each).
    :param max_failed_fraction: failure budget, a fraction of the shards.
    :param config: any other pii setting (``batch_rows``...).
    """

    stage = "pii"
    ui_color = "#f8e8ee"

    def __init__(
        self,
        *,
        input_manifest: str,
        kinds: str | list[str] | None = None,
        ip_public_only: bool | str | None = None,
        redacted_text: bool | str | None = None,
        workers: int | str | None = None,
        max_failed_fraction: float | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.input_manifest = input_manifest
        self.kinds = kinds
        self.ip_public_only = ip_public_only
        self.redacted_text = redacted_text
        self.workers = workers
        self.max_failed_fraction = max_failed_fraction
