"""Counts keyed by one column (distinct ids, cluster sizes) over more keys than a query may hold, in one scan.

A hash table of every key grows with the lake; one query per hash partition of the key, each filtering the
whole column, costs a scan per partition (rows x passes: O(rows^2) at a fixed budget). Here the engine scans
the column once, each row carrying its partition's digits (``__p0``, ``__p1``...: digits of one hash of the
key, :func:`levels` gives their bases); the rows are routed into one Arrow IPC file per partition in a spill
folder, and each file is then counted alone. Memory: one batch while routing, one partition's keys while
counting. Past ``FANOUT`` partitions (files open at once) a second routing level splits each file by the next
digit, and so on: a pass over the spill per level, ``ceil(log_FANOUT(partitions))`` levels (one up to
``FANOUT`` x the budget: 256 M rows at 1 M keys a partition; two up to 65 G rows).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

FANOUT = 256  # partitions one routing level writes at once (open files)


def levels(rows: int, per_pass: int, fanout: int = FANOUT) -> list[int]:
    """The bases of the partition digits: their product (the partitions) is at least ``rows / per_pass``, each
    at most ``fanout``, as equal as can be; ``[]`` where the rows fit one pass (``per_pass`` 0: always)."""
    if fanout < 2:
        raise ValueError(f"a routing level needs a fan-out of 2 or more, not {fanout}")
    if not per_pass or rows <= per_pass:
        return []
    k = math.ceil(rows / per_pass)
    n = max(1, math.ceil(math.log(k) / math.log(fanout) - 1e-9))
    base = math.ceil(k ** (1 / n))
    while base > fanout or base**n < k:  # float roots: settle on the exact integer
        base += 1 if base**n < k else -1
    return [base] * n


def digit(name: str, level: int, bases: list[int]) -> str:
    """DuckDB SQL for digit ``level`` (``__p<level>``) of ``hash(name)`` in ``bases``."""
    under = math.prod(bases[:level])
    h = f"hash({name})" if under == 1 else f"(hash({name}) // {under})"
    return f"({h} % {bases[level]})::USMALLINT AS __p{level}"


def count(
    batches: Iterable[pa.RecordBatch], bases: list[int], folder: str, counter: Callable[[pa.Table], object]
) -> list:
    """``counter`` of every non-empty partition of ``batches`` (their columns: ``__p0``.. then the keys),
    routed through IPC files in ``folder`` (removed as they are read)."""
    files = _route(batches, 0, folder, "p")
    for level in range(1, len(bases)):
        deeper = []
        for path in files:
            deeper += _route(_read(path), level, folder, os.path.basename(path)[: -len(".arrow")])
            os.remove(path)
        files = deeper
    out = []
    for path in files:
        with pa.memory_map(path) as src:  # mapped, not read: the counter scans it in place
            out.append(counter(pa.ipc.open_stream(src).read_all()))
        os.remove(path)
    return out


def _read(path: str) -> Iterator[pa.RecordBatch]:
    with pa.memory_map(path) as src:
        yield from pa.ipc.open_stream(src)


def _route(batches: Iterable[pa.RecordBatch], level: int, folder: str, prefix: str) -> list[str]:
    """Each row of ``batches`` into the file of its digit ``__p<level>`` (dropped from what is written)."""
    key = f"__p{level}"
    writers: dict[int, pa.ipc.RecordBatchStreamWriter] = {}
    paths: dict[int, str] = {}
    try:
        for batch in batches:
            if not batch.num_rows:
                continue
            digits = batch.column(key)
            order = pc.sort_indices(digits)
            rest = batch.drop_columns([key]).take(order)
            runs = pc.value_counts(digits.take(order))  # in order of first appearance: ascending
            at = 0
            for p, n in zip(runs.field("values").to_pylist(), runs.field("counts").to_pylist()):
                if p not in writers:
                    paths[p] = os.path.join(folder, f"{prefix}-{p:05d}.arrow")
                    writers[p] = pa.ipc.new_stream(paths[p], rest.schema)
                writers[p].write_batch(rest.slice(at, n))
                at += n
    finally:
        for w in writers.values():
            w.close()
    return [paths[p] for p in sorted(paths)]
