"""Preprocess: per-shard quality signals and keep/drop decisions as additive columns.

One unit per upstream shard (:class:`~airflow_curation.stages.attrs.AttrsStage`). A unit streams its shard
in batches, computes the signals (:mod:`airflow_curation.core.signals`, plus code signals when a rule
needs them), applies the filter rules (:mod:`airflow_curation.core.filters`) and writes
``attrs/preprocess/<fingerprint>/<shard>.parquet`` with ``id``, the signals, ``keep`` and ``drop_reason``:
the same rows in the same order as the shard, which is never rewritten. Units run on Dask by default (a
LocalCluster sized from the memory budget, or the cluster at ``scheduler_address``; in this process
where the plan gives one worker).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_curation.core import storage
from airflow_curation.core.accounting import RowAccounting
from airflow_curation.core.allocator import use_system_allocator
from airflow_curation.core.code_signals import CODE_SIGNALS, compute_code_signals, language_of
from airflow_curation.core.compat_names import COMPAT_SIGNALS
from airflow_curation.core.filters import (
    DEFAULT_PRESET,
    Rule,
    apply_rules,
    check_rule_signals,
    extracted_signals,
    is_reference_recipe,
    resolve_rules,
)
from airflow_curation.core.langid import LANG_SIGNALS, lang_rules, lang_signals
from airflow_curation.core.line_clean import NORMALIZATIONS, REMOVED_PREFIX, LineCleaner
from airflow_curation.core.manifest import ShardEntry, UnitEntry
from airflow_curation.core.schema import DROP_REASON, ID, KEEP, META, SOURCE, TEXT, string_ids
from airflow_curation.core.signals import SIGNALS, SignalComputer
from airflow_curation.core.url_filter import UrlFilter
from airflow_curation.stages.attrs import AttrsFile, AttrsStage, keep_accounting, write_attrs
from airflow_curation.stages.base import UnitMapper, local_mapper
from airflow_curation.stages.mappers.budget import DEFAULT_BASE_BYTES, MiB
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
    :param url_blocklist: a block list folder in the UT1 layout (``<category>/domains``, ``<category>/urls``)
        checked against each row's ``meta.url``; a blocked row is dropped as ``url_blocklist:<category>``.
    :param url_categories: only these categories of the block list (default: all).
    :param url_subwords: drop rows whose URL contains one of these (``url_subword``).
    :param line_rules: line-cleaning rules or presets (``c4``, ``fineweb``, ``symbols``...,
        :mod:`airflow_curation.core.line_clean`); with them, ``fix_text`` or ``normalization``, the cleaned
        text is a ``clean_text`` column, the signals are computed on it, and later stages read it; a preset that
        reads the extracted text (:data:`~airflow_curation.core.filters.PRESET_TEXT`: the compat presets placed
        before the line cleaning in their reference) reads the text before the line rules, and so does language ID
        when a reference preset is selected; those rules decide before the line rules' document drops.
    :param fix_text: repair mojibake (ftfy).
    :param normalization: Unicode normalisation of the text: ``none``, ``NFC`` or ``NFKC``.
    :param min_words_per_line: the ``min_words`` line rule's minimum.
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
        url_blocklist: str | None = None,
        url_categories: list[str] | None = None,
        url_subwords: list[str] | None = None,
        line_rules: str | list[str] | None = None,
        fix_text: bool = False,
        normalization: str = "none",
        min_words_per_line: int = 3,
    ) -> None:
        self.urls = UrlFilter(url_blocklist, url_categories, url_subwords or ())
        self.cleaner = LineCleaner(line_rules, fix_text, normalization or "none", min_words_per_line)
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
        # datatrove-definition signals (the *_compat presets): only those a rule reads
        self.compat = sorted({r.signal for r in self.rules} & set(COMPAT_SIGNALS))
        # The signals read from the extracted text (after normalisation, before the line rules): only when lines
        # are cleaned, else there is one text. docs/preprocess.md, "Which text a preset reads".
        extracted: frozenset[str] = frozenset()
        if self.cleaner.rules:
            extracted = extracted_signals(preset)
            if is_reference_recipe(preset):
                extracted |= frozenset(LANG_SIGNALS)
        self.extracted = extracted
        # Rules on the extracted text decide first (language ID first of them, as in the reference), then the line
        # rules' document drops, then the rules on the cleaned text; each group in its listed order.
        before = [r for r in self.rules if r.signal in extracted]
        self.rules_before = sorted(before, key=lambda r: r.signal not in LANG_SIGNALS)
        self.rules_after = [r for r in self.rules if r.signal not in extracted]
        computed = [
            *SIGNALS,
            *(CODE_SIGNALS if self.code else ()),
            *(LANG_SIGNALS if self.lang_id else ()),
            *self.compat,
        ]
        off = dict.fromkeys(CODE_SIGNALS, "code signals are off (--code false)")
        off |= dict.fromkeys(LANG_SIGNALS, "language ID is off (--lang-id false)")
        check_rule_signals(self.rules, computed, off)  # here, not in every unit: each would fail on it

    @property
    def compression(self) -> str:
        """The attrs files' Parquet codec: lz4 for ~45 numbers a row (writing 500 MB of JSONL's attrs: 0.28-0.47
        CPU s against zstd's 0.51-0.75, for files 22% larger, 28.1 vs 23.1 MB, which read back faster); zstd where
        they hold the cleaned text (line rules), which it compresses far better."""
        return "zstd" if self.cleaner else "lz4"

    @property
    def input_columns(self) -> list[str]:
        cols = [ID, TEXT]
        if self.code and self.code_language == "auto":
            cols.append(SOURCE)
        if self.urls:
            cols.append(META)
        return cols

    def process(self, batch: pa.RecordBatch | pa.Table) -> pa.Table:
        table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        texts = table.column(TEXT)
        # Row drops that come before every rule: a blocked URL; then a document a line rule drops (after the rules
        # on the extracted text when some rule reads it).
        early = self._url_reasons(table)
        cleaned = line_drops = None
        extracted = texts  # what the rules on the extracted text read: the text before the line rules
        if self.cleaner:
            normalized: list[str] | None = [] if self.extracted else None
            cleaned, line_drops = self.cleaner.process(texts, normalized)
            texts = cleaned.column(0)
            if normalized is not None:
                extracted = pa.array(normalized, pa.string())
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
            lang = lang_signals(extracted if LANG_SIGNALS[0] in self.extracted else texts, self.lang_max_chars)
            for name in lang.column_names:
                signals = signals.append_column(name, lang.column(name))
        if self.compat:
            # imported here: the module builds its rules at import (~0.4 CPU s), which only these rules need
            from airflow_curation.core.compat import compat_signals

            on_extracted = [n for n in self.compat if n in self.extracted]
            on_cleaned = [n for n in self.compat if n not in self.extracted]
            for source, names in ((extracted, on_extracted), (texts, on_cleaned)):
                if names:
                    dt = compat_signals(source, names)
                    for name in dt.column_names:
                        signals = signals.append_column(name, dt.column(name))
        if self.rules_before:
            # the first reason wins: URL, rules on the extracted text, line rules' drops, rules on the cleaned text
            first = apply_rules(signals, self.rules_before).column(DROP_REASON)
            rest = apply_rules(signals, self.rules_after).column(DROP_REASON)
            reason = pc.coalesce(*[r for r in (early, first, line_drops, rest) if r is not None])
            decisions = pa.table({KEEP: pc.is_null(reason), DROP_REASON: reason})
        else:
            decisions = apply_rules(signals, self.rules)
            if line_drops is not None:
                early = line_drops if early is None else pc.coalesce(early, line_drops)
            if early is not None:
                decisions = _with_early_drops(decisions, early)
        if cleaned is not None:
            signals = pa.Table.from_arrays(
                cleaned.columns + signals.columns, names=cleaned.column_names + signals.column_names
            )
        ids = string_ids(table.column(ID))
        return pa.Table.from_arrays(
            [ids] + signals.columns + decisions.columns, names=[ID] + signals.column_names + decisions.column_names
        )

    def _url_reasons(self, table: pa.Table) -> pa.Array | None:
        """Per row: why its ``meta.url`` is blocked, or null; None when no URL filter is set."""
        if not self.urls:
            return None
        if META not in table.column_names:
            raise ValueError("URL filtering reads meta.url: the input has no meta column")
        reasons = []
        for meta in table.column(META).to_pylist():
            url = None
            if meta:
                try:
                    url = json.loads(meta).get("url")
                except (ValueError, AttributeError):
                    url = None  # meta that is not a JSON object has no URL: nothing to block
            reasons.append(self.urls.reason(url) if isinstance(url, str) else None)
        return pa.array(reasons, pa.string())

    def run_file(self, in_uri: str, out_uri: str, batch_rows: int = 4096) -> tuple[RowAccounting, dict[str, Any]]:
        """Stream one Parquet file with ``id`` and ``text`` into ``out_uri`` (written atomically)."""
        use_system_allocator()  # batch after batch of fresh pages otherwise (core.allocator)
        out = write_attrs(
            in_uri, out_uri, self.process, preprocess_accounting, self.input_columns, batch_rows, None, self.compression
        )
        return out.accounting, out.extra


def preprocess_accounting(result: pa.Table) -> RowAccounting:
    """Rows kept and dropped by reason; lines each cleaning rule removed as notes (``lines_removed:<rule>``:
    events that are not rows, beside the books), which the CLI summary and validate's report show."""
    acc = keep_accounting(result, "preprocess")
    for name in result.column_names:
        if name.startswith(REMOVED_PREFIX):
            n = int(pc.sum(result.column(name)).as_py() or 0)
            if n:
                acc.note(f"lines_removed:{name.removeprefix(REMOVED_PREFIX)}", n)
    return acc


