"""Mark and drop the documents that share n-grams with evaluation sets (``stages/decontaminate``)."""

from __future__ import annotations

from typing import Any

from airflow_curation.operators.base import CurationStageOperator


class DecontaminateOperator(CurationStageOperator):
    """Find the documents that share an ``ngram``-word n-gram with an evaluation set (a benchmark's test
    split saved as JSONL or Parquet); writes ``attrs/decontaminate/<shard>.parquet`` (``id``,
    ``contaminated``, the benchmark, n-gram and span of the first match, ``keep``/``drop_reason``), never
    rewriting a shard.

    :param input_manifest: the upstream manifest URI (usually the dedup gate's ``manifest_uri``).
    :param eval_sets: evaluation files by benchmark: ``{"mmlu": "s3://evals/mmlu_test.jsonl"}``, a list of
        ``"name=file"`` or ``"mmlu=a.jsonl,gsm8k=b.parquet"``.
    :param text_column: the evaluation files' text column (default ``text``).
    :param ngram: words per n-gram (default 13).
    :param drop: drop the documents that match (default true; false only marks them).
    :param bad_eval_rows: ``fail`` (default) or ``skip`` (quarantined beside the index) for an evaluation
        row that cannot be read.
    :param workers: parallel local workers (one shard each).
    :param max_failed_fraction: failure budget, a fraction of the shards.
    :param config: any other decontaminate setting (``memory_budget``, ``batch_rows``...).
    """

    stage = "decontaminate"
    ui_color = "#eef2e0"

    def __init__(
        self,
        *,
        input_manifest: str,
        eval_sets: str | list[str] | dict[str, Any] | None = None,
        text_column: str | None = None,
        ngram: int | str | None = None,
        drop: bool | str | None = None,
        bad_eval_rows: str | None = None,
        workers: int | str | None = None,
        max_failed_fraction: float | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.input_manifest = input_manifest
        self.eval_sets = eval_sets
        self.text_column = text_column
        self.ngram = ngram
        self.drop = drop
        self.bad_eval_rows = bad_eval_rows
        self.workers = workers
        self.max_failed_fraction = max_failed_fraction
