"""Validate split into independent tasks and one merge: what each task hands on, and how they are combined.

A task (one unit: a slice of consecutive shards, ``part_rows`` rows) computes the view's counts and sums over
its shards (rows, text bytes, null counts, missing attrs, funnel, duplicates, attrs rows, drop reasons: they
add up) and writes its keys, ``id`` of its shards and ``cluster_id`` of their dedup attrs, as one Parquet file
each, every key with ``__p``, its hash partition of ``parts`` (the same for every task: from the whole
manifest's rows), sorted by it. Distinct ids and cluster sizes do not add up (an id in two tasks' shards, a
cluster spanning them), so the merge counts them a partition at a time over every task's file: each file is
read once, in order (:class:`KeyStream`), and a partition's keys, from all files, are held at once. Memory
of the merge: one partition (about ``ids_per_pass`` keys) plus one row group per file.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_curation.core import storage
from airflow_curation.stages.validate.view import row_groups

T = TypeVar("T")
ROW_GROUP = 65_536  # rows of a key file's row group: what the merge holds of each file at once
ADDED = ("null_counts", "missing_attrs", "attrs_rows")  # {name: count} of each part, summed


def partition_count(rows: int, per_pass: int) -> int:
    """Hash partitions of the keys: about ``per_pass`` keys each (``per_pass`` 0: one)."""
    return max(1, math.ceil(rows / per_pass)) if per_pass and per_pass > 0 else 1


def split(idx: list[int], rows_by_shard: list[int], rows: int | None) -> list[list[int]]:
    """The shards ``idx`` in consecutive query groups of about ``rows`` rows."""
    counts = [rows_by_shard[i] if i < len(rows_by_shard) else 0 for i in idx]
    return [[idx[j] for j in g] for g in row_groups(counts, rows)]


def duplicates(column: str, assessed: int, dups: int) -> dict[str, Any]:
    return {"column": column, "assessed": assessed, "duplicates": dups, "rate": dups / assessed if assessed else 0.0}


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The sum of the parts' counts (:meth:`DuckDBEngine.partial`), as one query over their shards gives."""
    if not parts:
        raise ValueError("no parts to merge")
    first = parts[0]
    out: dict[str, Any] = {"rows": sum(p["rows"] for p in parts), "text_bytes": sum(p["text_bytes"] for p in parts)}
    for key in ADDED:
        out[key] = {k: sum(p[key][k] for p in parts) for k in first[key]}
    out["funnel"] = [
        {
            **step,
            "rows": sum(p["funnel"][i]["rows"] for p in parts),
            "bytes": sum(p["funnel"][i]["bytes"] for p in parts),
        }
        for i, step in enumerate(first["funnel"])
    ]
    out["duplicates"] = None
    if first["duplicates"] is not None:
        d = [p["duplicates"] for p in parts]
        out["duplicates"] = duplicates(
            first["duplicates"]["column"], sum(x["assessed"] for x in d), sum(x["duplicates"] for x in d)
        )
    reasons: dict[str, dict[str, int]] = {}
    for p in parts:
        for stage, counts in p["drop_reasons"].items():
            into = reasons.setdefault(stage, {})
            for r, n in counts.items():
                into[r] = into.get(r, 0) + n
    # most rows first, as the single query's ORDER BY count DESC
    out["drop_reasons"] = {st: dict(sorted(c.items(), key=lambda t: -t[1])) for st, c in reasons.items()}
    return out


class KeyStream:
    """One task's key file read once, front to back: :meth:`take` hands the keys of one partition (the file is
    sorted by ``__p``), holding one row group."""

    def __init__(self, uri: str) -> None:
        self._file = storage.open_arrow(uri)
        self._batches: Iterator[pa.RecordBatch] = pq.ParquetFile(self._file).iter_batches(batch_size=ROW_GROUP)
        self._batch: pa.RecordBatch | None = None
        self._p = np.empty(0, dtype=np.uint64)
        self._at = 0
        self._next()

    def _next(self) -> None:
        while True:
            self._batch = next(self._batches, None)
            if self._batch is None:
                self._p, self._at = np.empty(0, dtype=np.uint64), 0
                self._file.close()
                return
            if self._batch.num_rows:
                self._p, self._at = self._batch.column("__p").to_numpy(), 0
                return

    def head(self) -> int | None:
        """The partition of the next key (None: the file is read)."""
        return int(self._p[self._at]) if self._batch is not None else None

    def take(self, p: int) -> list[pa.Array]:
        """The keys of partition ``p`` at the front of the file (none where it does not start there)."""
        out = []
        while self._batch is not None and self._p[self._at] == p:
            end = int(np.searchsorted(self._p, p, side="right"))
            out.append(self._batch.column("key").slice(self._at, end - self._at))
            if end < len(self._p):
                self._at = end
            else:
                self._next()
        return out


def by_partition(uris: Iterable[str], each: Callable[[pa.ChunkedArray], T], threads: int = 1) -> Iterator[T]:
    """``each`` of every partition's keys, gathered from every file in ``uris`` (one pass over each), its results
    in partition order. With ``threads``, that many partitions are counted at once while the files are read on
    (Arrow's kernels run without the GIL): the merge's key counting is a pass over every key of the lake, one
    core's work for hours at 50 TB otherwise. At most ``2 x threads`` partitions are held."""
    streams = [KeyStream(u) for u in uris]

    def partitions() -> Iterator[pa.ChunkedArray]:
        while True:
            heads = [h for h in (s.head() for s in streams) if h is not None]
            if not heads:
                return
            p = min(heads)
            yield pa.chunked_array([c for s in streams for c in s.take(p)])

    if threads <= 1:
        yield from map(each, partitions())
        return
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(threads) as pool:
        pending: deque = deque()
        for keys in partitions():
            pending.append(pool.submit(each, keys))
            if len(pending) >= 2 * threads:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def distinct_ids(uris: Iterable[str], threads: int = 1) -> int:
    """Distinct keys across every task's id file: a key falls in one partition, so partitions add up."""
    return sum(by_partition(uris, lambda keys: pc.count_distinct(keys).as_py(), threads))


def cluster_sizes(uris: Iterable[str], threads: int = 1) -> dict[str, Any]:
    """``{clusters, sizes: {size: clusters of that size}, largest}`` across every task's cluster file."""

    def count(keys: pa.ChunkedArray) -> list[tuple[int, int]]:
        per = pc.value_counts(keys).field("counts")
        return list(zip(*(c.to_pylist() for c in pc.value_counts(per).flatten())))

    sizes: dict[int, int] = {}
    for got in by_partition(uris, count, threads):
        for size, k in got:
            sizes[int(size)] = sizes.get(int(size), 0) + int(k)
    sizes = dict(sorted(sizes.items()))
    return {"clusters": sum(sizes.values()), "sizes": sizes, "largest": max(sizes) if sizes else 0}
