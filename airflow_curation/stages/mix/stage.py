"""Mix: the curated rows of one or more manifests sampled to target proportions by a key.

Two phases:

1. the tally (once per run, planned on the stage's workers; each unit's kept in ``mix/_tally/`` for reruns):
   every unit's key, size (tokens or 1) and hash bin, summed over all inputs into the mass available per
   key and, for the targeted keys, per hash bin; from it each key's rate (``target x total / available``),
   cut into whole epochs and a hash threshold for the fraction (:mod:`.targets`). Reads only the key, size
   and keep columns. The key plans are kept in ``mix/<fingerprint>/plans/<inputs key>.json``: one task of
   an array computes them under a lease, the others read that file and plan their own block only;
2. per shard (checkpointed units, :class:`AttrsStage`): each row's epochs from ``hash(seed, id)``, written to
   ``attrs/mix/<fingerprint>/<shard>.parquet`` (``id``, ``mix_key``, ``mix_epochs``, ``mix_tokens`` in token
   mode, ``keep``/``drop_reason``); no shard is rewritten. ``collect`` writes the mixture manifest (per key:
   target, available, selected, epochs, achieved share; per input: what came from it) into the run's manifest
   (``config["mixture"]``) and ``mix/<fingerprint>/mixture.json``.

A row's decision depends on its id, the seed and its key's plan only: the same rows are selected whatever the
shard order, grouping or number of workers. See docs/mix.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import math
from collections import defaultdict
from dataclasses import asdict, replace
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_curation.core import storage
from airflow_curation.core.accounting import RowAccounting
from airflow_curation.core.arrays import from_numpy, one_chunk, to_numpy
from airflow_curation.core.fingerprint import canonical_json, config_fingerprint
from airflow_curation.core.integrity import handed_rows
from airflow_curation.core.lease import Lease
from airflow_curation.core.manifest import Manifest, ManifestHead, ShardEntry, UnitEntry, group_range
from airflow_curation.core.schema import DROP_REASON, ID, KEEP, SOURCE, TEXT, check_id_text
from airflow_curation.core.shards import _CountingSink, attrs_columns, parquet_writer, read_shard
from airflow_curation.stages.attrs import AttrsFile, AttrsStage, _manifest_entries, keep_accounting
from airflow_curation.stages.base import Stage, StageFailed
from airflow_curation.stages.kept import decision_attrs, skip_reasons
from airflow_curation.stages.mix import targets as mt
from airflow_curation.stages.settings import Setting
from airflow_curation.stages.text import ShardText

log = logging.getLogger(__name__)

MIX_KEY, MIX_EPOCHS, MIX_TOKENS = "mix_key", "mix_epochs", "mix_tokens"
DOWNSAMPLED, UNTARGETED = "downsampled", "untargeted"
NULL_KEY = "(null)"
# Keys that are not columns: the input a row came from, and the first folder of its source file.
INPUT_KEY, SOURCE_DIR_KEY = "input", "source_dir"
MIXTURE_KEY = "mixture"  # the manifest's config entry


def _unit_tally(stage: "MixStage", unit: UnitEntry) -> tuple[list[str], np.ndarray, list[str], np.ndarray]:
    """A unit's tally, from its file when it was counted from the same input, else counted and kept (atomic):
    a rerun reads the tallies instead of the shards' key columns again."""
    uri = storage.join(stage.tally_dir, f"{unit.unit_id}.npz")
    if storage.exists(uri):
        with np.load(io.BytesIO(storage.read_bytes(uri)), allow_pickle=False) as f:
            if str(f["input_checksum"]) == unit.input_checksum:
                return list(f["keys"]), f["amounts"], list(f["hist_keys"]), f["hist"]
    keys, amounts, hist_keys, hist = stage.unit_tally(unit)
    buf = io.BytesIO()
    np.savez_compressed(
        buf,
        input_checksum=np.array(unit.input_checksum),
        keys=np.array(keys, dtype=str),
        amounts=amounts,
        hist_keys=np.array(hist_keys, dtype=str),
        hist=hist,
    )
    storage.write_bytes(uri, buf.getvalue())
    return keys, amounts, hist_keys, hist


