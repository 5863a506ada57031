"""LSH buckets that scale past memory: hash-partitioned spill files and candidate pairs per partition.

A spill file holds the rows one writer produced, sorted into one Arrow IPC record batch per partition
(lz4), with the list of partitions present in the schema's metadata (binary: decoding it costs
microseconds whatever the partition count). Reading partition ``p`` of a set of spill files reads one
batch from each: every partition is processed alone, so memory is bounded by the largest partition,
never by the corpus. The number of partitions comes from a memory budget (:func:`partitions_for`). A
reader of a contiguous range of partitions (:func:`read_partitions`) opens each file once for the range,
so the fixed cost of an open is paid per (range, file), and what is left per (partition, file) pair is
one batch, the same at 18 partitions and at 4,096.

Documents are ``node`` keys (uint64): ``shard index << 32 | row``. Their order is the keeper order:
the lowest node of a cluster (the first occurrence in manifest order) is kept. A spill file written by one
shard stores its node keys as their low 32 bits (the row) with the shared high word in the metadata, and
readers get the uint64 keys back: split over many partitions the keys barely compress (benchmarks/RESULTS.md,
*Spill bytes per row grow with the partition count*).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from airflow_curation.core import spill_pack, storage
from airflow_curation.core.arrays import from_numpy, partition_order, to_numpy
from airflow_curation.core.integrity import IntegrityError
from airflow_curation.core.jit import numba
from airflow_curation.core.pairs import check_pairs, sort_rows

_META_KEY = b"curation.partitions"  # JSON {partition: batch}: spill files written before _LIST_KEY
_LIST_KEY = b"curation.partition_list"  # int32 little-endian, ascending: the partitions present
_HIGH_KEY = b"curation.high32"  # JSON {column: high word}: uint64 columns stored as their low 32 bits
_NO_HIGH: dict[str, int] = {}
# A spill file's name ends so: Arrow IPC, not Parquet (a `**/*.parquet` glob of DuckDB or Daft over an output
# folder must not take it for a Parquet file and fail on it).
SPILL_SUFFIX = ".arrow"
_IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4_frame", use_threads=False)
_IPC_READ = pa.ipc.IpcReadOptions(use_threads=False)
_RELEASE_EVERY = 8 << 20  # bytes of pieces copied between two returns of Arrow's freed pages


class UnreadableSpill(IntegrityError):
    """A spill file that is there but cannot be read (truncated or corrupted), named; ``uri`` is the file."""

    def __init__(self, uri: str, error: BaseException) -> None:
        super().__init__(f"spill file {uri} is unreadable (truncated or corrupted?): {error}")
        self.uri = uri
        self.reason = str(error)


_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
ROW_BITS = 32


def bucket_pairs(bands: np.ndarray) -> set[tuple[int, int]]:
    """Every pair of rows of ``bands`` (documents x band hashes) that share a bucket in any band.

    The in-memory, all-pairs statement of LSH candidates: small inputs only (tests and benchmarks measure
    precision and recall with it); the stage uses the spilled star edges below.
    """
    pairs = set()
    for b in range(bands.shape[1]):
        groups: dict[int, list[int]] = {}
        for doc, h in enumerate(bands[:, b].tolist()):
            groups.setdefault(h, []).append(doc)
        for members in groups.values():
            pairs.update((x, y) for k, x in enumerate(members) for y in members[k + 1 :])
    return pairs


def node_keys(shard_index: int, rows: np.ndarray | int) -> np.ndarray:
    """Node keys of ``rows`` (positions inside shard number ``shard_index``)."""
    rows = np.arange(rows, dtype=np.uint64) if np.isscalar(rows) else np.asarray(rows, np.uint64)
    if shard_index < 0 or shard_index >= 2**31:
        raise ValueError(f"shard index {shard_index} out of range")
    if rows.size and int(rows.max()) >= 2**ROW_BITS:
        raise ValueError("a shard holds more than 2**32 rows")
    return (np.uint64(shard_index) << np.uint64(ROW_BITS)) | rows


def shard_of(nodes: np.ndarray) -> np.ndarray:
    return (nodes >> np.uint64(ROW_BITS)).astype(np.int64)


def row_of(nodes: np.ndarray) -> np.ndarray:
    return (nodes & np.uint64(2**ROW_BITS - 1)).astype(np.int64)


def mix64(x: np.ndarray) -> np.ndarray:
    """A bijective 64-bit mixer (murmur3's finaliser): spreads keys evenly over partitions."""
    x = np.asarray(x, np.uint64).copy()
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(33)
        x *= _M1
        x ^= x >> np.uint64(33)
        x *= _M2
        x ^= x >> np.uint64(33)
    return x


def partition_of(keys: np.ndarray, num_partitions: int) -> np.ndarray:
    return (mix64(keys) % np.uint64(num_partitions)).astype(np.int64)


def partitions_for(total_bytes: int, memory_budget: int, expansion: float = 4.0, maximum: int = 4096) -> int:
    """Partitions such that one partition, expanded ``expansion`` times while it is sorted and
    grouped, fits ``memory_budget``."""
    if memory_budget <= 0:
        raise ValueError(f"memory budget must be positive, got {memory_budget}")
    return int(min(maximum, max(1, math.ceil(total_bytes * expansion / memory_budget))))


def write_partitioned(uri: str, columns: dict[str, np.ndarray | pa.Array], partition: np.ndarray) -> int:
    """Write ``columns`` (numpy or Arrow arrays) to one Arrow IPC file, one record batch per non-empty
    partition, in partition order, rows of a partition in their given order; returns rows. The index is the
    ascending list of partitions present (batch i holds the i-th)."""
    partition = np.asarray(partition, np.int64)
    order, counts = partition_order(partition)
    present = np.flatnonzero(counts)
    ends = np.cumsum(counts)[present]
    starts = ends - counts[present]
    arrays, high = {}, {}
    for name, col in columns.items():
        if isinstance(col, pa.Array):
            arrays[name] = col.take(from_numpy(order))
            continue
        col = np.asarray(col)[order]
        word = _shared_high_word(col)
        if word is not None:
            # One writer's node keys (shard << 32 | row) share their high word. Split P ways, a
            # partition's rows are a random subset: lz4 only matches the keys' constant high bytes
            # (~5.5 B a key at P = 4,096), the low word alone is 4 B and cheaper to write and read.
            high[name] = word
            col = col.astype(np.uint32)
        arrays[name] = from_numpy(col)
    batch = pa.record_batch(arrays)
    # Binary, not JSON: a reader decodes it in C (a few microseconds at 4,096 partitions, where parsing a
    # JSON map cost ~0.8 ms per open, paid once per (partition, file) pair: O(P^2 x files) in all).
    metadata = {_LIST_KEY: present.astype("<i4").tobytes()}
    if high:
        metadata[_HIGH_KEY] = json.dumps(high).encode()
    schema = batch.schema.with_metadata(metadata)
    # lz4, one thread: ~as cheap as no compression to write and read, ~25% fewer bytes on random hashes.
    # The file is built in memory (one shard's or one partition's rows) and written atomically in one call.
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, schema, options=_IPC_OPTIONS) as w:
        for s, e in zip(starts, ends):
            w.write_batch(batch.slice(int(s), int(e - s)))
    with storage.atomic_open(uri) as f:
        f.write(sink.getvalue())
    return int(len(partition))


