"""Packing tokenized documents into fixed-length sequences, with their boundaries.

Documents go into one token stream in the order given, each followed by the EOS id; the stream is cut
every ``seq_len`` tokens. The last, partial sequence is padded with ``pad_id`` when the packer is
flushed (its ``n_tokens`` says how many tokens are real). Every sequence records which documents it
holds and where each one's segment starts, so that a trainer can build attention masks or
position ids per document, and anyone can trace a token back to its document:

- ``input_ids``: ``seq_len`` token ids (fixed-size list, int32);
- ``n_tokens``: real tokens in the sequence (``seq_len`` but in the last one);
- ``doc_ids``: the ``id`` of each document with tokens in the sequence, in order;
- ``doc_starts``: the position in the sequence where each of those segments starts (the first is 0);
- ``doc_offsets``: the offset within its document of each segment's first token (0 where the document
  starts in this sequence, more where it continues from the previous one).

The same documents in the same order give the same sequences, byte for byte.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from airflow_curation.core.manifest import ManifestError, ManifestHead

INPUT_IDS = "input_ids"
N_TOKENS = "n_tokens"
DOC_IDS = "doc_ids"
DOC_STARTS = "doc_starts"
DOC_OFFSETS = "doc_offsets"
PACKED = "packed"  # the role of a shard's packed file in its manifest entry's ``files`` (tokenize -> export)


def packed_in_head(head: ManifestHead) -> dict[str, dict[str, str]] | None:
    """``unit id -> {uri, checksum}`` of every packed file, from a tokenize manifest written before the shard
    entries named them (its head's ``tokens.shards``); None for a newer one (:func:`packed_files`)."""
    old = head.config["tokens"].get("shards")
    if old is None:
        return None
    return {unit: {"uri": rec["packed_uri"], "checksum": rec["packed_checksum"]} for unit, rec in old.items()}


def packed_files(head: ManifestHead, positions: range | None = None) -> list[tuple[str, dict[str, Any] | None]]:
    """``(shard id, {uri, checksum...} of its packed file, or None)`` at ``positions`` (None: all) of a tokenize
    manifest, in its order (the position keys a sequence's order in export, and trace finds it by it).

    The one reader of both layouts: each shard entry's ``files["packed"]``, read from the pages of those
    positions only; or, in a manifest from before, its head's ``tokens.shards`` by the unit at each position.
    """
    old = packed_in_head(head)
    if old is None:
        if head.shard_count != head.unit_count:
            raise ManifestError(
                f"the tokenize manifest {head.uri} has {head.shard_count} shards for {head.unit_count} units: some "
                f"shard has no packed file (failed units: {head.failed_units[:5]})"
            )
        entries = head.shard_dicts_at(positions if positions is not None else range(head.shard_count))
        return [(s["shard_id"], (s.get("files") or {}).get(PACKED)) for s in entries]
    units = head.unit_dicts_at(positions if positions is not None else range(head.unit_count))
    return [(u["unit_id"], old.get(u["unit_id"])) for u in units]


def packed_schema(seq_len: int) -> pa.Schema:
    return pa.schema(
        [
            pa.field(INPUT_IDS, pa.list_(pa.int32(), seq_len), nullable=False),
            pa.field(N_TOKENS, pa.int32(), nullable=False),
            pa.field(DOC_IDS, pa.list_(pa.string()), nullable=False),
            pa.field(DOC_STARTS, pa.list_(pa.int32()), nullable=False),
            pa.field(DOC_OFFSETS, pa.list_(pa.int32()), nullable=False),
        ]
    )


class Packer:
    """Accumulates documents (:meth:`add`) and hands out full sequences as soon as there are any.

    :param seq_len: tokens per sequence.
    :param pad_id: fills the end of the last sequence.
    """

    def __init__(self, seq_len: int, pad_id: int) -> None:
        if seq_len < 1:
            raise ValueError(f"seq_len must be at least 1, not {seq_len}")
        self.seq_len = seq_len
        self.pad_id = pad_id
        self.schema = packed_schema(seq_len)
        # The pending stream, and where each pending document starts in it (the first one may have begun
        # in an emitted sequence: it continues at offset self._first_offset of its document).
        self._tokens = np.empty(0, dtype=np.int32)
        self._starts = np.empty(0, dtype=np.int64)
        self._ids: list[str] = []
        self._first_offset = 0
        self.sequences = 0
        self.tokens = 0  # real tokens emitted or pending, EOS included
        self.padding = 0

    def add(self, ids: list[str], tokens: np.ndarray, lengths: np.ndarray) -> None:
        """Documents in order: ``ids[i]`` has the next ``lengths[i]`` ids of ``tokens`` (its EOS included)."""
        if not ids:
            return
        lengths = np.asarray(lengths, dtype=np.int64)
        if len(lengths) != len(ids) or int(lengths.sum()) != len(tokens):
            raise ValueError("packer: ids, tokens and lengths disagree")
        if (lengths <= 0).any():
            raise ValueError("packer: a document without tokens (drop it before packing)")
        starts = len(self._tokens) + np.cumsum(lengths) - lengths
        self._tokens = np.concatenate([self._tokens, np.asarray(tokens, dtype=np.int32)])
        self._starts = np.concatenate([self._starts, starts])
        self._ids.extend(ids)
        self.tokens += len(tokens)

    def full(self) -> Iterator[pa.Table]:
        """The complete sequences so far, as one table (nothing when there is none)."""
        n = len(self._tokens) // self.seq_len
        if n:
            yield self._emit(n)

    def flush(self) -> Iterator[pa.Table]:
        """Everything left: the complete sequences, then the last one padded."""
        yield from self.full()
        real = len(self._tokens)
        if real:
            pad = self.seq_len - real
            self._tokens = np.concatenate([self._tokens, np.full(pad, self.pad_id, dtype=np.int32)])
            self.padding += pad
            yield self._emit(1, real_last=real)

    def _emit(self, n: int, real_last: int | None = None) -> pa.Table:
        L, count = self.seq_len, n * self.seq_len
        tokens, starts = self._tokens[:count], self._starts
        # Segments start at every sequence start and at every document start (padding starts none).
        seg = np.union1d(np.arange(n, dtype=np.int64) * L, starts[starts < count])
        doc = np.searchsorted(starts, seg, side="right") - 1
        offset = seg - starts[doc]
        offset[doc == 0] += self._first_offset
        seq = seg // L
        offsets = np.concatenate([[0], np.cumsum(np.bincount(seq, minlength=n))]).astype(np.int32)
        ids = pa.array(self._ids, type=pa.string()).take(pa.array(doc))
        n_tokens = np.full(n, L, dtype=np.int32)
        if real_last is not None:
            n_tokens[-1] = real_last
        table = pa.Table.from_arrays(
            [
                pa.FixedSizeListArray.from_arrays(pa.array(tokens, type=pa.int32()), L),
                pa.array(n_tokens),
                pa.ListArray.from_arrays(pa.array(offsets), ids),
                pa.ListArray.from_arrays(pa.array(offsets), pa.array((seg - seq * L).astype(np.int32))),
                pa.ListArray.from_arrays(pa.array(offsets), pa.array(offset.astype(np.int32))),
            ],
            schema=self.schema,
        )
        # What is left: the document that runs past the cut continues; those before it are done.
        if count >= len(self._tokens):
            self._tokens, self._starts, self._ids, self._first_offset = self._tokens[:0], starts[:0], [], 0
        else:
            d = int(np.searchsorted(starts, count, side="right") - 1)
            self._first_offset = count - int(starts[d]) + (self._first_offset if d == 0 else 0)
            self._tokens = self._tokens[count:]
            self._starts = np.maximum(starts[d:] - count, 0)
            del self._ids[:d]
        self.sequences += n
        return table
