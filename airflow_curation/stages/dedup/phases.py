"""The three phases of dedup as plain functions of files (picklable, so any mapper can run them).

1. :func:`sign_shard` (per shard): exact keys and MinHash band hashes, spilled by bucket partition.
2. :func:`bucket_partitions` (per contiguous range of partitions): candidate edges inside each bucket
   (optionally verified by exact Jaccard), exact-duplicate nodes; then :func:`~airflow_curation.core.components.connected_components`.
3. :func:`shard_result` (per shard): ``cluster_id`` and the duplicate flags of the shard's rows.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_curation.core import storage
from airflow_curation.core.arrays import from_numpy, to_numpy
from airflow_curation.core.components import LABEL_COLUMNS, write_edges
from airflow_curation.core.fingerprint import checksum_bytes
from airflow_curation.core.integrity import IntegrityError
from airflow_curation.core.lsh import (
    node_keys,
    partition_of,
    read_output_partition,
    read_partitions,
    row_of,
    shard_of,
    star_edges_in_place,
    star_edges_keyed_in_place,
    write_partitioned,
)
from airflow_curation.core.minhash import MinHasher, MinHashParams, band_hashes, exact_keys, jaccard, prepare
from airflow_curation.core.pairs import distinct_pairs_in_place
from airflow_curation.core.schema import CLUSTER_ID, EXACT_DUPLICATE, ID, IS_DUPLICATE, NEAR_DUPLICATE, TEXT, string_ids
from airflow_curation.stages.text import ShardText

BAND_COLUMNS = {"bucket": np.uint64, "node": np.uint64}
EXACT_COLUMNS = {"hi": np.uint64, "lo": np.uint64, "node": np.uint64}
NODE_COLUMNS = {"node": np.uint64}


@dataclass(frozen=True)
class DedupParams:
    """Everything the phases need to agree on (it all enters the fingerprint)."""

    minhash: MinHashParams = field(default_factory=MinHashParams)
    bands: int = 9
    rows: int = 13
    threshold: float = 0.8
    exact: bool = True
    near: bool = True
    verify: bool = False
    partitions: int = 1


def read_keep(uri: str | None, column: str, rows: int) -> np.ndarray:
    """Which rows to consider: the upstream ``keep`` column when there is one, else all rows."""
    if uri is None:
        return np.ones(rows, bool)
    with storage.open_read(uri) as f:
        t = pq.ParquetFile(f).read(columns=[column], use_threads=False)
    if t.num_rows != rows:
        raise ValueError(f"{uri}: {t.num_rows} rows, but its shard has {rows}")
    return to_numpy(pc.fill_null(t.column(column), False)).astype(bool)


def sign_shard(
    shard: ShardText,
    shard_index: int,
    keep_uri: str | None,
    keep_column: str,
    params: DedupParams,
    bands_uri: str,
    exact_uri: str,
    batch_rows: int = 8192,
    ids_uri: str | None = None,
) -> dict:
    """Phase 1 for one shard: spill ``(bucket, node)`` per band and ``(hi, lo, node)`` exact keys; with
    ``ids_uri``, the shard's ids and keep mask there (:func:`write_ids`), all phase 3 then reads of it."""
    hasher = MinHasher(params.minhash)
    buckets, bnodes, his, los, enodes, ids = [], [], [], [], [], []
    n_rows = n_considered = n_tokenless = 0
    with storage.open_read(shard.shard_uri) as f:
        total = pq.ParquetFile(f).metadata.num_rows
    keep = read_keep(keep_uri, keep_column, total)
    # the shard's text, or its cleaned text (stages/text.py); one reader thread, a worker is one core
    for batch in shard.batches([ID, TEXT] if ids_uri else [TEXT], batch_rows):
        n = batch.num_rows
        mask = keep[n_rows : n_rows + n]
        nodes = node_keys(shard_index, np.arange(n_rows, n_rows + n, dtype=np.uint64))[mask]
        if ids_uri:
            ids.extend(batch.column(ID).chunks)
        column = batch.column(TEXT).combine_chunks()
        texts = column.filter(from_numpy(mask)) if not mask.all() else column
        n_rows += n
        n_considered += len(nodes)
        if not len(nodes):
            continue
        # One normalisation pass for both (the strict one exact keys need is valid for MinHash). Near
        # dedup alone takes the hasher's own, which sends ~10x fewer lines of multilingual text
        # through Python's NFKC (only characters that can change a \w+ token).
        if params.exact:
            texts = prepare(texts, params.minhash.normalization, params.minhash.lowercase)
        if params.exact:
            keys = exact_keys(texts, params.minhash.normalization, params.minhash.lowercase, prepared=True)
            his.append(keys[:, 0])
            los.append(keys[:, 1])
            enodes.append(nodes)
        if params.near:
            # LSH reads bands x rows values (117 of 128 at the default threshold): only those computed
            sig, counts = hasher.signatures(texts, prepared=params.exact, perms=params.bands * params.rows)
            has = counts > 0  # a document without tokens has no shingles: nothing to compare
            n_tokenless += int((~has).sum())
            bh = band_hashes(sig[has], params.bands, params.rows)
            buckets.append(bh.reshape(-1))
            bnodes.append(np.repeat(nodes[has], params.bands))
    empty = np.empty(0, np.uint64)
    if params.near:
        b = np.concatenate(buckets) if buckets else empty
        write_partitioned(
            bands_uri,
            {"bucket": b, "node": np.concatenate(bnodes) if bnodes else empty},
            partition_of(b, params.partitions),
        )
    if params.exact:
        hi = np.concatenate(his) if his else empty
        write_partitioned(
            exact_uri,
            {
                "hi": hi,
                "lo": np.concatenate(los) if los else empty,
                "node": np.concatenate(enodes) if enodes else empty,
            },
            partition_of(hi, params.partitions),
        )
    if ids_uri and ids:  # (an empty shard's phase 3 reads the shard: no rows, no type to keep)
        write_ids(ids_uri, pa.chunked_array(ids), keep)
    return {"rows": n_rows, "considered": n_considered, "tokenless": n_tokenless}


