"""Ids repeated across Parquet files (an ingest run's shards, a plain-file run's inputs), found in bounded memory.

Units run in parallel and cannot see each other's ids, so the repeats across units are found once, after
all of them (a stage's collect step). Holding a hash of every id of the run at once grew with the corpus
(~42 bytes a row with the sort, measured: ~600 GB for the 14.3 G documents of 50 TB). Here one pass over
the files' id columns routes ``(hash, file)`` records (12 bytes) into partition files by the hash, each
partition is then searched alone for repeated hashes (at most ``rows_in_memory`` records in memory), and
only the files holding a repeated hash are read again, for the exact ids and their places.
"""

from __future__ import annotations

import math
import os
import tempfile
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from airflow_curation.core import storage
from airflow_curation.core.arrays import partition_order
from airflow_curation.core.boilerplate import string_hashes
from airflow_curation.core.manifest import ShardEntry
from airflow_curation.core.schema import ID, SOURCE

# Records of one partition held at once: 12 bytes each, plus the sort's copies: ~0.6 GB.
ROWS_IN_MEMORY = 16_000_000
# Partition files open at once while routing (a process's descriptors are often capped at 1,024): past
# FANOUT x ROWS_IN_MEMORY rows (4 G) a partition holds more, rows / FANOUT (56 M records, ~2 GB, at the
# 14.3 G documents of 50 TB).
FANOUT = 256
RECORD = np.dtype([("h", "<u8"), ("s", "<u4")])

Place = tuple[str, int, str | None]  # (shard, row, source: None where the file has no source column)


class RepeatedIds(NamedTuple):
    """``listed``: (id, first place, later place) for each row whose id an earlier row holds, of the first
    ``LISTED_MAX`` repeated hashes; ``total``: every such row (where some hashes were not listed, counted by
    hash: two different ids sharing a 64-bit hash would count as one repeat, ~n^2 / 2^65 for n ids)."""

    listed: list[tuple[str, Place, Place]]
    total: int


# Repeated hashes whose places are found: a corpus ingested twice repeats every id, and a place for each
# would hold the run's ids in memory again (~200 bytes each). The rest are counted, not listed.
LISTED_MAX = 1_000_000


def repeated_ids(
    shards: list[ShardEntry],
    rows_in_memory: int | None = None,
    temp_dir: str | None = None,
    listed_max: int | None = None,
) -> RepeatedIds:
    """The ids repeated across ``shards``. Shards come in unit order, so "first" is the earlier unit.
    ``rows_in_memory``: records of a partition (default ``ROWS_IN_MEMORY``; at most ``FANOUT`` partitions); ``temp_dir``: where the
    partition files go (default: the system's temp folder), 12 bytes a row of the run, each removed once
    searched; ``listed_max``: repeated hashes whose places are found (default ``LISTED_MAX``)."""
    if not shards:
        return RepeatedIds([], 0)
    rows = sum(max(int(s.rows), 0) for s in shards)
    parts = min(FANOUT, max(1, math.ceil(rows / max(1, rows_in_memory or ROWS_IN_MEMORY))))
    limit = LISTED_MAX if listed_max is None else listed_max
    with tempfile.TemporaryDirectory(prefix="curation-ids-", dir=temp_dir) as folder:
        paths = [os.path.join(folder, f"p{k:05d}.bin") for k in range(parts)]
        _route(shards, paths)
        suspects, hit, by_hash = _suspects(paths, limit)
    listed = _places(shards, suspects, sorted(hit)) if len(suspects) else []
    return RepeatedIds(listed, len(listed) if len(suspects) == by_hash[0] else by_hash[1])


def _hashes(ids: pa.ChunkedArray) -> np.ndarray:
    """A 64-bit hash of each id, compiled over the Arrow buffers (xxhash a Python string at a time cost ~240
    ns a row, plus the strings; DuckDB's ``hash`` imports pandas into every stage process that checks ids,
    and a connection costs ~25 ms). Both passes of one run hash with it."""
    return string_hashes(ids)


def _route(shards: list[ShardEntry], paths: list[str]) -> None:
    """Each shard's (hash, shard index) records appended to the file of partition ``hash % len(paths)``."""
    parts = np.uint64(len(paths))
    files = [open(p, "wb") for p in paths]  # noqa: SIM115 - closed below, all at once
    try:
        for index, shard in enumerate(shards):
            h = _hashes(_read_table(shard, [ID]).column(ID))
            rec = np.empty(len(h), RECORD)
            rec["h"], rec["s"] = h, index
            if len(files) == 1:
                rec.tofile(files[0])
                continue
            order, counts = partition_order(h % parts, len(files))
            bounds = np.concatenate([[0], np.cumsum(counts)])
            rec = rec[order]
            for k, f in enumerate(files):
                if bounds[k + 1] > bounds[k]:
                    rec[bounds[k] : bounds[k + 1]].tofile(f)
    finally:
        for f in files:
            f.close()


def _suspects(paths: list[str], limit: int) -> tuple[np.ndarray, set[int], tuple[int, int]]:
    """The first ``limit`` hashes that repeat (within one partition, so in the whole run), the shards that
    hold them, and (repeated hashes, rows past the first of each) counted over all; each partition file
    read alone and removed."""
    found, hit, kept, hashes, extra = [], set(), 0, 0, 0
    for path in paths:
        rec = np.fromfile(path, RECORD)
        os.remove(path)
        values, counts = np.unique(rec["h"], return_counts=True)
        repeated = counts > 1
        hashes += int(repeated.sum())
        extra += int((counts[repeated] - 1).sum())
        repeats = values[repeated][: max(0, limit - kept)]
        if len(repeats):
            kept += len(repeats)
            found.append(repeats)
            hit.update(np.unique(rec["s"][np.isin(rec["h"], repeats)]).tolist())
    return (np.concatenate(found) if found else np.empty(0, np.uint64)), hit, (hashes, extra)


def _places(shards: list[ShardEntry], suspects: np.ndarray, hit: list[int]) -> list[tuple[str, Place, Place]]:
    """The exact ids of the rows whose hash repeats, in the shards that hold them (in unit order): each id
    seen again after its first place is one repeat (a hash shared by two different ids is none)."""
    first: dict[str, Place] = {}
    found = []
    for index in hit:
        shard = shards[index]
        table = _read_table(shard, [ID, SOURCE])
        rows = np.flatnonzero(np.isin(_hashes(table.column(ID)), suspects))
        cols = table.take(rows).to_pydict()
        for row, doc_id, source in zip(rows.tolist(), cols[ID], cols.get(SOURCE) or [None] * len(rows)):
            place = (shard.shard_id, row, source)
            if doc_id in first:
                found.append((doc_id, first[doc_id], place))
            else:
                first[doc_id] = place
    return found


def _read_table(shard: ShardEntry, columns: list[str]) -> pa.Table:
    """Those of ``columns`` the file has (a user's file may have no source column)."""
    # ParquetFile, not pq.read_table: that imports pyarrow.dataset, and with it pandas, into the stage's process
    with storage.open_read(shard.uri) as f:
        pf = pq.ParquetFile(f)
        return pf.read(columns=[c for c in columns if c in pf.schema_arrow.names])