def merge_partitions(uris: list[str], lo: int, hi: int, out_uri: str) -> int:
    """Partitions ``lo <= p < hi`` of the spill files ``uris`` as one spill file ``out_uri``: one record batch
    a partition present, its pieces in the order of ``uris`` (one ranged read of each file). A reader of a
    part of the range then opens one file where it opened ``len(uris)``: the merge of a two-pass shuffle.
    Holds the range's pieces and the file built (about twice the range's bytes): each partition's pieces are
    released as its batch is written. Returns rows."""
    parts = [(p, [_one_batch(b) for b in got]) for p, got in read_partition_pieces(uris, lo, hi, None) if got]
    present = np.array([p for p, _ in parts], np.int64)
    rows = 0
    # Streamed to the file (a temporary one, renamed when whole), not built in memory first.
    with storage.atomic_open(out_uri) as f:
        if not parts:  # nothing in the range: a file with no batch, which every reader takes as empty
            pa.ipc.new_file(f, pa.schema([]).with_metadata({_LIST_KEY: b""}), options=_IPC_OPTIONS).close()
            return 0
        schema = parts[0][1][0].schema.with_metadata({_LIST_KEY: present.astype("<i4").tobytes()})
        with pa.ipc.new_file(f, schema, options=_IPC_OPTIONS) as w:
            for k in range(len(parts)):
                got, parts[k] = parts[k][1], None  # released as written
                batch = got[0] if len(got) == 1 else pa.concat_batches(got)
                w.write_batch(batch.replace_schema_metadata(schema.metadata))
                rows += batch.num_rows
                del got, batch
    return rows


