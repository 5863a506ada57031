"""Preprocess: per-shard quality signals and keep/drop decisions as additive columns.

One unit per upstream shard. A unit streams its shard in batches, computes the signals
(:mod:`airflow_curation.core.signals`, plus code signals when a rule needs them), applies the filter
rules (:mod:`airflow_curation.core.filters`) and writes ``attrs/preprocess/<shard>.parquet`` with
``id``, the signals, ``keep`` and ``drop_reason``: the same rows in the same order as the shard, which
is never rewritten. Units run on Dask by default (a LocalCluster sized from the memory budget, or the
cluster at ``scheduler_address``).
"""

from __future__ import annotations

import logging
import resource
import time
from collections import Counter
from functools import lru_cache
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_curation.core import storage
from airflow_curation.core.accounting import RowAccounting
from airflow_curation.core.code_signals import (
    CODE_SIGNALS,
    compute_code_signals,
    language_of,
)
from airflow_curation.core.faults import fault_point
from airflow_curation.core.filters import Rule, apply_rules, resolve_rules
from airflow_curation.core.integrity import verify_file
from airflow_curation.core.manifest import Manifest, ShardEntry, UnitEntry
from airflow_curation.core.schema import check_id_text
from airflow_curation.core.shards import _CountingSink
from airflow_curation.core.signals import SignalComputer
from airflow_curation.stages.base import Stage, UnitMapper, UnitResult, local_mapper
from airflow_curation.stages.engines.budget import DEFAULT_BASE_BYTES, MiB

DEFAULT_EXPANSION = 8.0

log = logging.getLogger(__name__)


@lru_cache(maxsize=8)
def _upstream(manifest_uri: str) -> dict[str, ShardEntry]:
    """The upstream manifest's shards by id, read once per process (Dask workers included)."""
    manifest = Manifest.read(manifest_uri)
    if manifest.status != "complete":
        raise ValueError(f"preprocess: upstream manifest {manifest_uri} is {manifest.status!r}, not complete")
    return {s.shard_id: s for s in manifest.shards}


