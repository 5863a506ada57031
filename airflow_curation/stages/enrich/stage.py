"""Enrich: model outputs as additive columns, ``attrs/enrich-<name>/<shard>.parquet`` keyed by ``id``.

One unit per shard. The output has every row of the shard in shard order (the attrs contract); rows
not enriched carry nulls, ``enriched = false`` and a ``skip_reason``: ``not_kept`` (preprocess said
drop), ``duplicate`` (dedup said so) or ``empty`` (no text). Rows longer than ``max_input_tokens`` are
cut and flagged ``truncated``. Progress inside a shard is checkpointed every ``checkpoint_rows`` rows
(see ``parts.py``), so a killed job resumes mid-shard.

Two inputs: a lake (``input_manifest``, the usual stage chain) or plain Parquet files with ``id`` and
``text`` columns (``inputs`` + ``output_dir``, what ``curation enrich FILE...`` uses).
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_curation.core import storage
from airflow_curation.core.accounting import RowAccounting
from airflow_curation.core.faults import fault_point
from airflow_curation.core.fingerprint import checksum_url
from airflow_curation.core.integrity import verify_file
from airflow_curation.core.layout import safe_name
from airflow_curation.core.manifest import Manifest, ShardEntry, UnitEntry
from airflow_curation.core.schema import ID_COLUMN, TEXT_COLUMN, check_id_text
from airflow_curation.core.shards import read_shard, write_parquet
from airflow_curation.stages.base import Stage, UnitResult
from airflow_curation.stages.enrich.engines import EngineSpec
from airflow_curation.stages.enrich.executors import EXECUTORS, Chunk
from airflow_curation.stages.enrich.parts import PartStore
from airflow_curation.stages.enrich.tasks import COMMON_FIELDS, TASKS, make_task

log = logging.getLogger(__name__)

META_KEY = b"airflow_curation.enrich"
# Columns of upstream attrs that restrict enrichment to the rows the pipeline keeps.
KEEP_COLUMN, DUPLICATE_COLUMN = "keep", "is_duplicate"


class EnrichStage(Stage):
    """Settings (``config``):

    :param task: ``embed``, ``classify``, ``score`` or ``generate``.
    :param model: model folder (Hugging Face layout) or a hub id already in the local cache.
    :param name: names the output, ``attrs/enrich-<name>/``; default: the task.
    :param engine: ``vllm`` (default) or ``transformers`` (machines without vLLM, models it cannot serve).
    :param executor: ``ray`` (default: Ray Data with engine actors) or ``local`` (the engine in the job process).
    :param ray_address: an existing Ray cluster (``ray://host:10001`` or ``auto``); default: a local Ray.
    :param ray_num_cpus: CPUs of the local Ray (default: all).
    :param batch_size: rows per engine call / Ray Data batch.
    :param replicas: engine actors side by side (data parallel; Ray only).
    :param tensor_parallel_size: GPUs one vLLM engine spans (large models).
    :param gpus_per_replica: GPUs reserved per actor (0 on CPU; at least ``tensor_parallel_size`` on GPU).
    :param cpus_per_replica: CPUs reserved per actor.
    :param max_input_tokens: longer documents are cut to this many tokens and flagged ``truncated``.
    :param max_tokens: generation length cap. :param temperature: :param top_p: :param seed: sampling.
    :param prompt_template: generate: the prompt, with ``{text}`` where the document goes.
    :param structured_output: generate: constrain decoding to the instruction/response JSON schema (vLLM).
    :param max_field_chars: generate with ``structured_output``: longest instruction or response allowed.
    :param labels: classify/score: label names (default: the model's ``id2label``).
    :param score_label: score with a classifier: the label whose probability is the score (default: last).
    :param only_kept: enrich only rows that upstream ``keep`` / ``is_duplicate`` attrs keep (when present).
    :param checkpoint_rows: rows per within-shard checkpoint (part file).
    :param dtype: model dtype (``auto``, ``float32``...). :param max_model_len: context cap (vLLM).
    :param engine_kwargs: extra keyword arguments for ``vllm.LLM`` / ``from_pretrained``.
    :param output_dir: plain-file mode: where ``<file stem>.parquet`` results go.
    """

    name = "enrich"
    version = "1"
    RUNTIME_KEYS = Stage.RUNTIME_KEYS | {
        "executor", "ray_address", "ray_num_cpus", "ray_num_gpus", "batch_size", "replicas",
        "tensor_parallel_size", "gpus_per_replica", "cpus_per_replica", "checkpoint_rows", "engine_kwargs",
    }
    DEFAULTS: dict[str, Any] = {
        "task": None,
        "model": None,
        "name": None,
        "engine": "vllm",
        "executor": "ray",
        "ray_address": None,
        "ray_num_cpus": None,
        "ray_num_gpus": None,
        "batch_size": 64,
        "replicas": 1,
        "tensor_parallel_size": 1,
        "gpus_per_replica": 0,
        "cpus_per_replica": 1,
        "max_input_tokens": 512,
        "max_tokens": 256,
        "temperature": 0.0,
        "top_p": 1.0,
        "seed": 0,
        "prompt_template": None,
        "structured_output": False,
        "max_field_chars": None,
        "labels": None,
        "score_label": None,
        "only_kept": True,
        "checkpoint_rows": 1000,
        "dtype": "auto",
        "max_model_len": None,
        "engine_kwargs": {},
        "output_dir": None,
    }

    def __init__(self, lake, config, run_id) -> None:
        super().__init__(lake, config, run_id)
        c = self.config
        if c["task"] not in TASKS:
            raise ValueError(f"enrich: task must be one of {sorted(TASKS)}, not {c['task']!r}")
        if not c["model"]:
            raise ValueError("enrich: no model given (a model folder or a cached hub id)")
        if c["executor"] not in EXECUTORS:
            raise ValueError(f"enrich: executor must be one of {sorted(EXECUTORS)}, not {c['executor']!r}")
        if bool(c.get("input_manifest")) == bool(c.get("inputs")):
            raise ValueError("enrich: give either input_manifest (a lake) or inputs (plain Parquet files)")
        if c.get("inputs") and not c["output_dir"]:
            raise ValueError("enrich: plain-file inputs need output_dir")
        for key in ("batch_size", "replicas", "checkpoint_rows", "max_input_tokens", "max_tokens"):
            if int(c[key]) < 1:
                raise ValueError(f"enrich: {key} must be at least 1, not {c[key]!r}")
        safe_name(self.output_name, "enrich name")
        make_task(c)  # validates the task's own settings (prompt template...) before any work
        self._executor = None

    @property
    def output_name(self) -> str:
        return f"enrich-{self.config['name'] or self.config['task']}"

    @property
    def engine_spec(self) -> EngineSpec:
        c = self.config
        device = "auto" if float(c["gpus_per_replica"] or 0) > 0 else "cpu"
        return EngineSpec(engine=c["engine"], model=str(c["model"]), runner=make_task(c).runner,
                          dtype=c["dtype"], max_model_len=c["max_model_len"],
                          tensor_parallel_size=int(c["tensor_parallel_size"]), device=device,
                          seed=int(c["seed"] or 0), engine_kwargs=json.dumps(c["engine_kwargs"] or {},
                                                                             sort_keys=True))

    # -- planning ----------------------------------------------------------------------------------
    def _entries(self) -> dict[str, ShardEntry]:
        if getattr(self, "_entry_cache", None) is None:
            if self.config.get("input_manifest"):
                upstream = Manifest.read(self.config["input_manifest"])
                if upstream.status != "complete":
                    raise ValueError(f"enrich: upstream manifest {self.config['input_manifest']} is "
                                     f"{upstream.status}, not complete")
                self._entry_cache = {s.shard_id: s for s in upstream.shards}
            else:
                self._entry_cache = {}
                for f in self.config["inputs"]:
                    stem = os.path.basename(f.rstrip("/")).rsplit(".parquet", 1)[0]
                    safe_name(stem, "input file name")
                    if stem in self._entry_cache:
                        raise ValueError(f"enrich: two inputs are named {stem}.parquet; outputs would collide")
                    with storage.open_read(f) as fh:
                        pf = pq.ParquetFile(fh)
                        check_id_text(pf.schema_arrow, f)
                        rows = pf.metadata.num_rows
                    self._entry_cache[stem] = ShardEntry(shard_id=stem, uri=f, rows=rows, bytes=storage.size(f),
                                                         checksum=checksum_url(f))
        return self._entry_cache

    def _filter_attrs(self, entry: ShardEntry) -> list[str]:
        """Upstream attrs files holding ``keep`` / ``is_duplicate`` for this shard."""
        if not self.config["only_kept"]:
            return []
        found = []
        for stage, uri in sorted(entry.attrs.items()):
            if stage.startswith("enrich-"):
                continue
            with storage.open_read(uri) as f:
                names = pq.ParquetFile(f).schema_arrow.names
            if KEEP_COLUMN in names or DUPLICATE_COLUMN in names:
                found.append(uri)
        return found

    @staticmethod
    def _recorded_checksum(entry: ShardEntry, uri: str) -> str | None:
        """The checksum the manifest recorded for one of ``entry``'s attrs files (None in older manifests)."""
        return next((entry.attrs_checksums.get(st) for st, u in entry.attrs.items() if u == uri), None)

    def plan(self) -> list[UnitEntry]:
        units = []
        for shard_id, entry in self._entries().items():
            filters = self._filter_attrs(entry)
            checksum = entry.checksum + "".join(f"+{self._recorded_checksum(entry, u) or checksum_url(u)}" for u in filters)
            units.append(UnitEntry(unit_id=shard_id, inputs=[entry.uri, *filters], input_checksum=checksum,
                                   rows=entry.rows))
        return units

    # -- one shard ---------------------------------------------------------------------------------
    def output_uri(self, shard_id: str) -> str:
        if self.config.get("output_dir"):
            return storage.join(self.config["output_dir"], f"{shard_id}.parquet")
        return self.lake.attrs_uri(self.output_name, shard_id, self.fingerprint)

    def parts_dir(self, unit: UnitEntry) -> str:
        tag = f"{self.fingerprint}-{unit.input_checksum.split(':', 1)[-1][:16]}"
        base = self.config.get("output_dir") or self.lake.path("attrs", self.output_name)
        return storage.join(base, "_parts", unit.unit_id, tag)

    def _selection(self, entry: ShardEntry, table: pa.Table) -> list[str | None]:
        """Per row: None to enrich it, else the reason it is skipped."""
        n = table.num_rows
        reasons: list[str | None] = [None] * n
        ids = table.column(ID_COLUMN)
        tables = []
        for uri in self._filter_attrs(entry):
            verify_file(uri, self._recorded_checksum(entry, uri), f"attrs of shard {entry.shard_id}")
            attrs = read_shard(uri)
            if attrs.num_rows != n or not attrs.column(ID_COLUMN).equals(ids):
                raise ValueError(f"enrich: attrs {uri} do not match shard {entry.shard_id} row for row "
                                 f"(attrs must have the shard's ids in the shard's order)")
            tables.append(attrs)
        # Pipeline order: a row preprocess dropped is "not_kept" even if dedup also saw it as a duplicate.
        for col, drop_when, reason in ((KEEP_COLUMN, False, "not_kept"), (DUPLICATE_COLUMN, True, "duplicate")):
            for attrs in tables:
                if col in attrs.column_names:
                    for i, v in enumerate(attrs.column(col).to_pylist()):
                        if reasons[i] is None and v is not None and bool(v) == drop_when:
                            reasons[i] = reason
        texts = table.column(TEXT_COLUMN)
        empty = pc.fill_null(pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(texts)), 0), True).to_pylist()
        for i, e in enumerate(empty):
            if reasons[i] is None and e:
                reasons[i] = "empty"
        return reasons

    def _executor_for_run(self):
        if self._executor is None:
            self._executor = EXECUTORS[self.config["executor"]](self.config, self.engine_spec)
        return self._executor

    def _part_table(self, ids: list, reasons: list, chunk: Chunk, cols: dict[str, list]) -> pa.Table:
        task = make_task(self.config)
        fields = [*task.fields(), *COMMON_FIELDS]
        n = chunk.end - chunk.start
        rel = [p - chunk.start for p in chunk.positions]
        data: dict[str, Any] = {ID_COLUMN: ids[chunk.start:chunk.end],
                                "enriched": [False] * n, "skip_reason": reasons[chunk.start:chunk.end]}
        for r in rel:
            data["enriched"][r] = True
        for f in fields:
            full = [None] * n
            for r, v in zip(rel, cols.get(f.name, [])):
                full[r] = v
            data[f.name] = full
        schema = pa.schema([pa.field(ID_COLUMN, pa.string()), pa.field("enriched", pa.bool_()),
                            pa.field("skip_reason", pa.string()), *fields])
        return pa.table(data, schema=schema)

    def _finish_table(self, merged: pa.Table) -> pa.Table:
        """Embeddings as a fixed-size vector column once the width is known."""
        if "embedding" in merged.column_names:
            dims = {len(v) for v in merged.column("embedding").to_pylist() if v is not None}
            if len(dims) > 1:
                raise ValueError(f"enrich: embeddings of different sizes {sorted(dims)}")
            if dims:
                # A row not enriched holds ``dim`` null values rather than a null vector: pyarrow (25) cannot
                # read a null entry of a fixed-size list back from Parquet.
                dim = dims.pop()
                vectors = merged.column("embedding").to_pylist()
                flat = np.zeros((len(vectors), dim), dtype=np.float32)
                for i, v in enumerate(vectors):
                    if v is not None:
                        flat[i] = v
                missing = np.repeat(np.array([v is None for v in vectors], dtype=bool), dim)
                col = pa.FixedSizeListArray.from_arrays(pa.array(flat.ravel(), mask=missing), dim)
                merged = merged.set_column(merged.column_names.index("embedding"), "embedding", col)
        return merged

    def _meta(self, unit: UnitEntry) -> dict[str, str]:
        return {"fingerprint": self.fingerprint, "input_checksum": unit.input_checksum,
                "task": self.config["task"], "model": str(self.config["model"]), "engine": self.config["engine"]}

    def _finished_output(self, unit: UnitEntry, uri: str) -> pa.Table | None:
        """A final output of this very config and input (a job killed after the merge, before its checkpoint)."""
        if not storage.exists(uri):
            return None
        try:
            with storage.open_read(uri) as f:
                table = pq.read_table(f)
            meta = json.loads((table.schema.metadata or {}).get(META_KEY, b"{}"))
        except Exception:  # noqa: BLE001 - unreadable: recompute
            return None
        return table if meta == self._meta(unit) else None

    def process_unit(self, unit: UnitEntry) -> UnitResult:
        entry = self._entries()[unit.unit_id]
        out_uri = self.output_uri(unit.unit_id)
        parts = PartStore(self.parts_dir(unit))
        resumed_rows = computed = 0
        merged = self._finished_output(unit, out_uri)
        if merged is None:
            verify_file(entry.uri, entry.checksum, f"shard {unit.unit_id}")
            table = read_shard(entry.uri, columns=[ID_COLUMN, TEXT_COLUMN])
            n = table.num_rows
            reasons = self._selection(entry, table)
            ids = table.column(ID_COLUMN).to_pylist()
            texts = table.column(TEXT_COLUMN)
            covered = parts.resume(n)
            resumed_rows = covered
            step = int(self.config["checkpoint_rows"])
            chunks = []
            for start in range(covered, n, step):
                end = min(start + step, n)
                pos = [i for i in range(start, end) if reasons[i] is None]
                chunks.append(Chunk(start, end, pos, [texts[i].as_py() for i in pos]))
            executor = self._executor_for_run()
            for chunk, cols in executor.run_chunks(chunks):
                parts.write(chunk.start, chunk.end, self._part_table(ids, reasons, chunk, cols))
                fault_point("enrich.after_part")
                computed += len(chunk.positions)
            merged = parts.read_all() if n else self._part_table([], [], Chunk(0, 0, [], []), {})
            if merged.num_rows != n or merged.column(ID_COLUMN).to_pylist() != ids:
                raise RuntimeError(f"enrich: parts of {unit.unit_id} do not rebuild the shard's rows "
                                   f"({merged.num_rows} rows for {n})")
            merged = self._finish_table(merged)
            merged = merged.replace_schema_metadata({META_KEY: json.dumps(self._meta(unit)).encode()})
            nbytes, checksum = write_parquet(out_uri, merged, row_group_rows=4096)
        else:
            nbytes, checksum = storage.size(out_uri), checksum_url(out_uri)
        parts.clear()

        acc = RowAccounting()
        enriched = merged.column("enriched").to_pylist()
        skip = merged.column("skip_reason").to_pylist()
        valid = merged.column("valid").to_pylist() if "valid" in merged.column_names else None
        for i, was in enumerate(enriched):
            if not was:
                acc.drop(skip[i] or "not_enriched")
            elif valid is not None and not valid[i]:
                acc.drop("invalid_generation")
            else:
                acc.keep()
        truncated = sum(1 for v in merged.column("truncated").to_pylist() if v)
        return UnitResult.attrs(self.output_name, entry, out_uri, nbytes, checksum, acc,
                                {"rows_resumed": resumed_rows, "rows_computed": computed, "truncated": truncated})

    def finalize(self, manifest: Manifest) -> None:
        self.close()

    def close(self) -> None:
        if self._executor is not None:
            self._executor.close()
            self._executor = None

    def __getstate__(self):  # process pools pickle the stage: executors (engines, Ray) stay behind
        state = dict(self.__dict__)
        state["_executor"] = None
        return state