_IDS_MAGIC = b"CURIDS01"
_IDS_IPC = pa.ipc.IpcWriteOptions(compression="lz4", use_threads=False)


def write_ids(uri: str, ids: pa.ChunkedArray, keep: np.ndarray) -> None:
    """A shard's ``id`` column and keep mask, for phase 3: it then reads neither the shard nor its attrs (at
    plan scale a second pass over every shard's bytes, ~100x this file's). Arrow IPC, then the xxh64 of
    those bytes, its length and a marker: :func:`read_ids` checks it before parsing."""
    sink = pa.BufferOutputStream()
    table = pa.table({ID: ids, "keep": from_numpy(np.asarray(keep, bool))})
    with pa.ipc.new_file(sink, table.schema, options=_IDS_IPC) as w:
        w.write_table(table)
    body = sink.getvalue()
    digest = checksum_bytes(body).encode()
    with storage.atomic_open(uri) as f:
        f.write(body)
        f.write(digest + struct.pack("<I", len(digest)) + _IDS_MAGIC)


def read_ids(uri: str, rows: int | None = None) -> tuple[pa.Array, np.ndarray]:
    """:func:`write_ids`'s ids and keep mask, checked (``rows``: the shard's, when known).

    :raises IntegrityError: the file is truncated, corrupted or not the shard's (delete it: phase 3 then
        reads the shard and its attrs, verified against their manifest)."""
    data = storage.fetch(uri)  # one GET
    tail = len(_IDS_MAGIC) + 4
    try:
        if data.size < tail or data.slice(data.size - len(_IDS_MAGIC)).to_pybytes() != _IDS_MAGIC:
            raise ValueError("no end marker")
        (n,) = struct.unpack("<I", data.slice(data.size - tail, 4).to_pybytes())
        body = data.slice(0, data.size - tail - n)
        if checksum_bytes(body).encode() != data.slice(data.size - tail - n, n).to_pybytes():
            raise ValueError("checksum mismatch")
        table = pa.ipc.open_file(body).read_all()
    except (ValueError, struct.error, pa.ArrowInvalid) as e:
        raise IntegrityError(
            f"dedup ids file {uri} is unreadable ({e}): truncated or corrupted; delete it and phase 3 reads the "
            "shard and its attrs instead"
        ) from e
    if rows is not None and table.num_rows != rows:
        raise IntegrityError(f"dedup ids file {uri} has {table.num_rows} rows, its shard {rows}: delete it")
    return table.column(ID).combine_chunks(), to_numpy(table.column("keep")).astype(bool)


def _verify(
    a: np.ndarray, b: np.ndarray, shard_uris: list[tuple[str, str | None, bool]], params: DedupParams
) -> np.ndarray:
    """Which candidate pairs reach the threshold by exact Jaccard of their shingle sets."""
    hasher = MinHasher(params.minhash)
    needed = np.unique(np.concatenate([a, b]))
    shingles: dict[int, np.ndarray] = {}
    shards = shard_of(needed)
    for s in np.unique(shards):
        rows = row_of(needed[shards == s])
        texts = ShardText(*shard_uris[int(s)]).read([TEXT]).column(TEXT).take(from_numpy(rows))
        for node, text in zip(needed[shards == s].tolist(), texts.to_pylist()):
            shingles[node] = hasher.shingles(text or "")
    return np.array(
        [jaccard(shingles[x], shingles[y]) >= params.threshold for x, y in zip(a.tolist(), b.tolist())], bool
    )


