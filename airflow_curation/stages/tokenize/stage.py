"""The tokenize stage: curated rows tokenized with a tokenizer file and packed into fixed-length training
sequences.

One unit per shard. A unit reads the shard's ``id`` and ``text`` in batches, skips the rows an upstream
stage did not keep (every upstream attrs file with ``keep`` or ``is_duplicate``: preprocess, dedup,
quality...), tokenizes the rest with a Hugging Face ``tokenizers`` file, appends EOS to each document and
packs them, in shard order, into sequences of ``seq_len`` tokens (:mod:`.packing`). It writes two files,
each atomically:

- the packed sequences, ``packed/<fingerprint>/<shard>.parquet`` (``DIR/packed/<file>.parquet`` for
  plain Parquet inputs): ``input_ids``, ``n_tokens``, ``doc_ids``, ``doc_starts``, ``doc_offsets``;
- the attrs file (the shard's rows, keyed by ``id``): ``token_count`` (without EOS; null where the row
  was not tokenized), ``keep`` and ``drop_reason`` (``not_kept``, ``duplicate``, ``empty``: no text,
  ``empty_after_tokenize``: text without a single token).

A row the mix stage up-sampled (``mix_epochs`` > 1 in its attrs) is packed that many times: epoch k packs,
after the whole shard, again the rows with at least k epochs (``repeats`` counts the extra copies).

Every row read is kept (packed) or dropped with its reason. Token counts per shard and in total go in
the manifest (``config["tokens"]``) and in validate's report. The tokenizer file's checksum is part of
the fingerprint: another tokenizer is another configuration.
"""

from __future__ import annotations

import logging
import resource
import time
from functools import cached_property
from itertools import chain

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_curation.core import storage
from airflow_curation.core.accounting import RowAccounting
from airflow_curation.core.fingerprint import checksum_url, config_fingerprint
from airflow_curation.core.manifest import Manifest, ShardEntry, UnitEntry
from airflow_curation.core.schema import DROP_REASON, ID, KEEP, SOURCE, TEXT, blank_texts, check_id_text, string_ids
from airflow_curation.core.shards import (
    DEFAULT_ROW_GROUP_ROWS,
    _CountingSink,
    attrs_columns,
    parquet_writer,
    read_shard,
)
from airflow_curation.stages.attrs import AttrsFile, AttrsStage, keep_accounting
from airflow_curation.stages.kept import decision_attrs, skip_reasons
from airflow_curation.stages.settings import Setting
from airflow_curation.stages.text import ShardText
from airflow_curation.stages.tokenize.packing import PACKED, Packer

log = logging.getLogger(__name__)

MIX, MIX_EPOCHS = "mix", "mix_epochs"  # the mix stage's attrs and its per-row epochs (stages/mix)

TOKEN_COUNT = "token_count"
EMPTY = "empty"
EMPTY_AFTER_TOKENIZE = "empty_after_tokenize"
# Tried in this order when no eos_token is given.
EOS_CANDIDATES = ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "[SEP]", "<|eot_id|>")
SEQUENCES_PER_ROW_GROUP = 1024


def load_tokenizer(uri: str):
    """A ``tokenizers.Tokenizer`` from a tokenizer.json (local path or fsspec URL); never a download."""
    from tokenizers import Tokenizer

    try:
        data = storage.read_bytes(uri)
    except FileNotFoundError:
        raise ValueError(f"tokenize: tokenizer file {uri} not found (a tokenizer.json, never a hub name)") from None
    try:
        return Tokenizer.from_str(data.decode("utf-8"))
    except Exception as e:  # noqa: BLE001 - the library's own error types; the user needs the file named
        raise ValueError(f"tokenize: {uri} is not a tokenizers file: {e}") from None


def token_id(tokenizer, token: str | None, what: str, candidates: tuple[str, ...] = ()) -> int:
    """The id of ``token`` (or of the first of ``candidates`` the vocabulary has)."""
    for t in [token] if token else candidates:
        tid = tokenizer.token_to_id(t)
        if tid is not None:
            return int(tid)
    if token:
        raise ValueError(f"tokenize: {what} {token!r} is not in the tokenizer's vocabulary")
    raise ValueError(f"tokenize: the tokenizer has none of {list(candidates)}; name the {what} (--eos-token)")


