"""Ingest raw JSONL / Parquet / text / WARC / HTML files into shards of a lake."""

from __future__ import annotations

from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from airflow_curation.core import storage
from airflow_curation.operators.base import CurationStageOperator


def missing_inputs(inputs: list[str]) -> list[str]:
    """The inputs that name nothing: a path that does not exist, a glob that matches nothing.

    :param inputs: files, folders or glob patterns (local paths or fsspec URLs).
    """
    missing = []
    for spec in inputs:
        try:
            found = storage.glob(spec) if any(ch in spec for ch in "*?[") else storage.exists(spec)
        except storage.StorageCredentialsError:
            raise  # not "missing": the message says which credential is missing and where it goes
        except (FileNotFoundError, OSError):
            found = False
        if not found:
            missing.append(spec)
    return missing


class IngestOperator(CurationStageOperator):
    """Turn input files into zstd Parquet shards (``stages/ingest``).

    :param inputs: files, folders or glob patterns (local paths or fsspec URLs); one string or a list.
        A string with commas is split, so that a templated DAG param can carry several inputs.
    :param lake: root URL of the lake.
    :param dataset: dataset name inside the lake.
    :param snapshot: snapshot partition, usually ``"{{ ds }}"``.
    :param text_field: field or column that holds the document text (default ``text``).
    :param html_extractor: HTML to text for WARC responses and ``.html`` files: ``resiliparse`` (default)
        or ``trafilatura`` (``docs/ingest-web.md``).
    :param text_format: JSONL and Parquet inputs: ``text`` (default) or ``html`` (the text field holds HTML,
        turned into its main text by ``html_extractor``).
    :param max_failed_fraction: failure budget, a fraction of the units (input file groups).
    :param replace: supersede the complete ingest runs of this dataset/snapshot made from other inputs or
        settings (their manifests, and those that read their shards, are marked ``superseded``); without
        it such a run is refused, since it would overwrite their shards.
    :param config: any other ingest setting (``target_shard_bytes``, ``format``, ``text_mode``...).

    No input, or an input that does not exist, fails the task before any job is submitted, with a
    one-line message and without retries (``AirflowFailException``).
    """

    stage = "ingest"

    def __init__(
        self,
        *,
        inputs: str | list[str],
        dataset: str,
        lake: str | None = None,
        snapshot: str | None = None,
        text_field: str | None = None,
        html_extractor: str | None = None,
        text_format: str | None = None,
        max_failed_fraction: float | str | None = None,
        replace: bool | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(dataset=dataset, lake=lake, snapshot=snapshot, **kwargs)
        self.inputs = inputs
        self.text_field = text_field
        self.html_extractor = html_extractor
        self.text_format = text_format
        self.max_failed_fraction = max_failed_fraction
        self.replace = replace

    def submit_job(self, context: Any) -> dict[str, Any]:
        """Check that every input exists (with the connection's storage options, in effect for this task),
        then submit."""
        inputs = self.build_config(context)["inputs"]
        try:
            missing = missing_inputs(inputs)
        except storage.StorageCredentialsError as e:
            raise AirflowFailException(f"{self.task_id}: {e}") from None
        if missing:
            raise AirflowFailException(f"{self.task_id}: input not found: {', '.join(missing)}")
        return super().submit_job(context)

    def build_config(self, context: Any) -> dict[str, Any]:
        config = super().build_config(context)
        if not config.get("inputs"):
            raise AirflowFailException(
                f"{self.task_id}: no input given (in curation_pipeline: the run's `input` "
                "param or the Airflow Variable `curation_input`)"
            )
        return config