def bucket_partitions(
    lo: int,
    hi: int,
    band_uris: list[str],
    exact_uris: list[str],
    shard_uris: list[tuple[str, str | None, bool]],
    params: DedupParams,
    cc_partitions: int,
    out_partitions: int,
    edges_uri: str,
    exact_dups_uri: str,
) -> dict:
    """Phase 2 for the partitions ``lo <= p < hi`` (one unit): edges of every bucket, and the nodes that are
    exact duplicates of a lower node. Each spill file is opened once for the range
    (:func:`~airflow_curation.core.lsh.read_partitions`); each partition is then bucketed alone (a bucket
    lies in one partition). Edges go to ``edges_uri`` for the components; exact duplicates to
    ``exact_dups_uri``, partitioned by shard so each shard's writer reads one partition."""
    stats = {"candidates": 0, "verified": 0, "exact_edges": 0}
    srcs, dsts, dups = [], [], []
    if params.near:
        for _, r in read_partitions(band_uris, lo, hi, BAND_COLUMNS):
            # Bucketed in the arrays read, the edges' copy kept and the partition's rows let go: a partition
            # costs its rows and its edges, not a sort index and gathered copies besides.
            bucket, node = r.pop("bucket"), r.pop("node")
            e = star_edges_in_place(bucket, node)
            m = distinct_pairs_in_place(bucket[:e], node[:e])
            a, b = bucket[:m].copy(), node[:m].copy()
            del bucket, node
            stats["candidates"] += int(a.size)
            if params.verify and a.size:
                ok = _verify(a, b, shard_uris, params)
                a, b = a[ok], b[ok]
            stats["verified"] += int(a.size)
            srcs.append(a)
            dsts.append(b)
    if params.exact:
        for _, r in read_partitions(exact_uris, lo, hi, EXACT_COLUMNS):
            key_hi, key_lo, node = r.pop("hi"), r.pop("lo"), r.pop("node")
            e = star_edges_keyed_in_place(key_hi, key_lo, node)
            a, b = key_hi[:e].copy(), node[:e].copy()
            del key_hi, key_lo, node
            stats["exact_edges"] += int(a.size)
            srcs.append(a)
            dsts.append(b)
            dups.append(b)
    empty = np.empty(0, np.uint64)
    write_edges(
        edges_uri, np.concatenate(srcs) if srcs else empty, np.concatenate(dsts) if dsts else empty, cc_partitions
    )
    dup_nodes = np.unique(np.concatenate(dups)) if dups else empty
    write_partitioned(exact_dups_uri, {"node": dup_nodes}, shard_of(dup_nodes) % out_partitions)
    return stats


def shard_result(
    shard_uri: str,
    shard_index: int,
    keep_uri: str | None,
    keep_column: str,
    label_uris: list[str],
    exact_dup_uris: list[str],
    out_partitions: int,
    gathered: bool = False,
    by_shard: bool = False,
    ids_uri: str | None = None,
    rows: int | None = None,
) -> pa.Table:
    """Phase 3 for one shard: ``id``, ``cluster_id`` (the keeper's node key; null for rows not
    considered), ``is_duplicate``, ``exact_duplicate``, ``near_duplicate``, same rows and order as
    the shard. ``by_shard``: the labels and exact duplicates were gathered one batch per shard, and only
    this shard's are read (else its whole output partition: the rows of every shard that shares it).
    ``ids_uri``: phase 1's ids file (:func:`write_ids`), read instead of the shard and its keep attrs."""
    if ids_uri:
        ids, keep = read_ids(ids_uri, rows)
        n = len(ids)
    else:
        with storage.open_read(shard_uri) as f:
            ids = pq.ParquetFile(f).read(columns=[ID], use_threads=False).column(0)
        n = len(ids)
        keep = read_keep(keep_uri, keep_column, n)
    q = shard_index % out_partitions
    labels = read_output_partition(label_uris, q, LABEL_COLUMNS, gathered, by_shard, shard_index)
    mine = shard_of(labels["node"]) == shard_index
    cluster = node_keys(shard_index, n).astype(np.int64)
    dup = np.zeros(n, bool)
    rows = row_of(labels["node"][mine])
    cluster[rows] = labels["label"][mine].astype(np.int64)
    dup[rows] = True
    exact = np.zeros(n, bool)
    ex = read_output_partition(exact_dup_uris, q, NODE_COLUMNS, gathered, by_shard, shard_index)["node"]
    exact[row_of(ex[shard_of(ex) == shard_index])] = True
    return pa.table(
        {
            ID: string_ids(ids),  # a user's integer ids: every stage's results join on one id type
            CLUSTER_ID: from_numpy(cluster, pa.int64(), mask=~keep),
            IS_DUPLICATE: from_numpy(dup & keep),
            EXACT_DUPLICATE: from_numpy(exact & keep),
            NEAR_DUPLICATE: from_numpy(dup & ~exact & keep),
        }
    )