class Preprocessor:
    """Signals + rules for a stream of batches; what the stage and ``curation preprocess FILE...`` share.

    :param preset: filter preset name(s), e.g. ``"gopher"`` or ``"gopher,c4"``; ``"none"`` for none.
    :param rules: extra rules ``{name, signal, min, max}``, applied after the preset's.
    :param signals: signal settings (``stop_words``, ``tokenizer``).
    :param code: compute code signals: ``True``, ``False`` or ``"auto"`` (when a rule reads one).
    :param code_language: one language for every row, or ``"auto"`` (from each row's ``source`` extension).
    """

    def __init__(self, preset: str | list[str] | None = "gopher", rules: list[dict] | None = None,
                 signals: dict | None = None, code: bool | str = "auto", code_language: str = "auto") -> None:
        self.rules: list[Rule] = resolve_rules(preset, rules or [])
        self.computer = SignalComputer(signals)
        if code == "auto":
            code = any(r.signal in CODE_SIGNALS for r in self.rules)
        self.code = bool(code)
        self.code_language = code_language

    @property
    def input_columns(self) -> list[str]:
        cols = ["id", "text"]
        if self.code and self.code_language == "auto":
            cols.append("source")
        return cols

    def process(self, batch: pa.RecordBatch | pa.Table) -> pa.Table:
        table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        texts = table.column("text")
        signals = self.computer.compute(texts)
        if self.code:
            if self.code_language == "auto":
                sources = table.column("source").to_pylist() if "source" in table.column_names else [None] * len(table)
                langs = [language_of(s) for s in sources]
            else:
                langs = self.code_language
            code = compute_code_signals(texts.to_pylist(), langs)
            for name in code.column_names:
                signals = signals.append_column(name, code.column(name))
        decisions = apply_rules(signals, self.rules)
        ids = table.column("id")
        if not pa.types.is_string(ids.type):
            ids = ids.cast(pa.string())
        out = pa.Table.from_arrays([ids] + signals.columns + decisions.columns,
                                   names=["id"] + signals.column_names + decisions.column_names)
        return out

    def run_file(self, in_uri: str, out_uri: str, batch_rows: int = 4096) -> tuple[RowAccounting, dict[str, Any]]:
        """Stream one Parquet file with ``id`` and ``text`` into ``out_uri`` (written atomically)."""
        accounting = RowAccounting()
        started = time.time()
        text_bytes = 0
        with storage.open_read(in_uri) as f:
            pf = pq.ParquetFile(f)
            check_id_text(pf.schema_arrow, in_uri)
            cols = [c for c in self.input_columns if c in pf.schema_arrow.names]
            with storage.atomic_open(out_uri) as out:
                sink = _CountingSink(out)
                writer = None
                try:
                    for batch in pf.iter_batches(batch_size=batch_rows, columns=cols):
                        text_bytes += _text_bytes(batch.column(batch.schema.get_field_index("text")))
                        result = self.process(batch)
                        _account(accounting, result)
                        if writer is None:
                            writer = pq.ParquetWriter(sink, result.schema, compression="zstd", write_statistics=True)
                        writer.write_table(result, row_group_size=max(1, batch_rows))
                    if writer is None:  # an empty file still gets its (empty) attrs file
                        empty = self.process(pa.table({"id": pa.array([], pa.string()),
                                                       "text": pa.array([], pa.string())}))
                        writer = pq.ParquetWriter(sink, empty.schema, compression="zstd")
                        writer.write_table(empty)
                finally:
                    if writer is not None:
                        writer.close()
        info = {"attrs_bytes": sink.tell(), "attrs_checksum": sink.checksum.hexdigest(), "text_bytes": text_bytes,
                "seconds": round(time.time() - started, 3),
                "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
        return accounting, info


def _text_bytes(col: pa.Array) -> int:
    buffers = col.buffers()
    return buffers[2].size if len(buffers) > 2 and buffers[2] is not None else 0


def _account(accounting: RowAccounting, result: pa.Table) -> None:
    kept = result.column("keep").to_numpy(zero_copy_only=False)
    accounting.keep(int(kept.sum()))
    for reason, n in Counter(r for r in result.column("drop_reason").to_pylist() if r is not None).items():
        accounting.drop(reason, n)


class PreprocessStage(Stage):
    """Settings (``config``):

    :param input_manifest: URI of the upstream (ingest) manifest; one unit per shard.
    :param preset: filter preset(s): ``gopher``, ``c4``, ``fineweb``, ``code``, comma-separated, or ``none``.
    :param rules: extra rules ``{name, signal, min, max}`` applied after the preset's.
    :param signals: signal settings: ``stop_words`` (list), ``tokenizer`` (``default`` or ``hf:<tokenizer.json>``).
    :param code: code signals: ``auto`` (when a rule reads one), ``true`` or ``false``.
    :param code_language: ``auto`` (by each row's ``source`` extension) or one language for all rows.
    :param batch_rows: rows per batch and per output row group.
    :param engine: ``dask`` (default) or ``local`` (in-process / a process pool of ``workers``).
    :param scheduler_address: run on this Dask cluster instead of a LocalCluster.
    :param workers: at most this many local workers (the memory plan may choose fewer).
    :param memory_expansion: a unit's peak memory per byte of its shard, for the worker plan; default:
        measured from this config's earlier checkpoints, else 8.
    """

    name = "preprocess"
    version = "1"
    RUNTIME_KEYS = Stage.RUNTIME_KEYS | {"engine", "memory_expansion", "batch_rows"}
    DEFAULTS: dict[str, Any] = {
        "preset": "gopher", "rules": [], "signals": {}, "code": "auto", "code_language": "auto",
        "batch_rows": 4096, "engine": "dask", "memory_expansion": None,
    }

    def __init__(self, lake, config, run_id) -> None:
        super().__init__(lake, config, run_id)
        if not self.config.get("input_manifest"):
            raise ValueError("preprocess: config needs input_manifest (the upstream manifest URI)")
        if self.config["engine"] not in ("dask", "local"):
            raise ValueError(f"preprocess: engine must be 'dask' or 'local', not {self.config['engine']!r}")
        self.preprocessor()  # validate preset, rules and signal settings before any work starts
        self._unit_bytes: dict[str, int] = {}

    def preprocessor(self) -> Preprocessor:
        c = self.config
        return Preprocessor(preset=c["preset"], rules=c["rules"], signals=c["signals"], code=c["code"],
                            code_language=c["code_language"])

    def default_mapper(self) -> UnitMapper:
        if self.config["engine"] == "local":
            return local_mapper(int(self.config.get("workers") or 1))
        from airflow_curation.stages.engines.dask import dask_mapper

        return dask_mapper(self.config.get("scheduler_address"), workers=self.config.get("workers"),
                           unit_bytes=lambda args: self._unit_bytes.get(args[1].unit_id, 0),
                           expansion=self.memory_expansion())

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
        # Workers need no sizes; 10,000 shards' worth must not travel with every unit.
        return {**self.__dict__, "_unit_bytes": {}}

    def plan(self) -> list[UnitEntry]:
        _upstream.cache_clear()  # a rerun in this process must see the manifest as it is now
        shards = _upstream(self.config["input_manifest"])
        units = []
        for shard_id in sorted(shards):
            s = shards[shard_id]
            self._unit_bytes[shard_id] = s.bytes
            units.append(UnitEntry(unit_id=shard_id, inputs=[s.uri], input_checksum=s.checksum, rows=s.rows))
        return units

    def process_unit(self, unit: UnitEntry) -> UnitResult:
        upstream = _upstream(self.config["input_manifest"]).get(unit.unit_id)
        if upstream is None or upstream.checksum != unit.input_checksum:  # a long-lived worker's stale cache
            _upstream.cache_clear()
            upstream = _upstream(self.config["input_manifest"])[unit.unit_id]
        verify_file(upstream.uri, upstream.checksum, f"shard {unit.unit_id}")
        attrs_uri = self.lake.attrs_uri(self.name, unit.unit_id, self.fingerprint)
        accounting, info = self.preprocessor().run_file(upstream.uri, attrs_uri, int(self.config["batch_rows"]))
        fault_point("preprocess.after_attrs_write")
        return UnitResult.attrs(self.name, upstream, attrs_uri, info["attrs_bytes"], info["attrs_checksum"],
                                accounting, info)