def _shared_high_word(col: np.ndarray) -> int | None:
    """The high 32 bits every value of a uint64 column shares, or None (other dtypes, empty, or mixed)."""
    if col.dtype != np.uint64 or not col.size:
        return None
    lo, hi = int(col.min()) >> ROW_BITS, int(col.max()) >> ROW_BITS
    return lo if lo == hi else None


def _widen(batch: pa.RecordBatch | pa.Table, high: dict[str, int]) -> pa.RecordBatch | pa.Table:
    """Columns stored as their low 32 bits (:data:`_HIGH_KEY`) back to the uint64 values written."""
    for name, word in high.items():
        i = batch.schema.get_field_index(name)
        if i < 0:
            continue
        wide = to_numpy(batch.column(i)).astype(np.uint64)
        wide |= np.uint64(word << ROW_BITS)
        batch = batch.set_column(i, name, from_numpy(wide))
    return batch


def _index(metadata: dict | None) -> tuple[np.ndarray, np.ndarray]:
    """(partitions present ascending, their batch or row-group numbers) from a spill file's metadata: the
    binary list, or the JSON map files written before it (IPC and Parquet) carry."""
    metadata = metadata or {}
    if _LIST_KEY in metadata:
        present = np.frombuffer(metadata[_LIST_KEY], "<i4").astype(np.int64)
        return present, np.arange(present.size)
    index = json.loads(metadata.get(_META_KEY, b"{}"))
    pairs = sorted((int(p), int(i)) for p, i in index.items())
    return np.array([p for p, _ in pairs], np.int64), np.array([i for _, i in pairs], np.int64)


def _read_range(uri: str, lo: int, hi: int, names: list[str]) -> list[tuple[int, pa.RecordBatch | pa.Table, dict]]:
    """Partitions ``lo <= p < hi`` of one spill file, one open and one index decode for the range: the
    (partition, batch, high words of its narrowed columns) triples present, ascending; their batches are
    consecutive in the file, as stored (see :func:`_widen`). Spill files
    written before they were Arrow IPC (Parquet, one row group per partition: listed by earlier
    snapshots' indexes, or left by a run resumed across an upgrade) are read as they are; packs of spill
    files (:func:`pack_spills`) give the pieces of each packed file."""
    if spill_pack.is_pack(uri):
        return spill_pack.read_range(uri, lo, hi, names)
    with storage.open_arrow(uri) as f:
        try:
            try:
                r = pa.ipc.open_file(f, options=_IPC_READ)
            except pa.ArrowInvalid:
                f.seek(0)
                if f.read(4) != b"PAR1":
                    raise
                f.seek(0)
                pf = pq.ParquetFile(f)
                present, groups = _index(pf.schema_arrow.metadata)
                a, b = np.searchsorted(present, [lo, hi])
                return [
                    (int(present[k]), pf.read_row_group(int(groups[k]), columns=names, use_threads=False), _NO_HIGH)
                    for k in range(a, b)
                ]
            metadata = r.schema.metadata or {}
            present, batches = _index(metadata)
            high = json.loads(metadata[_HIGH_KEY]) if _HIGH_KEY in metadata else _NO_HIGH
            a, b = np.searchsorted(present, [lo, hi])
            pick = (lambda b: b.select(names)) if names is not None else (lambda b: b)
            return [(int(present[k]), pick(r.get_batch(int(batches[k]))), high) for k in range(a, b)]
        except (pa.ArrowInvalid, OSError) as e:
            raise UnreadableSpill(uri, e) from e


def pack_spills(uris: list[str], out_uri: str) -> int:
    """The spill files ``uris`` as one pack (:mod:`~airflow_curation.core.spill_pack`): a reader of a range
    of partitions opens it once for all of them and gets the same pieces in the same order as from
    ``uris``. Their batches are copied as stored (no decode); every file is held in memory until written.
    Returns the pack's bytes."""
    return spill_pack.write(out_uri, [_pack_source(uri) for uri in uris], uris)


