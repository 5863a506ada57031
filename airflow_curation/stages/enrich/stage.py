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
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from airflow_curation.core import storage
from airflow_curation.core.accounting import RowAccounting
from airflow_curation.core.faults import fault_point
from airflow_curation.core.fingerprint import checksum_url
from airflow_curation.core.layout import safe_name
from airflow_curation.core.manifest import Manifest, ShardEntry, UnitEntry
from airflow_curation.core.schema import ENRICHED, ID, SKIP_REASON, TEXT, blank_texts
from airflow_curation.core.shards import write_parquet
from airflow_curation.stages.attrs import AttrsFile, AttrsStage
from airflow_curation.stages.enrich.executors import EXECUTORS, Chunk
from airflow_curation.stages.enrich.model_runtimes import TORCH_DTYPES, EngineSpec
from airflow_curation.stages.enrich.parts import PartStore
from airflow_curation.stages.enrich.resources import AUTO, check_settings, gpus_setting
from airflow_curation.stages.enrich.tasks import COMMON_FIELDS, TASKS, make_task
from airflow_curation.stages.kept import decision_attrs, skip_reasons
from airflow_curation.stages.mappers import ray as ray_cluster
from airflow_curation.stages.settings import Setting
from airflow_curation.stages.text import ShardText

log = logging.getLogger(__name__)

META_KEY = b"airflow_curation.enrich"