class MixStage(AttrsStage):
    """Sample the curated rows to target proportions by a key, in tokens or documents, from a seed.

    Key: a shard column (source, lang...), an attrs column as STAGE.COLUMN (quality.quality_score with
    --key-bins 0.5,0.8 for buckets), input (which input manifest) or source_dir (the source file's first
    folder). Targets: KEY=PROPORTION,... summing to 1. Each row gets whole epochs plus one more when
    hash(seed, id) falls below its key's threshold; keys are down- or up-sampled to reach the targets at the
    mixture's size (--total; default: the largest without up-sampling). Writes attrs/mix/ per shard (id,
    mix_key, mix_epochs, keep, drop_reason; checkpointed), and the mixture manifest (available, selected,
    epochs and achieved share per key, per input) in the run's manifest. See docs/mix.md.
    """

    name = "mix"
    version = "1"
    INPUTS = "manifest"  # lake manifests only: the tally and the input key need them
    UPSTREAM = ("decontaminate", "quality", "dedup", "boilerplate", "preprocess", "ingest")
    OPTIONAL_WITHOUT = "targets"
    STREAMS = False  # the rates need the whole input's tally first
    FUNNEL_LABEL = "mixed"
    SETTINGS = AttrsStage.SETTINGS.extend(
        Setting("targets", mt.parse_targets, {}, "target proportions: KEY=PROPORTION[,...] or JSON, summing to 1"),
        Setting("key", str, SOURCE_DIR_KEY, "what the targets are keyed by: a column, STAGE.COLUMN, input, source_dir"),
        Setting("key_bins", list, None, "numeric key: cut at these edges into buckets (<a, a-b, >=b)"),
        Setting("unit", str, "documents", "proportions of documents or of tokens", choices=("documents", "tokens")),
        Setting("token_column", str, None, "tokens per row: a column or STAGE.COLUMN (e.g. tokenize.token_count)"),
        Setting("chars_per_token", float, None, "or a declared estimate: tokens = ceil(characters / this)"),
        Setting("total", int, None, "the mixture's size in its unit (default: largest without up-sampling)", minimum=1),
        Setting("max_epochs", float, None, "refuse a mixture that repeats a key more than this", minimum=0),
        Setting("seed", int, 0, "the sampling seed"),
        Setting(
            "tolerance",
            float,
            0.01,
            "declared tolerance of each key's achieved share (validate checks it)",
            minimum=0,
            maximum=1,
        ),
        Setting("only_kept", bool, True, "mix only the rows upstream keep attrs keep", off_flag="--all-rows"),
        Setting("manifests", list, None, "more input manifests (other datasets or snapshots) mixed with the first"),
    )

    @classmethod
    def check_config(cls, config: dict[str, Any]) -> None:
        super().check_config(config)
        c = config
        if not c["targets"]:
            raise ValueError("mix: no targets given (KEY=PROPORTION,...)")
        mt.check_sum(c["targets"])
        if c["unit"] == "tokens" and not (c["token_column"] or c["chars_per_token"]):
            raise ValueError("mix: unit=tokens needs token_column (e.g. tokenize.token_count) or chars_per_token")
        if c["chars_per_token"] is not None and c["chars_per_token"] <= 0:
            raise ValueError(f"mix: chars_per_token must be positive, not {c['chars_per_token']}")
        if c.get("inputs"):
            raise ValueError("mix: reads lake manifests (input_manifest, manifests), not plain files")

    def __init__(self, lake, config, run_id) -> None:
        super().__init__(lake, config, run_id)
        c = self.config
        if c["key_bins"]:
            c["key_bins"] = sorted(float(e) for e in c["key_bins"])

    @property
    def fingerprint(self) -> str:
        # Which inputs are mixed is what is produced: the extra manifests enter it (the first, as every attrs
        # stage's, through the units' input checksums).
        base = super().fingerprint
        return config_fingerprint(self.name, {"settings": base, "inputs": self.input_uris}, self.version)

    # -- inputs --------------------------------------------------------------------------------------
    @property
    def input_uris(self) -> list[str]:
        return [self.config["input_manifest"], *(self.config.get("manifests") or [])]

    @cached_property
    def input_labels(self) -> list[str]:
        """What the ``input`` key calls each input: its dataset, with ``@snapshot`` where two share one."""
        lakes = [ManifestHead.read(u).lake for u in self.input_uris]
        names = [lk["dataset"] for lk in lakes]
        return [
            f"{lk['dataset']}@{lk.get('snapshot') or '-'}" if names.count(lk["dataset"]) > 1 else lk["dataset"]
            for lk in lakes
        ]

    def entries(self) -> dict[str, ShardEntry]:
        """The first input's shards under their own ids; another input's as ``in<k>-<shard id>``. In a group's
        plan (:meth:`plan_group`) only that block of them (the inputs' shards in order), read from its pages."""
        group = getattr(self, "_group", None)
        if group:
            return self._block_entries(group)
        out = dict(_manifest_entries(self.input_uris[0], None))
        for k, uri in enumerate(self.input_uris[1:], 1):
            for sid, e in _manifest_entries(uri, None).items():
                out[f"in{k}-{sid}"] = replace(e, shard_id=f"in{k}-{sid}")
        return out

    def _block_entries(self, group: tuple[int, int]) -> dict[str, ShardEntry]:
        """Block ``group`` of the inputs' shards taken in order, read from the pages that hold it (per process)."""
        cached = getattr(self, "_block", None)
        if cached is not None and cached[0] == group:
            return cached[1]
        heads = [ManifestHead.read(u) for u in self.input_uris]
        for h in heads:
            if h.status != "complete":
                raise ValueError(f"upstream manifest {h.uri} is {h.status_text}, not complete")
        block = group_range(sum(h.shard_count for h in heads), *group)
        out: dict[str, ShardEntry] = {}
        offset = 0
        for k, h in enumerate(heads):
            lo, hi = max(block.start, offset), min(block.stop, offset + h.shard_count)
            for d in h.shard_dicts_at(range(lo - offset, hi - offset)) if lo < hi else []:
                e = ShardEntry(**d)
                e = replace(e, shard_id=f"in{k}-{e.shard_id}") if k else e
                out[e.shard_id] = e
            offset += h.shard_count
        self._block = (group, out)
        return out

    def input_of(self, unit_id: str) -> int:
        if unit_id.startswith("in") and "-" in unit_id:
            k = unit_id[2:].split("-", 1)[0]
            if k.isdigit() and len(self.input_uris) > int(k):
                return int(k)
        return 0

    def _refs(self) -> list[str]:
        c = self.config
        return [r for r in (c["key"], c["token_column"] if c["unit"] == "tokens" else None) if r]

    def reads_attrs(self, entry: ShardEntry) -> list[str]:
        found = decision_attrs(entry, skip=lambda k: k == self.attrs_name) if self.config["only_kept"] else []
        for ref in self._refs():
            stage = ref.split(".", 1)[0]
            if "." in ref and stage in entry.attrs and stage not in found:
                found.append(stage)
        return found

    # -- phase 1: the tally --------------------------------------------------------------------------
    def plan(self) -> list[UnitEntry]:
        """Every unit, and the key plans: read from the plan file when one was left for these inputs, else
        from the whole tally (under the plan lease in a task of an array) and left for the other tasks."""
        return self._whole_plan(lock=self.shard_group is not None and self.shard_group[1] > 1)

    def _whole_plan(self, lock: bool) -> list[UnitEntry]:
        units = self._plan(None)
        uri = self._plan_uri()
        if not (uri and self._load_plan(uri)):
            with self._plan_lease() if lock else contextlib.nullcontext():
                if not (uri and self._load_plan(uri)):  # else another task made it while this one waited
                    self._tally(units)
                    if uri and self._recorded(units):
                        self._write_plan(uri)
        return self._marked(units)

    def plan_group(self, index: int, count: int) -> list[UnitEntry]:
        """Group ``index`` of ``count`` (one task of an array): its block of units from the inputs' pages, and
        the key plans from the plan file (one small read: no other unit's tally). The first task without it
        takes ``_locks/mix.plan.lease`` (waiting while another holder lives, as dedup's global phase does),
        and, unless the holder before it left the file, sums the whole input's tallies once and leaves it.
        Before the lease, a task tallies its own block (each unit's tally is kept in a file), so the holder
        reads the tallies of the tasks started and counts only the rest: it counted every shard itself, the
        other tasks waiting. Inputs whose manifests have no page checksums (format 1) slice the whole plan."""
        self._wait_for_upstream((index, count))  # the plan file is named by the complete inputs' pages
        uri = self._plan_uri()
        if uri is None:
            return Stage.plan_group(self, index, count)
        if not self._load_plan(uri):
            for _ in self.default_mapper()(_unit_tally, ((self, u) for u in self._plan((index, count)))):
                pass  # kept in the tally files, for the holder of the lease
            with self._plan_lease():
                if not self._load_plan(uri):
                    units = self._whole_plan(lock=False)
                    block = group_range(len(units), index, count)
                    return units[block.start : block.stop]
        self._block = None
        return self._marked(self._plan((index, count)))

    def _marked(self, units: list[UnitEntry]) -> list[UnitEntry]:
        # A unit's decisions depend on the whole input's tally: another tally (a changed shard elsewhere) that
        # moves a key's plan redoes the units; one that does not leaves them done.
        digest = canonical_json({k: [p.whole, p.threshold] for k, p in self.plans.items()})
        mark = "+mix:" + config_fingerprint("mix-plan", {"plans": digest}, self.version)
        for u in units:
            u.input_checksum += mark
        return units

    # -- the plan file: the whole tally's result, once per run ------------------------------------------
    def _plan_lease(self) -> Lease:
        return Lease(self.lake.path("_locks", "mix.plan.lease"), f"mix's plan on {self.lake.base}", math.inf)

    def _plan_uri(self) -> str | None:
        """Where the key plans of these inputs are kept, named by the fingerprint and every input manifest's
        shard pages (their checksums, in the heads: what each unit's input checksum is made of). None where a
        manifest has no page checksums."""
        ident = [self.fingerprint]
        for uri in self.input_uris:
            meta = ManifestHead.read(uri).data["index"].get("shards") or {}
            if "checksums" not in meta:
                return None
            ident += [str(meta["count"]), *meta["checksums"]]
        key = hashlib.sha256("|".join(ident).encode()).hexdigest()[:24]
        return self.lake.path("mix", self.fingerprint, "plans", f"{key}.json")

    def _recorded(self, units: list[UnitEntry]) -> bool:
        """Whether every unit's input checksum follows from the pages alone (each attrs checksum it reads was
        recorded in the manifest, none hashed from its file): only then may the pages name the plan."""
        entries = self.entries()
        for u in units:
            e = entries[u.unit_id]
            if not all(e.attrs_checksums.get(k) for k in self.unit_attrs(u, e)):
                return False
        return True

    def _load_plan(self, uri: str) -> bool:
        try:
            doc = storage.read_json(uri)
        except FileNotFoundError:
            return False
        self.available = dict(doc["available"])
        self.plans = {k: mt.KeyPlan(**p) for k, p in doc["plans"].items()}
        log.info("mix: key plans read from %s", uri)
        return True

    def _write_plan(self, uri: str) -> None:
        storage.write_json(uri, {"available": self.available, "plans": {k: asdict(p) for k, p in self.plans.items()}})

    @property
    def tally_dir(self) -> str:
        """Where each unit's tally is kept: named by what a tally depends on besides its unit's input (the
        targets' proportions and the total do not enter it: a retargeted mix reuses every tally)."""
        c = self.config
        deps = {k: c[k] for k in ("key", "key_bins", "unit", "token_column", "chars_per_token", "seed", "only_kept")}
        deps["targeted"] = sorted(c["targets"])
        return self.lake.path("mix", "_tally", config_fingerprint("mix-tally", deps, self.version))

    def _tally(self, units: list[UnitEntry]) -> None:
        """Sum the units' tallies (each read from its file when its input is unchanged, else counted on the
        stage's workers and kept), then plan every key."""
        c = self.config
        available: dict[str, int] = defaultdict(int)
        hists: dict[str, np.ndarray] = {}
        for keys, amounts, hist_keys, hist in self.default_mapper()(_unit_tally, ((self, u) for u in units)):
            for key, amount in zip(keys, amounts):
                available[key] += int(amount)
            for key, h in zip(hist_keys, hist):
                hists[key] = hists[key] + h if key in hists else h.astype(np.int64)
        self.available = dict(sorted(available.items()))
        self.plans = mt.plan_keys(c["targets"], self.available, hists, c["total"], c["max_epochs"])
        log.info(
            "mix: %s available by %s; plan %s",
            self.available,
            c["key"],
            {k: (round(p.rate, 4), p.whole, p.threshold) for k, p in self.plans.items()},
        )

    def unit_tally(self, unit: UnitEntry) -> tuple[list[str], np.ndarray, list[str], np.ndarray]:
        """One unit's mixed rows: the mass per key, and per targeted key per hash bin."""
        ids, keys, weights, reasons = self.read_rows(unit, self.entry(unit))
        live = _live(reasons)
        names, inverse = _key_index(keys, live)
        ww = weights[live]
        amounts = np.bincount(inverse, weights=ww, minlength=len(names)).round().astype(np.int64)
        bins = mt.doc_bins(int(self.config["seed"]), ids.take(from_numpy(live)))
        targeted = [j for j, k in enumerate(names) if k in self.config["targets"]]
        hist = np.zeros((len(targeted), mt.BINS), dtype=np.int64)
        for row, j in enumerate(targeted):
            at = inverse == j
            hist[row] = np.bincount(bins[at], weights=ww[at], minlength=mt.BINS).round().astype(np.int64)
        return [str(k) for k in names], amounts, [str(names[j]) for j in targeted], hist

    # -- one shard's rows ----------------------------------------------------------------------------
    def read_rows(self, unit: UnitEntry, entry: ShardEntry) -> tuple[pa.Array, pa.Array, np.ndarray, np.ndarray]:
        """The shard's ids, each row's key (text), size in the mixture's unit, and why it is skipped (None:
        mixed). Ids and keys stay Arrow arrays: a Python string a row cost more than the rest of the stage."""
        with storage.open_read(entry.uri) as f:
            schema = pq.ParquetFile(f).schema_arrow
        check_id_text(schema, entry.uri)
        ids_col = read_shard(entry.uri, [ID]).column(ID)
        ids = one_chunk(ids_col.cast(pa.string()))
        n = len(ids)
        planned = self.unit_attrs(unit, entry)
        decisions = [planned[k] for k in self._decision_keys(entry) if k in planned]
        reasons = skip_reasons(unit.unit_id, ids_col, decisions) if decisions else np.full(n, None, object)
        c = self.config
        keys = self._keys(unit, entry, schema, ids_col)
        if c["unit"] == "documents":
            weights = np.ones(n, dtype=np.int64)
        elif c["token_column"]:
            col = self._column(unit, entry, schema, ids_col, c["token_column"], "token_column")
            if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
                raise mt.MixError(f"mix: token_column {c['token_column']!r} is {col.type}, not a number")
            live = np.zeros(n, dtype=bool)
            live[_live(reasons)] = True
            nulls = np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool) & live
            if nulls.any():
                raise mt.MixError(
                    f"mix: token_column {c['token_column']!r} is null for {int(nulls.sum())} mixed rows of shard "
                    f"{unit.unit_id} (e.g. id {ids[int(np.flatnonzero(nulls)[0])].as_py()!r})"
                )
            weights = np.asarray(pc.fill_null(col, 0).to_numpy(zero_copy_only=False)).astype(np.int64)
        else:
            text = next(iter(ShardText(entry.uri, self.text_uri(unit, entry)).batches([TEXT])), None)
            chars = pc.fill_null(pc.utf8_length(text.column(TEXT)), 0).to_numpy(zero_copy_only=False)
            weights = np.ceil(np.asarray(chars, dtype=np.float64) / float(c["chars_per_token"])).astype(np.int64)
        return ids, keys, weights, reasons

    def _decision_keys(self, entry: ShardEntry) -> list[str]:
        return decision_attrs(entry, skip=lambda k: k == self.attrs_name) if self.config["only_kept"] else []

    def _keys(self, unit: UnitEntry, entry: ShardEntry, schema: pa.Schema, ids: pa.ChunkedArray) -> pa.Array:
        c = self.config
        key, n = c["key"], len(ids)
        if key == INPUT_KEY and key not in schema.names:
            return pc.fill_null(pa.nulls(n, pa.string()), self.input_labels[self.input_of(unit.unit_id)])
        if key == SOURCE_DIR_KEY and key not in schema.names:
            if SOURCE not in schema.names:
                return pc.fill_null(pa.nulls(n, pa.string()), ".")
            parts = pc.split_pattern(read_shard(entry.uri, [SOURCE]).column(SOURCE), "/", max_splits=1)
            col = pc.if_else(pc.greater(pc.list_value_length(parts), 1), pc.list_element(parts, 0), ".")
        else:
            col = self._column(unit, entry, schema, ids, key, "key")
        if c["key_bins"]:
            if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
                raise mt.MixError(f"mix: key_bins need a numeric key; {key!r} is {col.type}")
            values = np.asarray(col.cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)
            return pa.array(
                [NULL_KEY if v is None else v for v in mt.bucket_labels(values, c["key_bins"])], pa.string()
            )
        if not pa.types.is_string(col.type) and not pa.types.is_large_string(col.type):
            try:
                col = col.cast(pa.string())
            except pa.ArrowNotImplementedError:
                raise mt.MixError(f"mix: key {key!r} is {col.type}, which has no text form to key by") from None
        return one_chunk(pc.fill_null(col, NULL_KEY))

    def _column(
        self, unit: UnitEntry, entry: ShardEntry, schema: pa.Schema, ids: pa.ChunkedArray, ref: str, what: str
    ) -> pa.ChunkedArray:
        """A shard column, or ``STAGE.COLUMN`` of that stage's attrs (row for row with the shard)."""
        if ref in schema.names:
            return read_shard(entry.uri, [ref]).column(ref)
        stage, _, column = ref.partition(".")
        uri = entry.attrs.get(stage) if column else None
        if uri is None:
            raise mt.MixError(
                f"mix: {what} {ref!r} is neither a column of shard {unit.unit_id} ({entry.uri}; columns "
                f"{schema.names}) nor STAGE.COLUMN of its attrs (stages {sorted(entry.attrs)})"
            )
        names = attrs_columns(entry, stage)
        if column not in names:
            raise mt.MixError(
                f"mix: {what} {ref!r}: the {stage} attrs of shard {unit.unit_id} have no {column!r} ({names})"
            )
        table = read_shard(uri, [ID, column])
        if table.num_rows != len(ids) or not table.column(ID).cast(pa.string()).equals(ids.cast(pa.string())):
            raise mt.MixError(f"mix: attrs {uri} do not match shard {unit.unit_id} row for row")
        return table.column(column)

    # -- phase 2: one shard --------------------------------------------------------------------------
    def write_unit(self, unit: UnitEntry, entry: ShardEntry, uri: str) -> AttrsFile:
        ids, keys, weights, reasons = self.read_rows(unit, entry)
        n = len(ids)
        epochs = np.zeros(n, dtype=np.int64)
        live = _live(reasons)
        names, inverse = _key_index(keys, live)
        if len(live):
            # each live row's key plan, by its key's index: whole epochs, then one more below the threshold
            plans = [self.plans.get(k) for k in names]
            whole = np.array([p.whole if p else 0 for p in plans], dtype=np.int64)[inverse]
            threshold = np.array([p.threshold if p else 0 for p in plans], dtype=np.int64)[inverse]
            bins = mt.doc_bins(int(self.config["seed"]), ids.take(from_numpy(live)))
            epochs[live] = whole + (bins < threshold)
            targeted = np.array([p is not None for p in plans], dtype=bool)[inverse]
            reasons[live[~targeted]] = UNTARGETED
            reasons[live[targeted & (epochs[live] == 0)]] = DOWNSAMPLED
        cols: dict[str, Any] = {ID: ids, MIX_KEY: keys, MIX_EPOCHS: pa.array(epochs.astype(np.int32))}
        if self.config["unit"] == "tokens":
            cols[MIX_TOKENS] = pa.array(weights)
        cols[KEEP] = pa.array(epochs > 0)
        cols[DROP_REASON] = pa.array(reasons.tolist(), pa.string())
        table = pa.table(cols)
        accounting: RowAccounting = keep_accounting(table, self.name)
        with storage.atomic_open(uri) as out:
            sink = _CountingSink(out)
            with parquet_writer(sink, table.schema) as writer:
                writer.write_table(table)
        # per key of the mixed rows: what was there and what was taken (sums over the key's rows)
        e, w, m = epochs[live], weights[live], len(names)
        sums = {
            "rows": np.bincount(inverse, minlength=m),
            "available": np.bincount(inverse, weights=w, minlength=m),
            "selected_rows": np.bincount(inverse, weights=e > 0, minlength=m),
            "copies": np.bincount(inverse, weights=e, minlength=m),
            "selected": np.bincount(inverse, weights=e * w, minlength=m),
        }
        by_key = {str(k): {f: int(round(v[j])) for f, v in sums.items()} for j, k in enumerate(names)}
        extra = {"input": self.input_of(unit.unit_id), "by_key": by_key}
        return AttrsFile(sink.tell(), sink.checksum.hexdigest(), accounting, extra, table.column_names)

    # -- after all shards ----------------------------------------------------------------------------
    def collect(self, manifest: Manifest) -> None:
        """The mixture manifest: per key and per input, from the units' records; the rows of every input read."""
        super().collect(manifest)  # plain files: their ids unique
        c = self.config
        keys: dict[str, dict[str, int]] = {}
        inputs = [
            {"manifest": u, "label": lab, "rows": 0, "by_key": {}} for u, lab in zip(self.input_uris, self.input_labels)
        ]
        read = [0] * len(inputs)
        for unit in manifest.units:
            rec = self.checkpoints.load(unit.unit_id)
            if rec is None or rec.fingerprint != manifest.fingerprint:
                continue
            k = int(rec.extra.get("input", 0))
            read[k] += int(rec.accounting.get("read", 0))
            for key, d in (rec.extra.get("by_key") or {}).items():
                for target in (keys.setdefault(key, {}), inputs[k]["by_key"].setdefault(key, {})):
                    for name, v in d.items():
                        target[name] = target.get(name, 0) + int(v)
        if len(inputs) > 1:
            for k, uri in enumerate(self.input_uris):
                expected = handed_rows(ManifestHead.read(uri))
                if read[k] != expected:
                    raise StageFailed(f"mix: read {read[k]} rows of input {uri}, which hands on {expected}")
        for k, n in enumerate(read):
            inputs[k]["rows"] = n
        selected_total = sum(d.get("selected", 0) for d in keys.values())
        by_key = {}
        for key in sorted(set(keys) | set(c["targets"])):
            d = keys.get(key, {})
            plan = self.plans.get(key)
            achieved = d.get("selected", 0) / selected_total if selected_total else 0.0
            target = c["targets"].get(key)
            by_key[key] = {
                "target": target,
                "available_rows": d.get("rows", 0),
                "available": d.get("available", 0),
                "selected_rows": d.get("selected_rows", 0),
                "selected_copies": d.get("copies", 0),
                "selected": d.get("selected", 0),
                "epochs": round(plan.rate, 6) if plan else 0.0,
                "whole_epochs": plan.whole if plan else 0,
                "achieved": round(achieved, 6),
                "error": round(abs(achieved - target), 6) if target is not None else None,
            }
        mixture = {
            "key": c["key"],
            "unit": c["unit"],
            "seed": int(c["seed"]),
            "tolerance": float(c["tolerance"]),
            "total_requested": c["total"],
            "selected": selected_total,
            "selected_rows": sum(d.get("selected_rows", 0) for d in keys.values()),
            "selected_copies": sum(d.get("copies", 0) for d in keys.values()),
            "within_tolerance": all(
                v["error"] is None or v["error"] <= float(c["tolerance"]) + 1e-12 for v in by_key.values()
            ),
            "by_key": by_key,
            "inputs": inputs,
            "plans": {k: asdict(p) for k, p in self.plans.items()},
        }
        uri = self.lake.path("mix", self.fingerprint, "mixture.json")
        storage.write_json(uri, {"run_id": self.run_id, **mixture})
        manifest.config = {**manifest.config, MIXTURE_KEY: {**mixture, "uri": uri}}
        if not math.isfinite(selected_total) or selected_total == 0:
            raise StageFailed("mix: the mixture selected nothing")


def _live(reasons: np.ndarray) -> np.ndarray:
    """The rows that are mixed (no skip reason), ascending."""
    return np.flatnonzero(np.equal(reasons, None))


def _key_index(keys: pa.Array, live: np.ndarray) -> tuple[list[str], np.ndarray]:
    """The distinct keys of the ``live`` rows, sorted, and each live row's index among them (``np.unique``'s
    ``return_inverse``, from a dictionary encoding: sorting a Python string a row cost ~15% of the stage)."""
    encoded = pc.dictionary_encode(keys.take(from_numpy(live)))
    found = encoded.dictionary.to_pylist()
    order = sorted(range(len(found)), key=found.__getitem__)
    rank = np.empty(len(found), np.int64)
    rank[order] = np.arange(len(found))
    return [found[i] for i in order], rank[to_numpy(encoded.indices).astype(np.int64)]