def _pack_source(uri: str) -> spill_pack.Source:
    data = storage.fetch(uri)  # one GET; a local file mapped
    try:
        metadata = pa.ipc.open_file(data, options=_IPC_READ).schema.metadata or {}
        present, batches = _index(metadata)
        if np.array_equal(batches, np.arange(present.size)):
            high = json.loads(metadata[_HIGH_KEY]) if _HIGH_KEY in metadata else _NO_HIGH
            return spill_pack.Source(data, present, high)
    except pa.ArrowInvalid:
        pass
    # Written before the current layout (Parquet, or a JSON index): rewritten in it, decoded once (a run
    # resumed across an upgrade); an unreadable file fails here, naming itself.
    pieces = _read_range(uri, 0, np.iinfo(np.int32).max, None)
    sink = pa.BufferOutputStream()
    if pieces:
        tables = [_one_batch(_widen(t, high)) for _, t, high in pieces]
        present = np.array([p for p, _, _ in pieces], np.int64)
        schema = tables[0].schema.with_metadata({_LIST_KEY: present.astype("<i4").tobytes()})
        with pa.ipc.new_file(sink, schema, options=_IPC_OPTIONS) as w:
            for t in tables:  # one batch a partition, as write_partitioned stores them
                w.write_batch(t.replace_schema_metadata(schema.metadata))
        return spill_pack.Source(sink.getvalue(), present, _NO_HIGH)
    return spill_pack.Source(None, np.empty(0, np.int64), _NO_HIGH)


def _one_batch(t: pa.RecordBatch | pa.Table) -> pa.RecordBatch:
    if isinstance(t, pa.Table):
        t = pa.RecordBatch.from_arrays([c.combine_chunks() for c in t.columns], schema=t.schema)
    return t.replace_schema_metadata(None)


def read_partitions(
    uris: list[str], lo: int, hi: int, columns: dict[str, np.dtype]
) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """``(p, rows of partition p from every file in uris, in that order)`` for each ``lo <= p < hi``.

    Each file is opened once for the whole range (a reader of a range of k partitions pays one open and
    one index decode per file, not k), so the range's rows are held until their partition's turn: a
    caller sizes the range to its memory. Each partition's pieces are released as it is handed out."""
    for p, got in _stored_pieces(uris, lo, hi, list(columns)):
        yield p, _columns_of(got, columns)  # which empties got: the pieces go as they are copied


def _columns_of(got: list[tuple], columns: dict[str, np.dtype]) -> dict[str, np.ndarray]:
    """The pieces' rows as one array a column, in their order. Each piece is copied into place and released,
    and Arrow's allocator gives the freed pages back as it goes, so a partition's peak is its columns and little
    more (the pieces held, concatenated and widened beside them, cost ~5.4x a boilerplate partition's (key, count)
    pairs with the caller's sort: benchmarks/RESULTS.md, *a partition summed in place*). Empties ``got``."""
    rows = sum(t.num_rows for t, _ in got)
    part = {name: np.empty(rows, dtype) for name, dtype in columns.items()}
    at = freed = 0
    for i in range(len(got)):
        piece, high = got[i]
        got[i] = None
        n = piece.num_rows
        for name, out in part.items():
            out[at : at + n] = to_numpy(piece.column(name))
            if name in high:  # a narrowed uint64 column (write_partitioned): its shared high word put back
                out[at : at + n].view(np.uint64)[:] |= np.uint64(high[name] << ROW_BITS)
        at += n
        freed += piece.nbytes
        del piece
        if freed >= _RELEASE_EVERY:  # Arrow's allocator keeps freed pages: given back, they are the columns' room
            pa.default_memory_pool().release_unused()
            freed = 0
    got.clear()
    return part


def read_partition_pieces(
    uris: list[str], lo: int, hi: int, names: list[str]
) -> Iterator[tuple[int, list[pa.RecordBatch | pa.Table]]]:
    """``(p, the Arrow pieces of partition p, one per file of uris that has it, in that order)`` for each
    ``lo <= p < hi``; each file opened once for the range (as :func:`read_partitions`, which converts them
    to numpy columns). Each partition's pieces are released as it is handed out."""
    for p, got in _stored_pieces(uris, lo, hi, names):
        yield p, [_widen(t, high) for t, high in got]
        del got


