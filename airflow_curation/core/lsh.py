"""LSH buckets that scale past memory: hash-partitioned spill files and candidate pairs per partition.

A spill file holds the rows one writer produced, sorted into one Arrow IPC record batch per partition
(lz4), with the partition -> batch index in the schema's metadata. Reading partition ``p`` of a set of
spill files reads one batch from each: every partition is processed alone, so memory is bounded by the
largest partition, never by the corpus. The number of partitions comes from a memory budget
(:func:`partitions_for`). Spill files are read and written once per (partition, file) pair, so the fixed
cost of each counts: an IPC batch costs about half what a Parquet row group did, both ways.

Documents are ``node`` keys (uint64): ``shard index << 32 | row``. Their order is the keeper order:
the lowest node of a cluster (the first occurrence in manifest order) is kept.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from airflow_curation.core import storage
from airflow_curation.core.integrity import IntegrityError

_META_KEY = b"curation.partitions"
_IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4_frame", use_threads=False)
_IPC_READ = pa.ipc.IpcReadOptions(use_threads=False)
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


def write_partitioned(uri: str, columns: dict[str, np.ndarray], partition: np.ndarray) -> int:
    """Write ``columns`` to one Arrow IPC file, one record batch per non-empty partition; returns rows."""
    partition = np.asarray(partition, np.int64)
    order = np.argsort(partition, kind="stable")
    sorted_parts = partition[order]
    present, starts = np.unique(sorted_parts, return_index=True)
    ends = np.append(starts[1:], len(sorted_parts)).astype(np.int64)
    index = {int(p): i for i, p in enumerate(present)}
    batch = pa.record_batch({name: pa.array(np.asarray(col)[order]) for name, col in columns.items()})
    schema = batch.schema.with_metadata({_META_KEY: json.dumps(index).encode()})
    # lz4, one thread: ~as cheap as no compression to write and read, ~25% fewer bytes on random hashes.
    # The file is built in memory (one shard's or one partition's rows) and written atomically in one call.
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, schema, options=_IPC_OPTIONS) as w:
        for s, e in zip(starts, ends):
            w.write_batch(batch.slice(int(s), int(e - s)))
    with storage.atomic_open(uri) as f:
        f.write(sink.getvalue())
    return int(len(partition))


def _read_batch(uri: str, p: int, names: list[str]) -> pa.RecordBatch | pa.Table | None:
    """Partition ``p`` of one spill file (None when it has no rows there). Spill files written before they
    were Arrow IPC (Parquet, one row group per partition: listed by earlier snapshots' indexes, or left by
    a run resumed across an upgrade) are read as they are."""
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
                rg = json.loads((pf.schema_arrow.metadata or {}).get(_META_KEY, b"{}")).get(str(p))
                return None if rg is None else pf.read_row_group(rg, columns=names, use_threads=False)
            i = json.loads((r.schema.metadata or {}).get(_META_KEY, b"{}")).get(str(p))
            return None if i is None else r.get_batch(i).select(names)
        except (pa.ArrowInvalid, OSError) as e:
            raise IntegrityError(f"spill file {uri} is unreadable (truncated or corrupted?): {e}") from e


def read_partition(uris: list[str], p: int, columns: dict[str, np.dtype]) -> dict[str, np.ndarray]:
    """Rows of partition ``p`` from every spill file in ``uris`` (in that order)."""
    parts: dict[str, list[np.ndarray]] = {name: [] for name in columns}
    names = list(columns)
    for uri in uris:
        t = _read_batch(uri, p, names)
        if t is None:
            continue
        for name in columns:
            parts[name].append(t.column(name).to_numpy(zero_copy_only=False))
    return {
        name: (np.concatenate(v).astype(columns[name], copy=False) if v else np.empty(0, columns[name]))
        for name, v in parts.items()
    }


def gather_partition(uris: list[str], p: int, columns: dict[str, np.dtype], out_uri: str) -> int:
    """Partition ``p`` of every file in ``uris``, in that order, written to ``out_uri`` alone (one batch):
    a reader of partition ``p`` then opens one file instead of one per file in ``uris``. Returns rows."""
    rows = read_partition(uris, p, columns)
    n = len(next(iter(rows.values()))) if rows else 0
    return write_partitioned(out_uri, rows, np.full(n, p, np.int64))


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