def _with_early_drops(decisions: pa.Table, early: pa.Array) -> pa.Table:
    """``keep``/``drop_reason`` with the rows of a non-null ``early`` reason dropped for it (it wins)."""
    hit = pc.is_valid(early)
    keep = pc.and_(decisions.column(KEEP), pc.invert(hit))
    reason = pc.if_else(hit, early, decisions.column(DROP_REASON))
    return decisions.set_column(decisions.column_names.index(KEEP), KEEP, keep).set_column(
        decisions.column_names.index(DROP_REASON), DROP_REASON, reason
    )


class PreprocessStage(AttrsStage):
    """Quality signals and keep/drop columns for every shard (gopher, structure, c4, fineweb, code presets; language ID).

    Writes attrs/preprocess/ per shard (checkpointed; reruns skip done shards), or DIR/<file>.parquet for
    plain Parquet files with id and text columns: id, every signal, keep and drop_reason. See
    docs/preprocess.md.
    """

    name = "preprocess"
    # 2: seven line-structure signal columns (attrs of version 1 have 38 columns, not 45); 3: the structure
    # preset's thresholds and rules changed (measured on extracted web pages), so its decisions did too; 4: with
    # line rules, the compat presets before the line cleaning (and language ID beside them) read the extracted text
    version = "4"
    UPSTREAM = ("ingest",)
    SETTINGS = AttrsStage.SETTINGS.extend(
        Setting(
            "preset",
            str_or_list,
            DEFAULT_PRESET,
            "filter preset(s), comma-separated: gopher, structure, c4, fineweb, code, gopher_compat, c4_compat, "
            "c4_compat_fineweb (C4 as FineWeb runs it), fineweb_compat (datatrove's decisions), or none",
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
            "keep only these languages, ISO 639-1 codes, comma-separated (e.g. en,de); hbs, no and msa keep "
            "the close languages the model splits (hr/sr/bs/sh, no/nn, ms/id)",
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
            minimum=0,
        ),
        Setting(
            "url_blocklist",
            str,
            None,
            "a URL block list folder in the UT1 layout (<category>/domains, <category>/urls), checked against "
            "meta.url; drop reason url_blocklist:<category>",
            keep_old_fingerprint=True,
        ),
        Setting("url_categories", list, [], "only these categories of the block list", keep_old_fingerprint=True),
        Setting(
            "url_subwords",
            list,
            [],
            "drop rows whose URL contains one of these sub-words, comma-separated (drop reason url_subword)",
            keep_old_fingerprint=True,
        ),
        Setting(
            "line_rules",
            str_or_list,
            [],
            "line cleaning before the signals: c4, fineweb, symbols or single rules (docs/preprocess.md); "
            "the cleaned text is a clean_text column that later stages read",
            keep_old_fingerprint=True,
        ),
        Setting("fix_text", bool, False, "repair mojibake with ftfy before the signals", keep_old_fingerprint=True),
        Setting(
            "normalization",
            str,
            "none",
            "Unicode normalisation before the signals: none, NFC or NFKC",
            choices=NORMALIZATIONS,
            keep_old_fingerprint=True,
        ),
        Setting(
            "min_words_per_line", int, 3, "the min_words line rule's minimum", keep_old_fingerprint=True, minimum=0
        ),
        Setting("batch_rows", int, 4096, "rows per batch and per output row group", runtime=True, minimum=1),
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
            "workers",
            int,
            None,
            "at most this many local workers (the memory plan may choose fewer)",
            runtime=True,
            minimum=0,
        ),
        Setting(
            "memory_expansion",
            float,
            None,
            "a unit's peak memory per byte of its shard, for the worker plan; "
            "default: measured from this config's earlier checkpoints, else 8",
            runtime=True,
            minimum=0,
        ),
        renamed={"engine": "mapper"},
    )

    def __init__(self, lake, config, run_id) -> None:
        super().__init__(lake, config, run_id)
        self._pre: Preprocessor | None = self.preprocessor()  # preset, rules, signals checked before any work
        self._unit_bytes: dict[str, int] = {}

    @classmethod
    def check_config(cls, config: dict[str, Any]) -> None:
        super().check_config(config)
        preprocessor_for(config, with_blocklist=False)  # preset, rules, signals; the block list's files: the job's

    def preprocessor(self) -> Preprocessor:
        return preprocessor_for(self.config)

    def default_mapper(self) -> UnitMapper:
        if self.config["mapper"] == "local":
            return local_mapper(int(self.config.get("workers") or 1))
        from airflow_curation.stages.mappers.dask import dask_mapper

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

    def attrs_compression(self) -> str:
        return self._preprocessor().compression

    def write_unit(self, unit: UnitEntry, entry: ShardEntry, uri: str) -> AttrsFile:
        use_system_allocator()  # batch after batch of fresh pages otherwise (core.allocator)
        return super().write_unit(unit, entry, uri)

    def compute(self, table: pa.Table) -> pa.Table:
        return self._preprocessor().process(table)

    def account(self, result: pa.Table) -> RowAccounting:
        return preprocess_accounting(result)


def preprocessor_for(c: dict[str, Any], with_blocklist: bool = True) -> Preprocessor:
    """The preprocessor ``c`` (the stage's settings) describes; ``with_blocklist`` False leaves the URL block
    list's files unread (what the settings alone can be checked with)."""
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
        url_blocklist=c["url_blocklist"] if with_blocklist else None,
        url_categories=c["url_categories"],
        url_subwords=c["url_subwords"],
        line_rules=c["line_rules"],
        fix_text=c["fix_text"],
        normalization=c["normalization"],
        min_words_per_line=c["min_words_per_line"],
    )
