"""Preprocess: per-shard quality signals and keep/drop decisions as additive columns.

One unit per upstream shard (:class:`~airflow_curation.stages.attrs.AttrsStage`). A unit streams its shard
in batches, computes the signals (:mod:`airflow_curation.core.signals`, plus code signals when a rule
needs them), applies the filter rules (:mod:`airflow_curation.core.filters`) and writes
``attrs/preprocess/<fingerprint>/<shard>.parquet`` with ``id``, the signals, ``keep`` and ``drop_reason``:
the same rows in the same order as the shard, which is never rewritten. Units run on Dask by default (a
LocalCluster sized from the memory budget, or the cluster at ``scheduler_address``).
"""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa

from airflow_curation.core import storage
from airflow_curation.core.accounting import RowAccounting
from airflow_curation.core.code_signals import CODE_SIGNALS, compute_code_signals, language_of
from airflow_curation.core.filters import DEFAULT_PRESET, Rule, apply_rules, resolve_rules
from airflow_curation.core.langid import LANG_SIGNALS, lang_rules, lang_signals
from airflow_curation.core.schema import ID, SOURCE, TEXT
from airflow_curation.core.signals import SignalComputer
from airflow_curation.stages.attrs import AttrsStage, keep_accounting, write_attrs
from airflow_curation.stages.base import UnitMapper, local_mapper
from airflow_curation.stages.engines.budget import DEFAULT_BASE_BYTES, MiB
from airflow_curation.stages.settings import Setting, auto_or_bool, str_or_list

DEFAULT_EXPANSION = 8.0

log = logging.getLogger(__name__)


class Preprocessor:
    """Signals + rules for a stream of batches; what the stage and ``curation preprocess FILE...`` share.

    :param preset: filter preset name(s), e.g. ``"gopher"`` or ``"gopher,c4"``; ``"none"`` for none.
    :param rules: extra rules ``{name, signal, min, max}``, applied after the preset's.
    :param signals: signal settings (``stop_words``, ``tokenizer``).
    :param code: compute code signals: ``True``, ``False`` or ``"auto"`` (when a rule reads one).
    :param code_language: one language for every row, or ``"auto"`` (from each row's ``source`` extension).
    :param lang: keep only these languages (ISO 639-1 codes; rule ``lang``), after the other rules.
    :param lang_min_score: drop rows whose language score is below this (rule ``lang_score``).
    :param lang_id: compute ``lang``/``lang_score``: ``True``, ``False`` or ``"auto"`` (when a rule reads one).
    :param lang_max_chars: language ID reads at most this many characters of a text (0: all).
    """

    def __init__(
        self,
        preset: str | list[str] | None = DEFAULT_PRESET,
        rules: list[dict] | None = None,
        signals: dict | None = None,
        code: bool | str = "auto",
        code_language: str = "auto",
        lang: str | list[str] | None = None,
        lang_min_score: float | None = None,
        lang_id: bool | str = "auto",
        lang_max_chars: int = 0,
    ) -> None:
        self.rules: list[Rule] = resolve_rules(preset, [*(rules or []), *lang_rules(lang, lang_min_score)])
        self.computer = SignalComputer(signals)
        if code == "auto":
            code = any(r.signal in CODE_SIGNALS for r in self.rules)
        self.code = bool(code)
        self.code_language = code_language
        if lang_id == "auto":
            lang_id = any(r.signal in LANG_SIGNALS for r in self.rules)
        self.lang_id = bool(lang_id)
        self.lang_max_chars = int(lang_max_chars or 0)

    @property
    def input_columns(self) -> list[str]:
        cols = [ID, TEXT]
        if self.code and self.code_language == "auto":
            cols.append(SOURCE)
        return cols

    def process(self, batch: pa.RecordBatch | pa.Table) -> pa.Table:
        table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        texts = table.column(TEXT)
        signals = self.computer.compute(texts)
        if self.code:
            if self.code_language == "auto":
                sources = table.column(SOURCE).to_pylist() if SOURCE in table.column_names else [None] * len(table)
                langs = [language_of(s) for s in sources]
            else:
                langs = self.code_language
            code = compute_code_signals(texts.to_pylist(), langs)
            for name in code.column_names:
                signals = signals.append_column(name, code.column(name))
        if self.lang_id:
            lang = lang_signals(texts, self.lang_max_chars)
            for name in lang.column_names:
                signals = signals.append_column(name, lang.column(name))
        decisions = apply_rules(signals, self.rules)
        ids = table.column(ID)
        if not pa.types.is_string(ids.type):
            ids = ids.cast(pa.string())
        return pa.Table.from_arrays(
            [ids] + signals.columns + decisions.columns, names=[ID] + signals.column_names + decisions.column_names
        )

    def run_file(self, in_uri: str, out_uri: str, batch_rows: int = 4096) -> tuple[RowAccounting, dict[str, Any]]:
        """Stream one Parquet file with ``id`` and ``text`` into ``out_uri`` (written atomically)."""
        out = write_attrs(in_uri, out_uri, self.process, keep_accounting, self.input_columns, batch_rows)
        return out.accounting, out.extra


