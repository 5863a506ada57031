"""The selection passes of :func:`.bounded.rank_quantiles` in Arrow and numpy, over Parquet files or over
SQL relations streamed from DuckDB (the curated rows: each part a join of shards and attrs).

DuckDB answers a pass as filtered ``histogram()`` aggregates, which cost far more per value than reading
it; here one pass streams the requested numeric columns in record batches (only those columns: a file's,
or a relation's cast to DOUBLE by DuckDB) and counts each request's slice per bin with numpy. The bins are DuckDB's to the bit: the same
IEEE subtraction, division and floor of the same doubles (``floor((x - start) / width)`` clamped to
``[0, bins - 1]``), and a value is cast to DOUBLE as DuckDB casts it (an integer rounded to nearest).
Memory holds one record batch and, per request, ``bins`` counts (or a fetched slice's values).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_curation.core import storage
from airflow_curation.stages.validate import bounded

BATCH_ROWS = 256 * 1024  # rows of one record batch: a few MB per column
# The curated rows' spill is given up past this many bytes (of Arrow batches written): a lake's curated signals
# can outgrow the merge node's local disk (10^10 rows x 2 signals is ~160 GB), and streaming the joins again on
# each pass gives the same statistics, only slower.
SPILL_MAX_BYTES = 8 << 30

# The columns a pass needs -> per record batch, each column's non-null values as float64 (absent: all null).
Batches = Callable[[list[str]], Iterator[dict[str, np.ndarray]]]


def _columns(files: Sequence[str], cols: Sequence[str], batch_rows: int) -> Iterator[dict[str, np.ndarray]]:
    """Per record batch of ``files``, the non-null values of each of ``cols`` that the file holds, as float64.

    :param files: Parquet files (URLs), read in order; a file without a column has only nulls in it
        (``union_by_name``).
    :param cols: columns to read.
    :param batch_rows: rows per record batch.
    """
    for url in files:
        with storage.open_arrow(url) as fh:
            pf = pq.ParquetFile(fh)
            names = set(pf.schema_arrow.names)
            present = [c for c in dict.fromkeys(cols) if c in names]
            if not present:
                continue
            for batch in pf.iter_batches(batch_size=batch_rows, columns=present):
                out = {}
                for c in present:
                    arr = batch.column(c)
                    if arr.null_count:
                        arr = arr.drop_null()
                    if arr.type != pa.float64():  # int64 past 2**53 rounds to nearest, as DuckDB's cast
                        arr = pc.cast(arr, pa.float64(), safe=False)
                    out[c] = arr.to_numpy(zero_copy_only=False)
                yield out


def relation_batches(
    con: Any,
    parts: Sequence[str],
    cols: Sequence[str],
    spill: str | None = None,
    batch_rows: int = BATCH_ROWS,
    spill_max: int = SPILL_MAX_BYTES,
) -> Batches:
    """Batches of the SQL relations ``parts`` (DuckDB's, on ``con``), streamed a record batch at a time: the
    columns cast to DOUBLE by DuckDB itself (the value :func:`.bounded.column_stats`' queries see).

    With ``spill``, the first pass also writes ``cols`` of every part there (one Parquet file), and the later
    passes read that file instead of running the parts' queries again (each a join of shards and attrs:
    most of a pass's cost).

    :param con: the DuckDB connection the relations are defined on (a cursor of its own streams each).
    :param parts: SQL relations whose union is the whole.
    :param cols: every column a pass may ask for.
    :param spill: a local Parquet path to write the first pass to (its folder the caller's to remove).
    :param batch_rows: rows per record batch.
    :param spill_max: past this many bytes of batches the spill is removed and every pass streams the parts."""
    cols = list(dict.fromkeys(cols))
    select = ", ".join(f"{bounded.q(c)}::DOUBLE AS {bounded.q(c)}" for c in cols)
    written: list[str] = []  # the spill file, once a pass has written all of it

    given_up: list[bool] = []  # the spill outgrew spill_max: every pass streams

    def stream(need: list[str]) -> Iterator[dict[str, np.ndarray]]:
        writer = None
        held = 0
        try:
            for part in parts:
                # a cursor of its own: DuckDB refuses a streamed result on a connection holding an unfinished one
                cur = con.cursor()
                try:
                    reader = cur.sql(f"SELECT {select} FROM {part}").to_arrow_reader(batch_rows)
                    if spill is not None and writer is None and not given_up:
                        writer = pq.ParquetWriter(spill, reader.schema, compression="zstd")
                    for batch in reader:
                        if writer is not None and batch.num_rows:
                            held += batch.nbytes
                            if held > spill_max:
                                writer.close()
                                os.remove(spill)
                                writer = None
                                given_up.append(True)
                            else:
                                writer.write_batch(batch)
                        yield _values(batch, need)
                finally:
                    cur.close()
        finally:
            if writer is not None:
                writer.close()
        if writer is not None:  # the whole relation: later passes read it
            written.append(spill)

    def batches(need: list[str]) -> Iterator[dict[str, np.ndarray]]:
        if written:
            return _columns(written, need, batch_rows)
        return stream(need)

    return batches


def _values(batch: pa.RecordBatch, need: list[str]) -> dict[str, np.ndarray]:
    """The non-null values of the ``need`` columns of ``batch`` (DOUBLE), as numpy."""
    out = {}
    for c in dict.fromkeys(need):
        arr = batch.column(c)
        if arr.null_count:
            arr = arr.drop_null()
        out[c] = arr.to_numpy(zero_copy_only=False)
    return out


def file_batches(files: Sequence[str], batch_rows: int = BATCH_ROWS) -> Batches:
    """Batches of the Parquet ``files`` (:func:`_columns`)."""
    return lambda cols: _columns(files, cols, batch_rows)


def arrow_scan(
    files: Sequence[str] | Batches,
    cols: list[str],
    bins: int,
    hists: list[tuple[str, dict, bounded.HistDivision]],
    batch_rows: int = BATCH_ROWS,
    threads: int = 1,
) -> bounded.Scan:
    """A selection pass as one read of the relation; the histograms ``hists`` are counted in the first pass.

    :param files: the relation's Parquet files, or its :data:`Batches` (:func:`relation_batches`).
    :param cols: the columns, by index (a slice's ``k``).
    :param bins: bins of one selection step.
    :param hists: ``(column, stats, division)``: the histogram to add to ``stats["hist"]["counts"]``, binned
        with the doubles DuckDB's histogram query computes with.
    :param batch_rows: rows per record batch (of files).
    :param threads: files read and counted by this many threads at once, each its own run of them (a pass's
        counts add up whatever the order; Parquet's decoding and numpy's array work run without the GIL). A
        split run's merge counts every attrs file of the lake here: on one thread that was the stage's longest
        term at 50 TB (docs/scale.md). Batches (``files`` a callable) are read on one thread.
    """
    runs = _runs(files, threads) if not callable(files) else []
    batches = files if callable(files) else file_batches(files, batch_rows)

    def scan(plan: list[tuple[bounded._Slice, bool]], first: bool) -> list:
        todo_hists = hists if first else []
        if not plan and not todo_hists:
            return []
        need = [h[0] for h in todo_hists] + [cols[sl.k] for sl, _ in plan]
        if len(runs) > 1:
            from concurrent.futures import ThreadPoolExecutor

            def count(run: list[str]) -> _Tally:
                return _Tally(cols, plan, todo_hists, bins).over(_columns(run, need, batch_rows))

            with ThreadPoolExecutor(min(threads, len(runs))) as pool:
                tally, *rest = pool.map(count, runs)
            for other in rest:
                tally.add(other)
        else:
            tally = _Tally(cols, plan, todo_hists, bins).over(batches(need))
        return tally.result()

    return scan


def _runs(files: Sequence[str], threads: int) -> list[list[str]]:
    """``files`` as consecutive runs for ``threads`` threads: a few runs a thread, so that one slow run (a large
    file) does not hold the pass while the other threads idle."""
    if threads <= 1 or len(files) <= 1:
        return [list(files)]
    n = min(len(files), 4 * threads)
    return [list(files[i * len(files) // n : (i + 1) * len(files) // n]) for i in range(n)]


class _Tally:
    """What a pass counts over some of the batches: per slice its bins' counts (or, fetched, its values) and its
    values' bounds, per histogram its counts. Tallies of disjoint batches :meth:`add` up to the whole pass's."""

    def __init__(self, cols: list[str], plan: list[tuple[bounded._Slice, bool]], hists: list, bins: int) -> None:
        self.cols, self.plan, self.hists, self.bins = cols, plan, hists, bins
        self.fetched: list[list[np.ndarray]] = [[] for _ in plan]
        self.counts = [np.zeros(bins, np.int64) for _ in plan]
        self.lows: list[list[float]] = [[] for _ in plan]
        self.highs: list[list[float]] = [[] for _ in plan]
        self.hist_counts = [np.zeros(len(h[1]["hist"]["counts"]), np.int64) for h in hists]

    def over(self, batches: Iterator[dict[str, np.ndarray]]) -> _Tally:
        for got in batches:
            self._count(got)
        return self

    def _count(self, got: dict[str, np.ndarray]) -> None:
        bins = self.bins
        for (src, _, d), acc in zip(self.hists, self.hist_counts):
            x = got.get(src)
            if x is not None and len(x):
                x = x if d.scale == 1.0 else x * d.scale
                acc += np.bincount(bounded.bin_of(x, d.start, d.width, len(acc)), minlength=len(acc))
        for i, (sl, fetch) in enumerate(self.plan):
            x = got.get(self.cols[sl.k])
            if x is None or not len(x):
                continue
            if fetch:  # by value range alone, the slice's own values picked out by the caller
                lo, hi = sl.range(bins)
                self.fetched[i].append(x[(x >= lo) & (x <= hi)])
                continue
            if sl.steps:
                lo, hi = sl.range(bins)
                x = x[(x >= lo) & (x <= hi)]  # the cheap comparisons first, then the bins above
                for st, w, b in sl.steps:
                    x = x[bounded.bin_of(x, st, w, bins) == b]
                if not len(x):
                    continue
                self.lows[i].append(float(x.min()))
                self.highs[i].append(float(x.max()))
            elif sl.odd:
                x = x[np.isfinite(x)]
            start, width = sl.division(bins)
            self.counts[i] += np.bincount(bounded.bin_of(x, start, width, bins), minlength=bins)

    def add(self, other: _Tally) -> None:
        for mine, theirs in zip(self.hist_counts, other.hist_counts):
            mine += theirs
        for i in range(len(self.plan)):
            self.fetched[i] += other.fetched[i]
            self.counts[i] += other.counts[i]
            self.lows[i] += other.lows[i]
            self.highs[i] += other.highs[i]

    def result(self) -> list:
        for (_, stats, _), acc in zip(self.hists, self.hist_counts):
            stats["hist"]["counts"] = [a + int(n) for a, n in zip(stats["hist"]["counts"], acc)]
        out: list[Any] = []
        for i, (sl, fetch) in enumerate(self.plan):
            if fetch:
                out.append(np.concatenate(self.fetched[i]) if self.fetched[i] else np.empty(0))
                continue
            nz = np.flatnonzero(self.counts[i])
            pairs = [(int(b), int(self.counts[i][b])) for b in nz]
            if sl.steps:
                out.append((min(self.lows[i], key=bounded._order), max(self.highs[i], key=bounded._order), pairs))
            else:  # the column's finite range is known
                out.append((sl.lo, sl.hi, pairs))
        return out
