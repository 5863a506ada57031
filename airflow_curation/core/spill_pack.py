"""Packs: several spill files as one, partition-major, their record batches copied as stored.

A reader of a range of partitions opens every spill file once (:mod:`airflow_curation.core.lsh`): with
units x shards such opens the global phase of dedup grows with the square of the data (the units follow
the data at a fixed memory budget). A pack holds the batches of k spill files ordered by partition, then by
file, so a unit opens one pack for k files and reads its range in one contiguous read (one ranged GET on an
object store). Batches are copied as Arrow IPC messages, still lz4-compressed: packing costs the bytes' copy
and a few microseconds a batch, never their decode and re-encode.

Layout: ``MAGIC``, the messages, the index arrays, a JSON header, the header's length and the index's offset
(little-endian uint64 each), ``MAGIC``. Pieces of partition ``present[j]`` are ``first[j]:first[j+1]``; piece
``i`` is the bytes ``offset[i]:offset[i+1]`` of source ``source[i]``, decoded with that source's schema and
widened with its high words.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from airflow_curation.core import storage
from airflow_curation.core.integrity import IntegrityError

MAGIC = b"CURPACK1"
SUFFIX = ".pack"
_TAIL = 16 + len(MAGIC)
_TAIL_GUESS = 1 << 16  # one read gets the index of a pack of up to ~2,000 pieces
_IPC_MAGIC = b"ARROW1"


@dataclass
class Source:
    """One spill file for :func:`write`: its bytes, the partition of each of its record batches (ascending,
    batch i holds ``present[i]``) and the high words of its narrowed columns."""

    data: pa.Buffer | None
    present: np.ndarray
    high: dict[str, int]


def is_pack(uri: str) -> bool:
    return uri.endswith(SUFFIX)


def _messages(src: Source, uri: str) -> tuple[pa.Schema, list[pa.Buffer]]:
    """The schema of an Arrow IPC file and its record batch messages as stored (slices of its bytes)."""
    if src.data is None or src.data.size < 8 or src.data.slice(0, 6).to_pybytes() != _IPC_MAGIC:
        raise IntegrityError(f"spill file {uri} is not an Arrow IPC file and cannot be packed")
    stream = pa.BufferReader(src.data)
    stream.seek(8)
    reader = pa.ipc.MessageReader.open_stream(stream)
    schema = pa.ipc.read_schema(reader.read_next_message())
    batches, at = [], stream.tell()
    for msg in reader:  # the stream's end-of-stream marker stops it before the file's footer
        end = stream.tell()
        if msg.type == "record batch":
            batches.append(src.data.slice(at, end - at))
        at = end
    if len(batches) != len(src.present):
        raise IntegrityError(f"spill file {uri}: {len(batches)} batches for {len(src.present)} partitions")
    return schema, batches


def write(out_uri: str, sources: list[Source], uris: list[str]) -> int:
    """Pack ``sources`` (in that order within each partition) into ``out_uri``, atomically; returns bytes."""
    schemas: list[bytes] = []
    source_schema = np.zeros(len(sources), np.int32)
    names = sorted({name for s in sources for name in s.high})
    high = np.zeros((len(sources), len(names)), np.uint64)
    has_high = np.zeros((len(sources), len(names)), np.int8)
    pieces: list[tuple[int, int, pa.Buffer]] = []  # (partition, source, message bytes)
    for i, (src, uri) in enumerate(zip(sources, uris)):
        if not len(src.present):  # an empty spill file: no batches, nothing to read
            continue
        schema, batches = _messages(src, uri)
        blob = schema.remove_metadata().serialize().to_pybytes()
        if blob not in schemas:
            schemas.append(blob)
        source_schema[i] = schemas.index(blob)
        for j, name in enumerate(names):
            if name in src.high:
                high[i, j], has_high[i, j] = src.high[name], 1
        pieces.extend((int(p), i, m) for p, m in zip(src.present, batches))
    pieces.sort(key=lambda t: t[0])  # stable: the sources' order within a partition
    parts = np.array([p for p, _, _ in pieces], np.int64)
    present, first = np.unique(parts, return_index=True)
    sizes = np.array([b.size for _, _, b in pieces], np.int64)
    offset = np.concatenate([[len(MAGIC)], len(MAGIC) + np.cumsum(sizes)]).astype(np.int64)
    arrays = {
        "present": present.astype("<i4"),
        "first": np.append(first, len(pieces)).astype("<i8"),
        "source": np.array([s for _, s, _ in pieces], "<i4"),
        "offset": offset.astype("<i8"),
        "source_schema": source_schema.astype("<i4"),
        "high": high.astype("<u8").ravel(),  # sources x high_names
        "has_high": has_high.ravel(),
        "schemas": np.frombuffer(b"".join(schemas), np.uint8),
    }
    header = {
        "sources": len(sources),
        "high_names": names,
        "schema_sizes": [len(b) for b in schemas],
        "arrays": {k: [str(a.dtype.str), int(a.size)] for k, a in arrays.items()},
    }
    index_at = int(offset[-1])
    with storage.atomic_open(out_uri) as f:
        f.write(MAGIC)
        for a, b in zip(first, np.append(first[1:], len(pieces))):  # a write a partition, not a piece
            f.write(b"".join(piece for _, _, piece in pieces[a:b]))
        for a in arrays.values():
            f.write(np.ascontiguousarray(a).tobytes())
        head = json.dumps(header).encode()
        f.write(head)
        f.write(np.array([len(head), index_at], "<u8").tobytes())
        f.write(MAGIC)
    return index_at


def _index(f, uri: str) -> tuple[dict, dict[str, np.ndarray]]:
    end = f.seek(0, 2)
    if end < len(MAGIC) + _TAIL:
        raise IntegrityError(f"pack {uri} is truncated ({end} bytes)")
    start = max(0, end - _TAIL_GUESS)
    f.seek(start)
    tail = f.read(end - start)
    if tail[-len(MAGIC) :] != MAGIC:
        raise IntegrityError(f"pack {uri} has no end marker (truncated or not a pack)")
    head_len, index_at = (int(x) for x in np.frombuffer(tail[-_TAIL : -len(MAGIC)], "<u8"))
    if index_at < start:
        f.seek(index_at)
        tail, start = f.read(end - index_at), index_at
    at = index_at - start
    header = json.loads(tail[end - start - _TAIL - head_len : end - start - _TAIL])
    arrays = {}
    for name, (dtype, n) in header["arrays"].items():
        a = np.frombuffer(tail, dtype, count=n, offset=at)
        arrays[name] = a
        at += a.nbytes
    return header, arrays


def read_range(uri: str, lo: int, hi: int, names: list[str]) -> list[tuple[int, pa.RecordBatch, dict[str, int]]]:
    """Partitions ``lo <= p < hi`` of a pack: ``(partition, batch, high words)`` per piece, ascending by
    partition and in the packed sources' order within one; one open, one index read and one read of the
    range's bytes."""
    try:
        with storage.open_arrow(uri) as f:
            header, ix = _index(f, uri)
            a, b = np.searchsorted(ix["present"], [lo, hi])
            first, last = int(ix["first"][a]), int(ix["first"][b])
            if first == last:
                return []
            base = int(ix["offset"][first])
            f.seek(base)
            body = pa.py_buffer(f.read(int(ix["offset"][last]) - base))
        sizes, at, schemas = header["schema_sizes"], 0, []
        blob = ix["schemas"].tobytes()
        for n in sizes:
            schemas.append(pa.ipc.read_schema(pa.py_buffer(blob[at : at + n])))
            at += n
        high_names = header["high_names"]
        part_of_piece = np.repeat(ix["present"][a:b], np.diff(ix["first"][a : b + 1]))
        out = []
        for k, piece in enumerate(range(first, last)):
            s = int(ix["source"][piece])
            lo_b, hi_b = int(ix["offset"][piece]) - base, int(ix["offset"][piece + 1]) - base
            msg = pa.ipc.read_message(body.slice(lo_b, hi_b - lo_b))
            batch = pa.ipc.read_record_batch(msg, schemas[int(ix["source_schema"][s])]).select(names)
            row = s * len(high_names)
            high = {n: int(ix["high"][row + j]) for j, n in enumerate(high_names) if ix["has_high"][row + j]}
            out.append((int(part_of_piece[k]), batch, high))
        return out
    except (pa.ArrowInvalid, OSError, ValueError, KeyError) as e:
        raise IntegrityError(f"pack {uri} is unreadable (truncated or corrupted?): {e}") from e
