"""The two phases of export as plain functions of files (picklable, so any mapper can run them).

The order is one rule: sequence ``r`` of packed shard number ``s`` (manifest order) has the node key
``n = s << 32 | r`` and the hash ``h = mix64(n ^ mix64(seed))`` (:func:`~airflow_curation.core.lsh.mix64`,
a bijection: no two sequences share ``h``). It goes to bucket ``h % buckets``, and the written order is
buckets in order, each sorted by ``h``: the sort of ``(h % buckets, h)``. Nothing else (worker counts,
unit ranges, the order spill files are read in) enters it.

1. :func:`scatter_shard` (per packed shard): its sequences, cast to the token dtype, spilled to one Arrow
   IPC file, one record batch per bucket, buckets contiguous (:func:`~airflow_curation.core.lsh.write_partitioned`).
2. :func:`gather_buckets` (per contiguous range of buckets): one ranged read of every spill file
   (:func:`~airflow_curation.core.lsh.read_partition_pieces`), then per bucket the sort by ``h`` and the
   files of every format.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from airflow_curation.core import storage
from airflow_curation.core.arrays import from_numpy, to_numpy
from airflow_curation.core.fingerprint import checksum_bytes
from airflow_curation.core.lsh import mix64, node_keys, read_partition_pieces, row_of, shard_of, write_partitioned
from airflow_curation.stages.base import file_record
from airflow_curation.stages.export import formats
from airflow_curation.stages.tokenize.packing import (
    DOC_IDS,
    DOC_OFFSETS,
    DOC_STARTS,
    INPUT_IDS,
    N_TOKENS,
    packed_schema,
)

NODE = "node"
BOUNDARIES = (DOC_IDS, DOC_STARTS, DOC_OFFSETS)
ROWS_PER_GROUP = 1024  # tokenize's row groups


def order_hash(nodes: np.ndarray, seed: int) -> np.ndarray:
    """``h = mix64(n ^ mix64(seed))`` of node keys ``n``: the key of the whole order (module doc)."""
    salt = mix64(np.array([seed & (2**64 - 1)], np.uint64))[0]
    return mix64(np.asarray(nodes, np.uint64) ^ salt)


def bucket_of(h: np.ndarray, buckets: int) -> np.ndarray:
    return (h % np.uint64(buckets)).astype(np.int64)


def scatter_shard(
    packed_uri: str,
    shard_index: int,
    seed: int,
    buckets: int,
    dtype: str,
    vocab_size: int,
    boundaries: bool,
    spill_uri: str,
) -> dict[str, int]:
    """Phase 1 for one packed shard: its sequences to ``spill_uri``, one batch per bucket. ``boundaries``:
    carry ``doc_ids``/``doc_starts``/``doc_offsets`` too (the Parquet format writes them)."""
    names = [INPUT_IDS, N_TOKENS, *(BOUNDARIES if boundaries else ())]
    with storage.open_read(packed_uri) as f:
        table = pq.ParquetFile(f).read(columns=names, use_threads=False)
    n = table.num_rows
    ids = table.column(INPUT_IDS).combine_chunks()
    seq_len = ids.type.list_size
    flat = to_numpy(ids.flatten()) if n else np.empty(0, np.int32)
    if flat.size and (int(flat.min()) < 0 or int(flat.max()) >= vocab_size):
        bad = int(flat.max()) if int(flat.max()) >= vocab_size else int(flat.min())
        raise ValueError(f"export: {packed_uri} holds token id {bad}, outside the vocabulary of {vocab_size}")
    typed = pa.FixedSizeListArray.from_arrays(from_numpy(flat.astype(dtype)), seq_len)
    nodes = node_keys(shard_index, n)
    columns: dict[str, Any] = {NODE: nodes, INPUT_IDS: typed, N_TOKENS: table.column(N_TOKENS).combine_chunks()}
    for name in names[2:]:
        columns[name] = table.column(name).combine_chunks()
    write_partitioned(spill_uri, columns, bucket_of(order_hash(nodes, seed), buckets))
    return {"sequences": n, "tokens": int(to_numpy(table.column(N_TOKENS)).sum()) if n else 0, "seq_len": seq_len}


def _put(uri: str, data: bytes) -> dict[str, Any]:
    storage.write_bytes(uri, data)
    return file_record(uri, len(data), checksum_bytes(data))


def bucket_stem(bucket: int) -> str:
    return f"{bucket:05d}"


def gather_buckets(
    lo: int,
    hi: int,
    spill_uris: list[str],
    seed: int,
    seq_len: int,
    dtype: str,
    fmts: list[str],
    out_dir: str,
    mds_size_limit: int,
) -> dict[str, Any]:
    """Phase 2 for the buckets ``lo <= b < hi``: each spill file read once for the range, then per bucket
    its sequences sorted by ``h`` and written in every format of ``fmts``, and its order (source shard
    index and row of each written sequence) to ``order/<bucket>.parquet``. Returns the files written and,
    per bucket, its counts and MDS index entries."""
    names = [NODE, INPUT_IDS, N_TOKENS, *(BOUNDARIES if "parquet" in fmts else ())]
    files: list[dict] = []
    buckets: list[dict] = []
    for b, pieces in read_partition_pieces(spill_uris, lo, hi, names):
        table = pa.Table.from_batches(pieces) if pieces else None
        n = table.num_rows if table is not None else 0
        nodes = to_numpy(table.column(NODE)).astype(np.uint64) if n else np.empty(0, np.uint64)
        order = np.argsort(order_hash(nodes, seed), kind="stable")
        if n:
            table = table.take(from_numpy(order))
            nodes = nodes[order]
            tokens = to_numpy(table.column(INPUT_IDS).combine_chunks().flatten()).reshape(n, seq_len)
            lengths = to_numpy(table.column(N_TOKENS)).astype(np.int64)
        else:
            tokens, lengths = np.empty((0, seq_len), dtype), np.empty(0, np.int64)
        stem = bucket_stem(b)
        entry: dict[str, Any] = {"bucket": b, "sequences": n, "tokens": int(lengths.sum()), "mds": []}
        if "megatron" in fmts:
            bin_data, idx_data = formats.megatron_files(tokens.astype(dtype, copy=False), lengths)
            files.append(_put(storage.join(out_dir, "megatron", stem + ".bin"), bin_data))
            files.append(_put(storage.join(out_dir, "megatron", stem + ".idx"), idx_data))
        if "mds" in fmts:
            for data, info in formats.mds_shards(
                f"shard.{stem}", tokens.astype(dtype, copy=False), lengths, mds_size_limit
            ):
                files.append(_put(storage.join(out_dir, "mds", info["raw_data"]["basename"]), data))
                entry["mds"].append(info)
        if "parquet" in fmts:
            files.append(
                _put(storage.join(out_dir, "parquet", stem + ".parquet"), _packed_parquet(table, tokens, seq_len))
            )
        order_table = pa.table(
            {"shard": from_numpy(shard_of(nodes).astype(np.int32)), "row": from_numpy(row_of(nodes).astype(np.int64))}
        )
        files.append(_put(storage.join(out_dir, "order", stem + ".parquet"), _parquet_bytes(order_table)))
        buckets.append(entry)
    return {"files": files, "buckets": buckets}


def _packed_parquet(table: pa.Table | None, tokens: np.ndarray, seq_len: int) -> bytes:
    """The bucket in tokenize's packed layout (int32 ids, padding kept, document boundaries)."""
    schema = packed_schema(seq_len)
    if table is None or table.num_rows == 0:
        return _parquet_bytes(schema.empty_table())
    ids = pa.FixedSizeListArray.from_arrays(from_numpy(tokens.reshape(-1).astype(np.int32)), seq_len)
    out = pa.Table.from_arrays([ids, *(table.column(c) for c in (N_TOKENS, *BOUNDARIES))], schema=schema)
    return _parquet_bytes(out)


def _parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd", row_group_size=ROWS_PER_GROUP)
    return sink.getvalue().to_pybytes()