class EnrichStage(AttrsStage):
    """Classify, score, generate or embed documents with a model (vLLM or transformers).

    Runs the model over every kept row and writes its outputs as additive columns keyed by id:
    attrs/enrich-<name>/ in a lake, or DIR/<file>.parquet for plain Parquet files. Progress is checkpointed
    every checkpoint_rows rows; a rerun resumes. See docs/enrich.md.
    """

    name = "enrich"
    version = "1"
    UPSTREAM = ("pii", "dedup", "boilerplate", "preprocess", "ingest")
    OPTIONAL_WITHOUT = "model"
    SETTINGS = AttrsStage.SETTINGS.extend(
        Setting("task", str, None, "what the model does", choices=tuple(sorted(TASKS)), required=True),
        Setting(
            "model",
            str,
            None,
            "model folder (Hugging Face layout) or a hub id already in the local cache",
            required=True,
        ),
        Setting("name", str, None, "names the output, attrs/enrich-<name>/ (default: the task)"),
        Setting(
            "model_runtime",
            str,
            "vllm",
            "what runs the model: vllm, or transformers (machines without vLLM, models it cannot serve)",
            choices=("vllm", "transformers"),
        ),
        Setting(
            "mapper",
            str,
            "ray",
            "where the model runs: ray (Ray Data with model actors) or local (in the job process)",
            choices=tuple(sorted(EXECUTORS)),
            runtime=True,
        ),
        Setting(
            "ray_address",
            str,
            None,
            "an existing Ray cluster: ray://host:10001 (Ray Client) or host:6379 / auto (from a cluster node); "
            "default: $CURATION_RAY_ADDRESS, else a new local Ray",
            runtime=True,
        ),
        Setting(
            "ray_num_cpus",
            int,
            None,
            "CPUs of the new local Ray (default: all; not with an address)",
            runtime=True,
            minimum=0,
        ),
        Setting(
            "ray_num_gpus",
            int,
            None,
            "GPUs of the new local Ray (default: all; not with an address)",
            runtime=True,
            minimum=0,
        ),
        Setting("batch_size", int, 64, "rows per model call / Ray Data batch", runtime=True, minimum=1),
        Setting("replicas", int, 1, "model actors side by side (data parallel; Ray only)", runtime=True, minimum=1),
        Setting(
            "tensor_parallel_size",
            int,
            1,
            "GPUs one vLLM instance spans (a model too big for one GPU)",
            runtime=True,
            minimum=1,
        ),
        Setting(
            "gpus_per_replica",
            gpus_setting,
            AUTO,
            "GPUs reserved per replica: auto (tensor_parallel_size when the machine or Ray cluster has GPUs, "
            "else 0), 0 (CPU), tensor_parallel_size, or a fraction of one GPU",
            runtime=True,
        ),
        Setting("cpus_per_replica", float, 1, "CPUs reserved per actor", runtime=True),
        Setting(
            "max_input_tokens",
            int,
            512,
            "longer documents are cut to this many tokens and flagged truncated",
            minimum=1,
        ),
        Setting("max_tokens", int, 256, "generate: max new tokens", minimum=1),
        Setting("temperature", float, 0.0, "generate: sampling temperature", minimum=0),
        Setting("top_p", float, 1.0, "generate: nucleus sampling", minimum=0, maximum=1),
        Setting("seed", int, 0, "sampling seed"),
        Setting(
            "prompt_template",
            str,
            None,
            "generate: the prompt, with {text} where the document goes "
            "(on the command line, @FILE reads it from a file)",
        ),
        Setting(
            "structured_output", bool, False, "generate: constrain decoding to the instruction/response JSON (vLLM)"
        ),
        Setting(
            "max_field_chars", int, None, "generate with structured_output: longest instruction or response", minimum=1
        ),
        Setting("labels", list, None, "classify/score: label names, comma-separated (default: the model's id2label)"),
        Setting(
            "score_label",
            str,
            None,
            "score with a classifier: the label whose probability is the score (default: the last)",
        ),
        Setting(
            "only_kept",
            bool,
            True,
            "enrich only the rows that upstream keep / is_duplicate attrs keep",
            off_flag="--all-rows",
        ),
        Setting(
            "checkpoint_rows", int, 1000, "rows per checkpoint inside a shard (part file)", runtime=True, minimum=1
        ),
        Setting(
            "dtype",
            str,
            "auto",
            "model dtype for either runtime; auto: vLLM's choice (bfloat16/float16, even for a float32 checkpoint), "
            "transformers' float32 on CPU and bfloat16 on GPU",
            choices=("auto", *TORCH_DTYPES),
        ),
        Setting("max_model_len", int, None, "context cap (vLLM)", minimum=1),
        Setting(
            "model_runtime_kwargs",
            dict,
            {},
            "JSON of extra keyword arguments for vllm.LLM / from_pretrained",
            runtime=True,
        ),
        renamed={"engine": "model_runtime", "executor": "mapper", "engine_kwargs": "model_runtime_kwargs"},
    )

    @classmethod
    def check_config(cls, config: dict[str, Any]) -> None:
        super().check_config(config)
        check_settings(config)  # GPU and replica settings that cannot work
        safe_name(f"enrich-{config['name'] or config['task']}", "enrich name")
        make_task(config)  # the task's own settings (prompt template...)

    def __init__(self, lake, config, run_id) -> None:
        super().__init__(lake, config, run_id)
        c = self.config
        if c["mapper"] == "ray":  # (the job's Ray: the submitting side may see another RAY_ADDRESS)
            ray_cluster.check_sizes(c["ray_address"], c["ray_num_cpus"], c["ray_num_gpus"])
        self._executor = None
        self._placement_error: ValueError | None = None

    @property
    def output_name(self) -> str:
        return f"enrich-{self.config['name'] or self.config['task']}"

    @property
    def attrs_name(self) -> str:
        return self.output_name

    @property
    def engine_spec(self) -> EngineSpec:
        """The engine's spec; with ``gpus_per_replica: auto`` the mapper sets its device once the replicas are
        placed (:mod:`.resources`)."""
        c = self.config
        gpus = c["gpus_per_replica"]
        return EngineSpec(
            engine=c["model_runtime"],
            model=str(c["model"]),
            runner=make_task(c).runner,
            dtype=c["dtype"],
            max_model_len=c["max_model_len"],
            tensor_parallel_size=int(c["tensor_parallel_size"]),
            device="auto" if gpus == AUTO else ("cuda" if gpus > 0 else "cpu"),
            seed=int(c["seed"] or 0),
            engine_kwargs=json.dumps(c["model_runtime_kwargs"] or {}, sort_keys=True),
        )

    # -- planning ----------------------------------------------------------------------------------
    def reads_attrs(self, entry: ShardEntry) -> list[str]:
        """Upstream attrs holding ``keep`` / ``is_duplicate`` for this shard (not other enrich outputs)."""
        if not self.config["only_kept"]:
            return []
        return decision_attrs(entry, skip=lambda key: key.startswith("enrich-"))

    # -- one shard ---------------------------------------------------------------------------------
    def parts_dir(self, unit: UnitEntry) -> str:
        tag = f"{self.fingerprint}-{unit.input_checksum.split(':', 1)[-1][:16]}"
        # in the lake (plain files: the output's _curation/ bookkeeping), not beside a user's results
        return storage.join(self.lake.path("attrs", self.output_name), "_parts", unit.unit_id, tag)

    @staticmethod
    def _chunks(text: ShardText, reasons: list[str | None], covered: int, step: int) -> Iterator[Chunk]:
        """The rows from ``covered`` on in chunks of ``step``, read from ``text`` a chunk at a time (a shard's
        texts, or a user's file, are never held whole: as Python strings they took ~2x the shard's text). A
        row skipped upstream keeps its ``reasons`` entry; an empty one is marked ``empty`` here."""
        pending: list[pa.Array] = []
        have, row, start = 0, 0, covered
        batches = text.batches([TEXT], batch_rows=step)
        while True:
            batch = next(batches, None)
            if batch is not None:
                col = batch.column(TEXT).combine_chunks()
                skip = min(max(covered - row, 0), len(col))  # rows of parts already written
                row += len(col)
                if skip < len(col):
                    pending.append(col.slice(skip))
                    have += len(col) - skip
            while have >= step or (batch is None and have):
                whole = pa.concat_arrays(pending) if len(pending) > 1 else pending[0]
                texts, rest = whole.slice(0, step), whole.slice(step)
                pending, have = ([rest] if len(rest) else []), len(rest)
                end = start + len(texts)
                for i, e in enumerate(blank_texts(texts).to_pylist(), start):
                    if e and reasons[i] is None:
                        reasons[i] = "empty"
                pos = [i for i in range(start, end) if reasons[i] is None]
                yield Chunk(start, end, pos, [texts[i - start].as_py() for i in pos])
                start = end
            if batch is None:
                return

    def _executor_for_run(self):
        if self._executor is None:
            if self._placement_error is not None:  # the cluster cannot hold the replicas: every shard fails at once
                raise self._placement_error
            try:
                self._executor = EXECUTORS[self.config["mapper"]](self.config, self.engine_spec)
            except ValueError as e:
                self._placement_error = e
                raise
        return self._executor

    def _part_table(self, ids: list, reasons: list, chunk: Chunk, cols: dict[str, list]) -> pa.Table:
        task = make_task(self.config)
        fields = [*task.fields(), *COMMON_FIELDS]
        n = chunk.end - chunk.start
        rel = [p - chunk.start for p in chunk.positions]
        data: dict[str, Any] = {
            ID: ids[chunk.start : chunk.end],
            ENRICHED: [False] * n,
            SKIP_REASON: reasons[chunk.start : chunk.end],
        }
        for r in rel:
            data[ENRICHED][r] = True
        for f in fields:
            full = [None] * n
            for r, v in zip(rel, cols.get(f.name, [])):
                full[r] = v
            data[f.name] = full
        schema = pa.schema(
            [pa.field(ID, pa.string()), pa.field(ENRICHED, pa.bool_()), pa.field(SKIP_REASON, pa.string()), *fields]
        )
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
        return {
            "fingerprint": self.fingerprint,
            "input_checksum": unit.input_checksum,
            "task": self.config["task"],
            "model": str(self.config["model"]),
            "model_runtime": self.config["model_runtime"],
        }

    def _finished_output(self, unit: UnitEntry, uri: str) -> pa.Table | None:
        """A final output of this very config and input (a job killed after the merge, before its checkpoint)."""
        if not storage.exists(uri):
            return None
        try:
            table = storage.read_parquet(uri)
            meta = json.loads((table.schema.metadata or {}).get(META_KEY, b"{}"))
        except Exception:  # noqa: BLE001 - unreadable: recompute
            return None
        return table if meta == self._meta(unit) else None

    def write_unit(self, unit: UnitEntry, entry: ShardEntry, out_uri: str) -> AttrsFile:
        """The shard's rows in chunks of ``checkpoint_rows``, each written as a part file as soon as the model
        has done it (a killed job resumes after the last part), then merged into the attrs file."""
        parts = PartStore(self.parts_dir(unit))
        resumed_rows = computed = 0
        merged = self._finished_output(unit, out_uri)
        if merged is None:
            text = ShardText(entry.uri, self.text_uri(unit, entry), self.user_files)
            id_col = text.read([ID]).column(ID)  # the ids whole; the texts a chunk at a time (_chunks)
            if self.user_files:  # a user's bad row fails the unit before any model work, not after hours of it
                for _ in text.batches([TEXT], batch_rows=int(self.config["checkpoint_rows"])):
                    pass
            n = len(id_col)
            reasons: list[str | None] = skip_reasons(entry.shard_id, id_col, self.read_attrs_uris(unit, entry)).tolist()
            ids = id_col.to_pylist()
            covered = parts.resume(n)
            resumed_rows = covered
            chunks = self._chunks(text, reasons, covered, int(self.config["checkpoint_rows"]))
            executor = self._executor_for_run()
            for chunk, cols in executor.run_chunks(chunks):
                parts.write(chunk.start, chunk.end, self._part_table(ids, reasons, chunk, cols))
                fault_point("enrich.after_part")
                computed += len(chunk.positions)
            merged = parts.read_all() if n else self._part_table([], [], Chunk(0, 0, [], []), {})
            if merged.num_rows != n or merged.column(ID).to_pylist() != ids:
                raise RuntimeError(
                    f"enrich: parts of {unit.unit_id} do not rebuild the shard's rows ({merged.num_rows} rows for {n})"
                )
            merged = self._finish_table(merged)
            merged = merged.replace_schema_metadata({META_KEY: json.dumps(self._meta(unit)).encode()})
            nbytes, checksum = write_parquet(out_uri, merged, row_group_rows=4096)
        else:
            nbytes, checksum = storage.size(out_uri), checksum_url(out_uri)
        parts.clear()

        acc = RowAccounting()
        enriched = merged.column(ENRICHED).to_pylist()
        skip = merged.column(SKIP_REASON).to_pylist()
        valid = merged.column("valid").to_pylist() if "valid" in merged.column_names else None
        for i, was in enumerate(enriched):
            if not was:
                acc.drop(skip[i] or "not_enriched")
            elif valid is not None and not valid[i]:
                acc.drop("invalid_generation")
            else:
                acc.keep()
        truncated = sum(1 for v in merged.column("truncated").to_pylist() if v)
        extra = {"rows_resumed": resumed_rows, "rows_computed": computed, "truncated": truncated}
        # The columns of the table just written (or just read back, finished): the entry records them with no
        # footer read of the file (AttrsStage.process_unit reads it back only when a writer gives none).
        return AttrsFile(nbytes, checksum, acc, extra, merged.column_names)

    def collect(self, manifest: Manifest) -> None:
        super().collect(manifest)  # plain files: their ids unique
        self.close()

    def close(self) -> None:
        if self._executor is not None:
            self._executor.close()
            self._executor = None

    def __getstate__(self):  # process pools pickle the stage: executors (engines, Ray) stay behind
        state = dict(self.__dict__)
        state["_executor"] = None
        return state