class TokenizeStage(AttrsStage):
    """Tokenize the curated rows and pack them into fixed-length training sequences.

    Writes packed shards (input_ids of seq_len tokens, n_tokens, doc_ids, doc_starts, doc_offsets) and, per
    row, token_count, keep and drop_reason; token counts per shard and in total go in the manifest. See
    docs/tokenize.md.
    """

    name = "tokenize"
    version = "1"
    UPSTREAM = ("mix", "decontaminate", "quality", "dedup", "boilerplate", "preprocess", "ingest")
    OPTIONAL_WITHOUT = "tokenizer"
    # A pipeline starts it on its upstream's complete checkpoints (as the DAG always has), not on first shards.
    STREAMS = False
    FUNNEL_LABEL = "tokenized"
    SETTINGS = AttrsStage.SETTINGS.extend(
        Setting("tokenizer", str, None, "tokenizer file (a tokenizers tokenizer.json)", required=True),
        Setting("seq_len", int, 2048, "tokens per packed sequence", minimum=1),
        Setting("eos_token", str, None, "token appended to every document (default: the tokenizer's EOS)"),
        Setting("pad_token", str, None, "token that fills the last sequence (default: the EOS token)"),
        Setting("add_special_tokens", bool, False, "let the tokenizer's post-processor add its special tokens"),
        Setting(
            "only_kept",
            bool,
            True,
            "tokenize only the rows that upstream keep / is_duplicate attrs keep",
            off_flag="--all-rows",
        ),
        Setting("batch_rows", int, 1000, "rows per tokenizer call", runtime=True, minimum=1),
    )

    def __init__(self, lake, config, run_id) -> None:
        super().__init__(lake, config, run_id)
        self.special_ids  # noqa: B018 - a missing tokenizer or EOS fails before any work

    # -- the tokenizer -----------------------------------------------------------------------------
    @cached_property
    def tokenizer_checksum(self) -> str:
        try:
            return checksum_url(self.config["tokenizer"])
        except FileNotFoundError:
            raise ValueError(f"tokenize: tokenizer file {self.config['tokenizer']} not found") from None

    @cached_property
    def tokenizer(self):
        return load_tokenizer(self.config["tokenizer"])

    @cached_property
    def special_ids(self) -> tuple[int, int]:
        tok = self.tokenizer
        eos = token_id(tok, self.config["eos_token"], "eos_token", EOS_CANDIDATES)
        pad = token_id(tok, self.config["pad_token"], "pad_token") if self.config["pad_token"] else eos
        return eos, pad

    @property
    def fingerprint(self) -> str:
        # The file's content, not its path: a moved copy is the same configuration, a retrained file another.
        config = {**self.SETTINGS.fingerprint_config(self.config), "tokenizer": self.tokenizer_checksum}
        return config_fingerprint(self.name, config, self.version)

    def __getstate__(self) -> dict:
        # A process pool pickles the stage per unit: workers load the tokenizer themselves.
        return {k: v for k, v in self.__dict__.items() if k != "tokenizer"}

    # -- inputs --------------------------------------------------------------------------------------
    def reads_attrs(self, entry: ShardEntry) -> list[str]:
        if not self.config["only_kept"]:
            return []
        return decision_attrs(entry, skip=lambda key: key == self.attrs_name)

    def plain_outputs(self, shard_id: str) -> list[str]:
        return [self.output_uri(shard_id), self.packed_uri(shard_id)]

    def packed_uri(self, shard_id: str) -> str:
        if self.config.get("output_dir"):
            return storage.join(self.config["output_dir"], "packed", f"{shard_id}.parquet")
        return self.lake.path("packed", self.fingerprint, f"{shard_id}.parquet")

    # -- one shard -----------------------------------------------------------------------------------
    def write_unit(self, unit: UnitEntry, entry: ShardEntry, uri: str) -> AttrsFile:
        started = time.time()
        attrs_uris = self.read_attrs_uris(unit, entry)
        eos, pad = self.special_ids
        seq_len = int(self.config["seq_len"])
        packer = Packer(seq_len, pad)
        accounting = RowAccounting()
        batch_rows = int(self.config["batch_rows"] or 1000)
        packed_uri = self.packed_uri(unit.unit_id)
        doc_tokens = repeats = 0
        with storage.open_read(entry.uri) as f:
            pf = pq.ParquetFile(f)
            check_id_text(pf.schema_arrow, entry.uri)
            upstream = skip_reasons(unit.unit_id, pf.read(columns=[ID]).column(ID), attrs_uris) if attrs_uris else None
            by_source = SourceTally(pf)
            with storage.atomic_open(uri) as attrs_out, storage.atomic_open(packed_uri) as packed_out:
                attrs_sink, packed_sink = _CountingSink(attrs_out), _CountingSink(packed_out)
                attrs_schema = pa.schema(
                    [
                        pa.field(ID, pa.string()),
                        pa.field(TOKEN_COUNT, pa.int32()),
                        pa.field(KEEP, pa.bool_()),
                        pa.field(DROP_REASON, pa.string()),
                    ]
                )
                with (
                    parquet_writer(attrs_sink, attrs_schema) as attrs_pq,
                    pq.ParquetWriter(packed_sink, packer.schema, compression="zstd") as packed_pq,
                ):
                    # Row groups of a fixed size, whatever batch_rows is: the files are the same byte for byte.
                    attrs_writer = RowGroups(attrs_pq, DEFAULT_ROW_GROUP_ROWS)
                    packed_writer = RowGroups(packed_pq, SEQUENCES_PER_ROW_GROUP)
                    row = 0
                    packed: list[np.ndarray] = []  # per row: packed in the first pass (only those repeat)
                    text = ShardText(entry.uri, self.text_uri(unit, entry), self.user_files)
                    for batch in text.batches([ID, TEXT], batch_rows):
                        n = batch.num_rows
                        reasons = upstream[row : row + n].copy() if upstream is not None else np.full(n, None, object)
                        row += n
                        result, tokens = self._tokenize(batch, reasons, eos, packer)
                        packed.append(result.column(KEEP).to_numpy(zero_copy_only=False).astype(bool))
                        by_source.add(row - n, result)
                        doc_tokens += tokens
                        accounting.merge(keep_accounting(result, self.name))
                        attrs_writer.write(result.cast(attrs_schema))
                        for table in packer.full():
                            packed_writer.write(table)
                    # Up-sampled rows (mix's mix_epochs > 1): epoch k packs, after the whole shard, again the rows
                    # with at least k epochs, so that a document's copies land apart, not back to back.
                    epochs = self._mix_epochs(unit, entry, row)
                    if epochs is not None:
                        epochs = np.where(np.concatenate(packed) if packed else np.zeros(0, bool), epochs, 0)
                    for k in range(2, int(epochs.max()) + 1 if epochs is not None and len(epochs) else 0):
                        first = 0
                        for batch in text.batches([ID, TEXT], batch_rows):
                            pick = np.flatnonzero(epochs[first : first + batch.num_rows] >= k)
                            first += batch.num_rows
                            if len(pick):
                                copies, tokens = self._copies(batch.take(pa.array(pick)), eos, packer)
                                repeats += copies
                                doc_tokens += tokens
                                for table in packer.full():
                                    packed_writer.write(table)
                    for table in packer.flush():
                        packed_writer.write(table)
                    attrs_writer.close()
                    packed_writer.close()
        extra = {
            "seq_len": seq_len,
            "documents": accounting.kept,
            "tokens": packer.tokens,  # EOS included: what the sequences hold
            "doc_tokens": doc_tokens,
            "repeats": repeats,  # extra copies of up-sampled rows (mix_epochs - 1 each)
            "sequences": packer.sequences,
            "padding": packer.padding,
            "by_source": by_source.totals(),
            "packed_uri": packed_uri,
            "packed_bytes": packed_sink.tell(),
            "packed_checksum": packed_sink.checksum.hexdigest(),
            "attrs_checksum": attrs_sink.checksum.hexdigest(),
            "seconds": round(time.time() - started, 3),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }
        # The packed file goes in the shard's entry (its manifest page): export's tasks read their block's only.
        packed_file = {"uri": packed_uri, "checksum": extra["packed_checksum"], "bytes": extra["packed_bytes"]}
        return AttrsFile(
            attrs_sink.tell(),
            attrs_sink.checksum.hexdigest(),
            accounting,
            extra,
            attrs_schema.names,
            {PACKED: packed_file},
        )

    def _tokenize(self, batch: pa.RecordBatch, reasons: np.ndarray, eos: int, packer: Packer) -> tuple[pa.Table, int]:
        """Tokenize the rows of ``batch`` not already skipped, pack them; returns the batch's attrs and
        the tokens of its documents (EOS not counted)."""
        n = batch.num_rows
        ids = string_ids(batch.column(ID))
        texts = batch.column(TEXT)
        blank = blank_texts(texts)
        reasons[np.asarray(blank.to_numpy(zero_copy_only=False), dtype=bool) & _unset(reasons)] = EMPTY
        todo = np.flatnonzero(_unset(reasons))
        counts = np.zeros(n, dtype=np.int64)
        tokens = 0
        if len(todo):
            chosen = texts.take(pa.array(todo)).to_pylist()
            encodings = self.tokenizer.encode_batch_fast(
                chosen, add_special_tokens=bool(self.config["add_special_tokens"])
            )
            id_lists = [e.ids for e in encodings]
            lengths = np.fromiter((len(x) for x in id_lists), dtype=np.int64, count=len(id_lists))
            counts[todo] = lengths
            empty = lengths == 0
            reasons[todo[empty]] = EMPTY_AFTER_TOKENIZE
            tokens = int(lengths.sum())
            flat = np.fromiter(chain.from_iterable(id_lists), dtype=np.int32, count=tokens)
            packed = lengths[~empty]
            # EOS after every document: insert at each document's end.
            flat = np.insert(flat, np.cumsum(packed), eos)
            kept_ids = ids.take(pa.array(todo[~empty])).to_pylist()
            packer.add(kept_ids, flat, packed + 1)
        keep = _unset(reasons)
        count_col = pa.array(counts.astype(np.int32), mask=np.isin(np.arange(n), todo, invert=True))
        result = pa.table(
            {
                ID: ids,
                TOKEN_COUNT: count_col,
                KEEP: pa.array(keep),
                DROP_REASON: pa.array(reasons.tolist(), type=pa.string()),
            }
        )
        return result, tokens

    def _mix_epochs(self, unit: UnitEntry, entry: ShardEntry, rows: int) -> np.ndarray | None:
        """Per row, the epochs the mix stage gave it (its attrs' ``mix_epochs``), or None without mix."""
        uri = self.unit_attrs(unit, entry).get(MIX) if self.config["only_kept"] else None
        if uri is None or MIX_EPOCHS not in attrs_columns(entry, MIX):
            return None
        epochs = read_shard(uri, [MIX_EPOCHS]).column(MIX_EPOCHS)
        if len(epochs) != rows:
            raise ValueError(f"tokenize: mix attrs {uri} hold {len(epochs)} rows for {rows} in shard {unit.unit_id}")
        return np.asarray(epochs.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)

    def _copies(self, batch: pa.Table, eos: int, packer: Packer) -> tuple[int, int]:
        """Pack one more copy of each document of ``batch``; returns the copies and their tokens (EOS not
        counted). Only rows tokenized in the first pass come here (mix keeps them), so none is empty but
        one without a token, which is skipped again."""
        texts = batch.column(TEXT).to_pylist()
        encodings = self.tokenizer.encode_batch_fast(texts, add_special_tokens=bool(self.config["add_special_tokens"]))
        id_lists = [e.ids for e in encodings]
        lengths = np.fromiter((len(x) for x in id_lists), dtype=np.int64, count=len(id_lists))
        some = lengths > 0
        ids = [i for i, ok in zip(batch.column(ID).cast(pa.string()).to_pylist(), some) if ok]
        flat = np.fromiter(chain.from_iterable(id_lists), dtype=np.int32, count=int(lengths.sum()))
        flat = np.insert(flat, np.cumsum(lengths[some]), eos)
        packer.add(ids, flat, lengths[some] + 1)
        return len(ids), int(lengths.sum())

    # -- after all shards ----------------------------------------------------------------------------
    def collect(self, manifest: Manifest) -> None:
        """Token counts in total and per source group, in the manifest (``config["tokens"]``). Per shard they
        are in its checkpoint record, and its packed file in its entry (``files["packed"]``): the head stays
        small whatever the shard count (every export task reads it)."""
        super().collect(manifest)  # plain files: their ids unique
        eos, pad = self.special_ids
        totals = {"documents": 0, "repeats": 0, "tokens": 0, "doc_tokens": 0, "sequences": 0, "padding": 0}
        by_source: dict[str, dict[str, int]] = {}
        largest = 0  # sequences of the largest packed shard: export's middle pass bounds a group's memory by it
        for unit in manifest.units:
            rec = self.checkpoints.load(unit.unit_id)
            if rec is None or rec.fingerprint != manifest.fingerprint:
                continue
            e = rec.extra
            for k in totals:
                totals[k] += int(e.get(k, 0))
            largest = max(largest, int(e.get("sequences", 0)))
            for group, counts in (e.get("by_source") or {}).items():
                mine = by_source.setdefault(group, {"documents": 0, "doc_tokens": 0})
                for k in mine:
                    mine[k] += int(counts[k])
        manifest.config = {
            **manifest.config,
            "tokens": {
                **totals,
                "largest_shard_sequences": largest,
                "seq_len": int(self.config["seq_len"]),
                "eos_id": eos,
                "pad_id": pad,
                "tokenizer_checksum": self.tokenizer_checksum,
                "by_source": dict(sorted(by_source.items())),
            },
        }


