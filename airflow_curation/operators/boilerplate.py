"""Lines repeated across many documents (menus, footers, cookie banners) removed (``stages/boilerplate``)."""

from __future__ import annotations

from typing import Any

from airflow_curation.operators.base import CurationStageOperator


class BoilerplateOperator(CurationStageOperator):
    """Count every line of every shard of the input manifest once per document (spilled by key partition,
    summed in a global step bounded by ``memory_budget``) and write ``attrs/boilerplate/<shard>.parquet``
    with ``clean_text`` (the text without the lines held by at least ``min_documents`` documents) and
    ``boilerplate_lines_removed``; later stages read that text. A barrier, each step checkpointed so that a
    rerun resumes. Run it between preprocess and dedup.

    :param input_manifest: the upstream manifest URI (usually the preprocess gate's ``manifest_uri``).
    :param min_documents: a line held by at least this many documents is boilerplate (default 10).
    :param memory_budget: bytes for one partition of the global step (``"256MiB"`` works too).
    :param max_failed_fraction: failure budget, a fraction of the shards.
    :param config: any other boilerplate setting (``partitions``, ``batch_rows``...).
    """

    stage = "boilerplate"
    ui_color = "#f0ece0"

    def __init__(
        self,
        *,
        input_manifest: str,
        min_documents: int | str | None = None,
        memory_budget: int | str | None = None,
        max_failed_fraction: float | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.input_manifest = input_manifest
        self.min_documents = min_documents
        self.memory_budget = memory_budget
        self.max_failed_fraction = max_failed_fraction
