"""Packs: several spill files as one, partition-major, their record batches copied as stored.

A reader of a range of partitions opens every spill file once (:mod:`airflow_curation.core.lsh`): with
units x shards such opens the global phase of dedup grows with the square of the data (the units follow
the data at a fixed memory budget). A pack holds the batches of k spill files ordered by partition, then by
file, so a unit opens one pack for k files and reads its range in one contiguous read (one ranged GET on an
object store). Batches are copied as Arrow IPC messages, still lz4-compressed: packing costs the bytes' copy
and a few microseconds a batch, never their decode and re-encode.

Layout: ``MAGIC``; a block a partition present (its pieces' count as int64, their sources as int32, their
sizes as int64, then their messages); the index arrays; a JSON header; the header's length and the index's
offset (little-endian uint64 each); ``MAGIC``. The index holds the partitions present and their blocks'
offsets, and per source its schema and high words: O(partitions + sources) bytes, never O(pieces), so a
reader of a range reads the tail and then its blocks, two reads, at any pack size.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from airflow_curation.core import storage
from airflow_curation.core.arrays import from_numpy, to_numpy
from airflow_curation.core.integrity import IntegrityError

MAGIC = b"CURPACK1"
SUFFIX = ".pack"
_TAIL = 16 + len(MAGIC)
_TAIL_GUESS = 1 << 17  # one read gets the index of a pack of up to ~10,000 partitions
_IPC_MAGIC = b"ARROW1"
_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"  # an IPC stream's end
_NO_HIGH: dict[str, int] = {}
_IPC_READ = pa.ipc.IpcReadOptions(use_threads=False)  # a pool per batch costs more than decoding it


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
    bounds = np.append(first, len(pieces))
    blocks = [len(MAGIC)]
    with storage.atomic_open(out_uri) as f:
        f.write(MAGIC)
        for a, b in zip(bounds[:-1], bounds[1:]):  # a write a partition, not a piece
            mine = pieces[a:b]
            head = np.array([len(mine)], "<i8").tobytes()
            head += np.array([s for _, s, _ in mine], "<i4").tobytes()
            head += np.array([m.size for _, _, m in mine], "<i8").tobytes()
            block = b"".join([head, *(m for _, _, m in mine)])
            f.write(block)
            blocks.append(blocks[-1] + len(block))
        arrays = {
            "present": present.astype("<i4"),
            "blocks": np.array(blocks, "<i8"),
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
        for a in arrays.values():
            f.write(np.ascontiguousarray(a).tobytes())
        head = json.dumps(header).encode()
        f.write(head)
        f.write(np.array([len(head), blocks[-1]], "<u8").tobytes())
        f.write(MAGIC)
    return blocks[-1]


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


def read_range(uri: str, lo: int, hi: int, names: list[str] | None) -> list[tuple[int, pa.RecordBatch, dict[str, int]]]:
    """Partitions ``lo <= p < hi`` of a pack: one ``(partition, batch, high words)`` a partition present, its
    packed sources' rows in order, narrowed columns widened (so no high words left); one open, one index read
    and one read of the range's bytes, decoded as one Arrow IPC stream (a piece's own decode, at 4,096
    partitions a few rows, would cost more than the open a pack saves)."""
    try:
        with storage.open_arrow(uri) as f:
            header, ix = _index(f, uri)
            a, b = np.searchsorted(ix["present"], [lo, hi])
            if a == b:
                return []
            base = int(ix["blocks"][a])
            f.seek(base)
            body = f.read(int(ix["blocks"][b]) - base)
        counts, sources, sizes, messages = [], [], [], []
        for j in range(a, b):  # each block: its pieces' count, sources and sizes, then their messages
            at = int(ix["blocks"][j]) - base
            n = int(np.frombuffer(body, "<i8", 1, at)[0])
            counts.append(n)
            sources.append(np.frombuffer(body, "<i4", n, at + 8))
            sizes.append(np.frombuffer(body, "<i8", n, at + 8 + 4 * n))
            messages.append(body[at + 8 + 12 * n : int(ix["blocks"][j + 1]) - base])
        sources = np.concatenate(sources)
        piece_end = np.concatenate([[0], np.cumsum(np.concatenate(sizes))])
        stream_bytes = b"".join(messages)
        schemas = _schemas(header, ix)
        kinds = ix["source_schema"][sources]
        # one stream a run of pieces stored alike (a pack of files of one layout is one run)
        cuts = np.flatnonzero(np.diff(kinds)) + 1
        parts, lengths = [], []
        for r0, r1 in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [len(kinds)]])):
            chunk = stream_bytes[int(piece_end[r0]) : int(piece_end[r1])]
            stream = pa.ipc.open_stream(
                pa.py_buffer(b"".join([schemas[int(kinds[r0])], chunk, _EOS])), options=_IPC_READ
            )
            table = stream.read_all()
            got = [len(c) for c in table.column(0).chunks] if table.num_columns else []
            if len(got) != r1 - r0:
                raise IntegrityError(f"pack {uri}: {len(got)} batches decoded for {r1 - r0} pieces")
            parts.append(_widened(table, names, header["high_names"], ix["high"], sources[r0:r1], got))
            lengths.extend(got)
        batch = pa.concat_batches(parts) if len(parts) > 1 else parts[0]
        rows = np.concatenate([[0], np.cumsum(lengths)])
        ends = rows[np.concatenate([[0], np.cumsum(counts)])]
        return [
            (int(p), batch.slice(int(s), int(e - s)), _NO_HIGH)
            for p, s, e in zip(ix["present"][a:b], ends[:-1], ends[1:])
        ]
    except (pa.ArrowInvalid, OSError, ValueError, KeyError) as e:
        raise IntegrityError(f"pack {uri} is unreadable (truncated or corrupted?): {e}") from e


def _widened(
    table: pa.Table, names: list[str] | None, high_names: list[str], high: np.ndarray, sources: np.ndarray, lengths
) -> pa.RecordBatch:
    """``table``'s columns ``names`` (all if None) as one batch, narrowed ones widened with the high word of
    each row's source (``sources``: a piece's, ``lengths``: its rows)."""
    columns = {}
    for name in names if names is not None else table.column_names:
        col = table.column(name).combine_chunks()
        if name in high_names and col.type == pa.uint32():
            words = high[sources * len(high_names) + high_names.index(name)] << np.uint64(32)
            wide = to_numpy(col).astype(np.uint64)
            wide |= np.repeat(words, lengths)
            col = from_numpy(wide)
        columns[name] = col
    return pa.RecordBatch.from_pydict(columns)


def _schemas(header: dict, ix: dict[str, np.ndarray]) -> list[bytes]:
    """The packed sources' schemas, as the encapsulated IPC messages that open a stream."""
    blob, at, out = ix["schemas"].tobytes(), 0, []
    for n in header["schema_sizes"]:
        out.append(blob[at : at + n])
        at += n
    return out
