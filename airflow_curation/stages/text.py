"""The text a stage reads for a shard: the shard's ``text``, or the cleaned text beside it when there is one.

Preprocess with line cleaning or normalisation (docs/preprocess.md, *Line cleaning*) writes the cleaned
text as the ``clean_text`` column of its attrs file, and the boilerplate stage (lines repeated across
documents removed) writes its own from it; shards are never rewritten. Every later stage reads
its text through :class:`ShardText`, which puts that column in the place of ``text`` (same rows, same
order: the attrs contract), so dedup, PII, quality, enrich and tokenize all see the cleaned text without
knowing where it came from. :func:`clean_text_attrs` says which attrs hold it, for a unit's inputs (its
checksum and the verification before it runs).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_curation.core import storage
from airflow_curation.core.manifest import ShardEntry
from airflow_curation.core.schema import CLEAN_TEXT, ID, TEXT, check_id_text, checked_user_rows
from airflow_curation.core.shards import attrs_columns

# The attrs that may hold the cleaned text (the columns their entry records say; an entry without the record:
# their footers), the latest writer first: boilerplate cleans preprocess's cleaned text further.
WRITERS = ("boilerplate", "preprocess")


def clean_text_attrs(entry: ShardEntry, reader: str | None = None) -> list[str]:
    """``[key]`` of the first of :data:`WRITERS` whose attrs of ``entry`` hold ``clean_text``, else ``[]``
    (never the stage ``reader`` itself: boilerplate reads preprocess's)."""
    for key in WRITERS:
        uri = entry.attrs.get(key)
        if uri and key != reader and CLEAN_TEXT in attrs_columns(entry, key):
            return [key]
    return []


def clean_text_uri(entry: ShardEntry, inputs: Sequence[str], reader: str | None = None) -> str | None:
    """The file of ``entry``'s cleaned text when the unit planned it among its ``inputs``, else None."""
    for key in clean_text_attrs(entry, reader):
        if entry.attrs[key] in inputs:
            return entry.attrs[key]
    return None


class ShardText:
    """A shard's rows with ``text`` from ``clean_uri`` (its ``clean_text`` column) when given.

    :param shard_uri: the shard (or any Parquet file with ``id`` and ``text``).
    :param clean_uri: an attrs file with ``id`` and ``clean_text``, the shard's rows in the shard's order.
    :param user_file: ``shard_uri`` is a user's Parquet file (plain-file mode), not a shard ingest wrote: its
        rows are checked as ingest checks a shard's (:func:`~airflow_curation.core.schema.checked_user_rows`).
    """

    def __init__(self, shard_uri: str, clean_uri: str | None = None, user_file: bool = False) -> None:
        self.shard_uri = shard_uri
        self.clean_uri = clean_uri
        self.user_file = user_file

    def batches(self, columns: Sequence[str], batch_rows: int | None = None) -> Iterator[pa.Table]:
        """The shard's ``columns`` (those it has), ``batch_rows`` rows at a time (None: all at once)."""
        if not self.user_file:
            yield from self._batches(columns, batch_rows)
            return
        row = 0
        for table in self._batches(columns, batch_rows):
            yield checked_user_rows(table, self.shard_uri, row)
            row += table.num_rows

    def _batches(self, columns: Sequence[str], batch_rows: int | None) -> Iterator[pa.Table]:
        with storage.open_read(self.shard_uri) as f:
            pf = pq.ParquetFile(f)
            check_id_text(pf.schema_arrow, self.shard_uri)
            columns = [c for c in columns if c in pf.schema_arrow.names]
            # One unit is one core's work (units run side by side): Arrow's reader threads only add CPU here.
            if not self.clean_uri or TEXT not in columns:
                if batch_rows:
                    for b in pf.iter_batches(batch_size=batch_rows, columns=columns, use_threads=False):
                        yield pa.Table.from_batches([b])
                else:
                    yield pf.read(columns=columns, use_threads=False)
                return
            rest = [c for c in columns if c != TEXT] or [ID]  # some column says how many rows a batch has
            with storage.open_read(self.clean_uri) as g:
                cf = pq.ParquetFile(g)
                if cf.metadata.num_rows != pf.metadata.num_rows:
                    raise ValueError(
                        f"cleaned text {self.clean_uri} has {cf.metadata.num_rows} rows, shard {self.shard_uri} "
                        f"{pf.metadata.num_rows}: attrs must have the shard's rows in the shard's order"
                    )
                clean = _rows(cf.iter_batches(batch_size=batch_rows or 65536, columns=[CLEAN_TEXT], use_threads=False))
                next(clean)
                parts = (
                    (
                        pa.Table.from_batches([b])
                        for b in pf.iter_batches(batch_size=batch_rows, columns=rest, use_threads=False)
                    )
                    if batch_rows
                    else [pf.read(columns=rest, use_threads=False)]
                )
                for part in parts:
                    text = clean.send(part.num_rows) if part.num_rows else pa.array([], pa.string())
                    yield _with_text(part, text, columns)

    def read(self, columns: Sequence[str]) -> pa.Table:
        """The shard's ``columns``, all rows."""
        tables = list(self.batches(columns))
        return tables[0] if tables else pa.table({})


def _rows(batches: Iterator[pa.RecordBatch]):
    """A generator sent a count, giving that many next values of a one-column batch stream (any cut)."""
    buffered: list[pa.Array] = []
    have = 0
    want = yield
    for b in batches:
        buffered.append(b.column(0))
        have += b.num_rows
        while want is not None and have >= want:
            whole = pa.concat_arrays(buffered) if len(buffered) > 1 else buffered[0]
            out, rest = whole.slice(0, want), whole.slice(want)
            buffered, have = ([rest] if len(rest) else []), len(rest)
            want = yield out
    if want:
        raise ValueError(f"cleaned text ended {want - have} rows early")


def _with_text(part: pa.Table, text: pa.Array, columns: Sequence[str]) -> pa.Table:
    arrays = {name: part.column(name) for name in part.column_names}
    arrays[TEXT] = text
    return pa.table({c: arrays[c] for c in columns})