def _stored_pieces(uris: list[str], lo: int, hi: int, names: list[str]) -> Iterator[tuple[int, list[tuple]]]:
    """``(p, [(piece as stored, its high words)...])`` for each ``lo <= p < hi``, each file opened once. A
    partition's list is held here only until the next one's turn; a caller that empties it releases its pieces
    at once."""
    pieces: list[list] = [[] for _ in range(lo, hi)]
    for uri in uris:
        for p, t, high in _read_range(uri, lo, hi, names):
            pieces[p - lo].append((t, high))
    for k in range(hi - lo):
        got, pieces[k] = pieces[k], []
        yield lo + k, got
        del got


def read_partition(uris: list[str], p: int, columns: dict[str, np.dtype]) -> dict[str, np.ndarray]:
    """Rows of partition ``p`` from every spill file in ``uris`` (in that order)."""
    return next(read_partitions(uris, p, p + 1, columns))[1]


def partition_ranges(num_partitions: int, units: int) -> list[tuple[int, int]]:
    """``units`` contiguous ranges ``(lo, hi)`` covering ``0..num_partitions-1`` as evenly as possible (no
    more ranges than partitions)."""
    units = max(1, min(int(units), int(num_partitions)))
    bounds = [num_partitions * k // units for k in range(units + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


def gather_partition(
    uris: list[str], p: int, columns: dict[str, np.dtype], out_uri: str, by_shard: bool = False
) -> int:
    """Partition ``p`` of every file in ``uris``, in that order, written to ``out_uri`` alone: a reader of
    partition ``p`` then opens one file instead of one per file in ``uris``. ``by_shard``: one batch per
    shard of the ``node`` column (:func:`read_gathered` reads one shard's alone), else one batch ``p``.
    Returns rows."""
    rows = read_partition(uris, p, columns)
    n = len(next(iter(rows.values()))) if rows else 0
    return write_partitioned(out_uri, rows, shard_of(rows["node"]) if by_shard else np.full(n, p, np.int64))


def read_gathered(uri: str, columns: dict[str, np.dtype], shard: int | None = None) -> dict[str, np.ndarray]:
    """The rows of one file :func:`gather_partition` wrote ``by_shard``: those of ``shard`` alone (one batch
    read: what a shard's reader pays no longer grows with the shards that share its output partition), or
    every row (``shard`` None), rows of a shard in the order gathered."""
    lo, hi = (shard, shard + 1) if shard is not None else (0, np.iinfo(np.int64).max)
    return _columns_of([(t, high) for _, t, high in _read_range(uri, lo, hi, list(columns))], columns)


def read_output_partition(
    uris: list[str], q: int, columns: dict[str, np.dtype], gathered: bool, by_shard: bool, shard: int | None = None
) -> dict[str, np.ndarray]:
    """Output partition ``q`` of the global phase's files ``uris`` (labels, exact duplicates, prior matches):
    ``by_shard``, the ``q``-th file's batch of ``shard`` alone (every batch if None, :func:`read_gathered`);
    else partition ``q`` of the files that hold it (:func:`partition_sources`)."""
    if by_shard:
        return read_gathered(uris[q], columns, shard)
    return read_partition(partition_sources(uris, q, gathered), q, columns)


def partition_sources(uris: list[str], p: int, gathered: bool) -> list[str]:
    """The files that hold partition ``p``: every one of ``uris``, or where they were gathered by
    partition (:func:`gather_partition`, one file per partition), the ``p``-th alone."""
    return uris[p : p + 1] if gathered else uris


def star_edges(keys: list[np.ndarray], nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Candidate edges of one partition: within each bucket (rows with equal ``keys``), every member
    is linked to the bucket's lowest node. A bucket of k members gives k-1 edges, not k(k-1)/2, and
    connectivity is the same. Returns ``(lowest, member)`` arrays, ``lowest < member``."""
    if nodes.size == 0:
        return np.empty(0, np.uint64), np.empty(0, np.uint64)
    order = np.lexsort([nodes, *reversed(keys)])
    nodes = nodes[order]
    keys = [k[order] for k in keys]
    new = np.zeros(nodes.size, bool)
    new[0] = True
    for k in keys:
        new[1:] |= k[1:] != k[:-1]
    group = np.cumsum(new) - 1
    lowest = nodes[new][group]
    mask = nodes != lowest
    return lowest[mask], nodes[mask]


def star_edges_in_place(bucket: np.ndarray, node: np.ndarray) -> int:
    """:func:`star_edges` of one key column, written over the partition's own rows (both uint64, writable): for
    the ``e`` returned, ``(bucket[:e], node[:e])`` are the edges (lowest, member), in bucket order. No memory
    beside the rows: with a ``lexsort`` index and gathered columns, a partition took ~4x its rows' bytes
    (benchmarks/RESULTS.md, *Dedup's global phase: a partition's memory*)."""
    check_pairs(bucket, node, "star_edges_in_place")
    return int(_star_in_place(bucket, node, None))


def star_edges_keyed_in_place(hi: np.ndarray, lo: np.ndarray, node: np.ndarray) -> int:
    """:func:`star_edges` of a two-column key (dedup's 128-bit content hashes), written over the rows: for the
    ``e`` returned, ``(hi[:e], node[:e])`` are the edges (lowest, member), by key; ``lo`` is left in no order.
    The rows are sorted by key with their node carried along, so the same edges as :func:`star_edges` (in another
    order within a bucket) without its index and gathered copies."""
    check_pairs(hi, lo, "star_edges_keyed_in_place")
    check_pairs(hi, node, "star_edges_keyed_in_place")
    return int(_star_in_place(hi, lo, node))


@numba.njit(cache=True, nogil=True)
def _star_in_place(first: np.ndarray, second: np.ndarray, payload) -> int:  # pragma: no cover - compiled
    """Rows sorted, then each bucket's members linked to its lowest: the key is ``first`` and the members
    ``second``, or, with a ``payload``, the key is both columns and the members the payload. The edges go to
    ``first[:e]`` and the members' array, over rows already read (a bucket is read whole before its edges are
    written, and a bucket of k rows writes at most k - 1 of them)."""
    n = len(first)
    sort_rows(first, second, payload)
    member = second if payload is None else payload
    e = 0
    start = 0
    while start < n:
        end = start + 1
        lowest = member[start]
        while end < n and first[end] == first[start] and (payload is None or second[end] == second[start]):
            lowest = min(lowest, member[end])
            end += 1
        for i in range(start, end):
            v = member[i]
            if v != lowest:  # e <= i: only rows already read are written over
                first[e], member[e] = lowest, v
                e += 1
        start = end
    return e


def unique_edges(src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct pairs, sorted by (src, dst)."""
    if src.size == 0:
        return src, dst
    order = np.lexsort([dst, src])
    src, dst = src[order], dst[order]
    keep = np.ones(src.size, bool)
    keep[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
    return src[keep], dst[keep]


def is_power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def next_power_of_two(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def read_nested_partition(
    uris: list[str], p: int, num_partitions: int, file_partitions: int, columns: dict[str, np.dtype], key: str
) -> dict[str, np.ndarray]:
    """Rows of partition ``p`` of ``num_partitions`` from spill files written with ``file_partitions``.

    With both counts powers of two, :func:`partition_of` nests (``mix64(k) % 2**b % 2**a`` is
    ``mix64(k) % 2**a``): partition ``p`` is row groups ``p, p + n, p + 2n...`` of a finer file, or one
    row group of a coarser file filtered on ``key``. Files written at another time, with another
    partition count, are read one partition at a time all the same (what incremental dedup needs).
    """
    if not (is_power_of_two(num_partitions) and is_power_of_two(file_partitions)):
        raise ValueError(f"nested partitions need powers of two, got {num_partitions} and {file_partitions}")
    if file_partitions >= num_partitions:
        parts = [read_partition(uris, q, columns) for q in range(p, file_partitions, num_partitions)]
        return {
            name: np.concatenate([r[name] for r in parts]) if parts else np.empty(0, dtype)
            for name, dtype in columns.items()
        }
    r = read_partition(uris, p % file_partitions, columns)
    mine = partition_of(r[key], num_partitions) == p
    return {name: v[mine] for name, v in r.items()}