class PreprocessStage(AttrsStage):
    """Quality signals and keep/drop columns for every shard (gopher, structure, c4, fineweb, code presets; language ID).

    Writes attrs/preprocess/ per shard (checkpointed; reruns skip done shards), or DIR/<file>.parquet for
    plain Parquet files with id and text columns: id, every signal, keep and drop_reason. See
    docs/preprocess.md.
    """

    name = "preprocess"
    version = "2"  # 2: seven line-structure signal columns (attrs of version 1 have 38 columns, not 45)
    UPSTREAM = ("ingest",)
    SETTINGS = AttrsStage.SETTINGS.extend(
        Setting(
            "preset",
            str_or_list,
            DEFAULT_PRESET,
            "filter preset(s), comma-separated: gopher, structure, c4, fineweb, code, or none",
        ),
        Setting("rules", list, [], "extra rules, a JSON list of {name, signal, min, max}, applied after the preset's"),
        Setting(
            "signals",
            dict,
            {},
            "signal settings: stop_words (list), tokenizer (default or hf:<tokenizer.json>)",
            cli=False,
        ),
        Setting(
            "code",
            auto_or_bool,
            "auto",
            "code signals: auto (when a rule reads one), true or false",
            choices=("auto", True, False),
        ),
        Setting("code_language", str, "auto", "auto (by each row's source extension) or one language for all rows"),
        Setting(
            "lang",
            str_or_list,
            [],
            "keep only these languages, ISO 639-1 codes, comma-separated (e.g. en,de)",
            keep_old_fingerprint=True,
        ),
        Setting(
            "lang_min_score",
            float,
            None,
            "drop rows whose language-ID score is below this (e.g. 0.65)",
            keep_old_fingerprint=True,
        ),
        Setting(
            "lang_id",
            auto_or_bool,
            "auto",
            "lang and lang_score columns: auto (when a rule reads one), true or false",
            choices=("auto", True, False),
            keep_old_fingerprint=True,
        ),
        Setting(
            "lang_max_chars",
            int,
            0,
            "language ID reads at most this many characters of each text (0: all)",
            keep_old_fingerprint=True,
        ),
        Setting("batch_rows", int, 4096, "rows per batch and per output row group", runtime=True),
        Setting(
            "mapper",
            str,
            "dask",
            "where shards run: dask (a LocalCluster sized from the memory budget, or "
            "scheduler_address) or local (in-process / a process pool of workers)",
            choices=("dask", "local"),
            runtime=True,
        ),
        Setting("scheduler_address", str, None, "run on this Dask cluster instead of a LocalCluster", runtime=True),
        Setting(
            "workers", int, None, "at most this many local workers (the memory plan may choose fewer)", runtime=True
        ),
        Setting(
            "memory_expansion",
            float,
            None,
            "a unit's peak memory per byte of its shard, for the worker plan; "
            "default: measured from this config's earlier checkpoints, else 8",
            runtime=True,
        ),
        renamed={"engine": "mapper"},
    )

    def __init__(self, lake, config, run_id) -> None:
        super().__init__(lake, config, run_id)
        self._pre: Preprocessor | None = self.preprocessor()  # preset, rules, signals checked before any work
        self._unit_bytes: dict[str, int] = {}

    def preprocessor(self) -> Preprocessor:
        c = self.config
        return Preprocessor(
            preset=c["preset"],
            rules=c["rules"],
            signals=c["signals"],
            code=c["code"],
            code_language=c["code_language"],
            lang=c["lang"],
            lang_min_score=c["lang_min_score"],
            lang_id=c["lang_id"],
            lang_max_chars=c["lang_max_chars"],
        )

    def default_mapper(self) -> UnitMapper:
        if self.config["mapper"] == "local":
            return local_mapper(int(self.config.get("workers") or 1))
        from airflow_curation.stages.engines.dask import dask_mapper

        return dask_mapper(
            self.config.get("scheduler_address"),
            workers=self.config.get("workers"),
            unit_bytes=lambda args: self._unit_bytes.get(args[1].unit_id, 0),
            expansion=self.memory_expansion(),
        )

    def memory_expansion(self, sample: int = 64) -> float:
        """Peak memory per shard byte: the setting if given, else measured from this config's
        checkpoints (each records its process's peak RSS), else 8. A worker's peak RSS over its life
        overestimates one unit's need, which errs on the safe side."""
        if self.config.get("memory_expansion"):
            return float(self.config["memory_expansion"])
        measured = []
        for uri in storage.listdir(self.checkpoints.directory)[:sample]:
            if not uri.endswith(".json") or uri.endswith(".failed.json"):
                continue
            try:
                rec = storage.read_json(uri)
                peak = float(rec["extra"]["peak_rss_mib"]) * MiB
                shard_bytes = int(rec["outputs"][0]["bytes"])
            except (KeyError, IndexError, TypeError, ValueError, OSError) as e:
                log.debug("preprocess: checkpoint %s has no memory figure: %s", uri, e)
                continue
            if shard_bytes > 0:
                measured.append(max(0.0, peak - DEFAULT_BASE_BYTES) / shard_bytes)
        if not measured:
            return DEFAULT_EXPANSION
        expansion = min(64.0, max(1.0, max(measured)))
        log.info("preprocess: memory expansion %.1f measured from %d checkpoints", expansion, len(measured))
        return expansion

    def __getstate__(self) -> dict:
        # Workers need no sizes (10,000 shards' worth must not travel with every unit); they build their
        # own preprocessor.
        return {**self.__dict__, "_unit_bytes": {}, "_pre": None}

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(self._preprocessor().input_columns)

    def _preprocessor(self) -> Preprocessor:
        if self._pre is None:
            self._pre = self.preprocessor()
        return self._pre

    def unit_for(self, shard_id, entry):
        self._unit_bytes[shard_id] = entry.bytes  # sizes the Dask workers, for streamed units too
        return super().unit_for(shard_id, entry)

    def _plan(self, group):
        units = super()._plan(group)
        entries = self.entries()
        self._unit_bytes = {u.unit_id: entries[u.unit_id].bytes for u in units}
        return units

    def compute(self, table: pa.Table) -> pa.Table:
        return self._preprocessor().process(table)