class SourceTally:
    """Kept documents and their tokens (EOS not counted) per source group of one shard: the first folder
    of the ``source`` column (the input file, relative to the input root), or ``.`` for a file at the root.
    Inputs laid out as ``raw/<source>/...`` are counted by source; plain Parquet without ``source`` is one
    group, ``.``. Small per shard (one entry per group), summed over shards in the manifest."""

    def __init__(self, pf: pq.ParquetFile) -> None:
        if SOURCE in pf.schema_arrow.names:
            parts = pc.split_pattern(pf.read(columns=[SOURCE]).column(SOURCE), "/", max_splits=1)
            groups = pc.if_else(pc.greater(pc.list_value_length(parts), 1), pc.list_element(parts, 0), ".")
            encoded = pc.dictionary_encode(pc.fill_null(groups, ".")).combine_chunks()
            self.names = encoded.dictionary.to_pylist()
            self.codes = encoded.indices.to_numpy(zero_copy_only=False)
        else:
            self.names, self.codes = ["."], None
        self.documents = np.zeros(len(self.names), dtype=np.int64)
        self.tokens = np.zeros(len(self.names), dtype=np.int64)

    def add(self, first_row: int, result: pa.Table) -> None:
        """Count a batch's attrs (``result``, rows ``first_row``... of the shard)."""
        kept = result.column(KEEP).to_numpy(zero_copy_only=False).astype(bool)
        tokens = pc.fill_null(result.column(TOKEN_COUNT), 0).to_numpy(zero_copy_only=False).astype(np.int64)
        codes = self.codes[first_row : first_row + len(kept)] if self.codes is not None else np.zeros(len(kept), int)
        np.add.at(self.documents, codes[kept], 1)
        np.add.at(self.tokens, codes[kept], tokens[kept])

    def totals(self) -> dict[str, dict[str, int]]:
        return {
            name: {"documents": int(d), "doc_tokens": int(t)}
            for name, d, t in zip(self.names, self.documents, self.tokens)
            if d
        }


class RowGroups:
    """Writes tables as row groups of exactly ``rows`` rows (the last one shorter), however they arrive."""

    def __init__(self, writer: pq.ParquetWriter, rows: int) -> None:
        self.writer, self.rows = writer, rows
        self.pending: list[pa.Table] = []
        self.count = 0

    def write(self, table: pa.Table) -> None:
        self.pending.append(table)
        self.count += table.num_rows
        if self.count >= self.rows:
            whole = pa.concat_tables(self.pending)
            cut = (self.count // self.rows) * self.rows
            self.writer.write_table(whole.slice(0, cut), row_group_size=self.rows)
            self.pending, self.count = [whole.slice(cut)], self.count - cut

    def close(self) -> None:
        """Write the rows left."""
        rest = pa.concat_tables(self.pending) if self.pending else None
        if rest is not None and rest.num_rows:
            self.writer.write_table(rest, row_group_size=self.rows)
        self.pending, self.count = [], 0


def _unset(reasons: np.ndarray) -> np.ndarray:
    return np.fromiter((r is None for r in reasons), dtype=bool, count=len(reasons))
