"""Shard writer: zstd Parquet files cut at a target size, with row groups small enough to parallelise."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_curation.core import storage
from airflow_curation.core.faults import fault_point
from airflow_curation.core.fingerprint import StreamChecksum
from airflow_curation.core.integrity import verify_file
from airflow_curation.core.manifest import ShardEntry
from airflow_curation.core.schema import ID, TEXT

DEFAULT_TARGET_BYTES = 512 * 1024 * 1024
DEFAULT_ROW_GROUP_ROWS = 4096
# Columns whose values do not repeat: Parquet's writer would try a dictionary for each column chunk's
# first megabyte and fall back to plain. On 22 MB of text that attempt cost 1.25 ms/MB to write and
# 0.55 ms/MB to read, for a file 0.4% smaller (benchmarks/RESULTS.md, quality signals).
UNIQUE_COLUMNS = frozenset({ID, TEXT})
# A writer that knows how far through its input it is ends with no shard under half the target: a rest
# expected below TAIL_FRACTION of a target joins the shard before it, unless that one holds MAX_OVER_TARGET.
TAIL_FRACTION = 0.5
MAX_OVER_TARGET = 1.5


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """The columns worth a dictionary: top-level strings that repeat (source, language, drop reason),
    not ids or text; numbers are mostly distinct and are written plain."""
    return [
        f.name
        for f in schema
        if f.name not in UNIQUE_COLUMNS and (pa.types.is_string(f.type) or pa.types.is_large_string(f.type))
    ]


def parquet_writer(sink, schema: pa.Schema, compression: str = "zstd") -> pq.ParquetWriter:
    """How shards and attrs files are written: zstd (unless told), statistics, dictionaries where values repeat."""
    return pq.ParquetWriter(
        sink, schema, compression=compression, use_dictionary=dictionary_columns(schema), write_statistics=True
    )


class _CountingSink:
    """File wrapper that counts and hashes bytes on their way to storage."""

    def __init__(self, f) -> None:
        self._f = f
        self.checksum = StreamChecksum()
        self.closed = False

    def write(self, data) -> int:
        self.checksum.update(data)
        return self._f.write(data)

    def tell(self) -> int:
        return self.checksum.nbytes

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        self.closed = True


def write_parquet(uri: str, table: pa.Table, row_group_rows: int = DEFAULT_ROW_GROUP_ROWS) -> tuple[int, str]:
    """Write one table atomically; returns (bytes, checksum)."""
    with storage.atomic_open(uri) as f:
        sink = _CountingSink(f)
        with parquet_writer(sink, table.schema) as w:
            w.write_table(table, row_group_size=max(1, row_group_rows))
    return sink.tell(), sink.checksum.hexdigest()


class ShardWriter:
    """Buffers rows into row groups and rolls over to a new shard once the target size is reached.

    Shards are named by ``name_for(k)`` for k = 0, 1, ... so that a rerun of the same unit of work
    produces the same names and overwrites its own partial output instead of adding to it.

    :param directory: folder URL for the shards.
    :param name_for: shard id for the k-th shard of this writer.
    :param schema: the Arrow schema of every row.
    :param target_bytes: roll over once a shard's compressed size reaches this.
    :param row_group_rows: rows per Parquet row group.
    :param progress: the fraction (0..1) of this writer's input read so far, or None when unknown. With it,
        a shard that reached the target stays open when the rest of the input is expected to add less than
        :data:`TAIL_FRACTION` of a target (output so far x unread / read input), so that the writer's last
        shard is not a sliver; it closes anyway once it holds :data:`MAX_OVER_TARGET` targets.
    """

    def __init__(
        self,
        directory: str,
        name_for: Callable[[int], str],
        schema: pa.Schema,
        target_bytes: int = DEFAULT_TARGET_BYTES,
        row_group_rows: int = DEFAULT_ROW_GROUP_ROWS,
        row_group_bytes: int = 64 * 1024 * 1024,
        progress: Callable[[], float | None] | None = None,
    ) -> None:
        self.directory = directory
        self.name_for = name_for
        self.schema = schema
        self.target_bytes = target_bytes
        self.row_group_rows = row_group_rows
        # Bound the buffer by bytes too: a few huge documents must not make a 4096-row group of gigabytes.
        self.row_group_bytes = row_group_bytes
        self.progress = progress
        self.shards: list[ShardEntry] = []
        self._buffer: dict[str, list] = {n: [] for n in schema.names}
        self._buffer_rows = 0
        self._buffer_bytes = 0
        self._ctx = None
        self._sink: _CountingSink | None = None
        self._writer: pq.ParquetWriter | None = None
        self._rows_in_shard = 0
        self._raw_out = 0  # the nbytes of the rows written so far, and the bytes they took in their shards
        self._bytes_out = 0
        self._flush_bytes = 0
        self._set_flush_bytes()

    def write(self, row: dict, nbytes: int = 0) -> None:
        for name in self.schema.names:
            self._buffer[name].append(row.get(name))
        self._buffer_rows += 1
        self._buffer_bytes += nbytes
        if self._buffer_rows >= self.row_group_rows or self._buffer_bytes >= self._flush_bytes:
            self._flush_row_group()

    def _set_flush_bytes(self) -> None:
        """Where the next row group ends by bytes: at ``row_group_bytes``, or sooner where the buffer,
        compressed at the ratio this writer has seen so far (none yet: as is), would take the open shard
        to its target, so that a row group larger than what is left of a small target does not carry the
        shard past it. Once past the target (the shard is taking the rest), row groups are whole again."""
        size = self._sink.tell() if self._sink is not None else 0
        self._flush_bytes = self.row_group_bytes
        if size < self.target_bytes:
            ratio = self._raw_out / self._bytes_out if self._bytes_out else 1.0
            self._flush_bytes = min(self.row_group_bytes, max(1, int((self.target_bytes - size) * ratio)))

    def _open(self) -> None:
        k = len(self.shards)
        uri = storage.join(self.directory, f"{self.name_for(k)}.parquet")
        self._ctx = storage.atomic_open(uri)
        self._sink = _CountingSink(self._ctx.__enter__())
        self._writer = parquet_writer(self._sink, self.schema)
        self._uri = uri
        self._rows_in_shard = 0

    def _flush_row_group(self) -> None:
        if not self._buffer_rows:
            return
        if self._writer is None:
            self._open()
        table = pa.table(self._buffer, schema=self.schema)
        before = self._sink.tell()
        self._writer.write_table(table, row_group_size=self._buffer_rows)
        self._raw_out += self._buffer_bytes
        self._bytes_out += self._sink.tell() - before
        fault_point("ingest.mid_shard")  # a row group is out, the shard is still a temporary file
        self._rows_in_shard += self._buffer_rows
        self._buffer = {n: [] for n in self.schema.names}
        self._buffer_rows = 0
        self._buffer_bytes = 0
        if self._sink.tell() >= self.target_bytes and not self._absorb_rest():
            self._close_shard()
        self._set_flush_bytes()

    def _absorb_rest(self) -> bool:
        """Whether the open shard, past the target, should take the rest of the input too: the rest is
        expected to be under TAIL_FRACTION of a target, and the shard is not yet MAX_OVER_TARGET targets
        (so it ends under two targets when the estimate holds, and near 1.5 when it does not)."""
        done = self.progress() if self.progress else None
        size = self._sink.tell()
        if not done or done <= 0 or size >= MAX_OVER_TARGET * self.target_bytes:
            return False
        written = sum(s.bytes for s in self.shards) + size
        rest = written * (1 - min(done, 1.0)) / done
        return rest < TAIL_FRACTION * self.target_bytes

    def _close_shard(self) -> None:
        if self._writer is None:
            return
        self._writer.close()
        self._ctx.__exit__(None, None, None)
        k = len(self.shards)
        self.shards.append(
            ShardEntry(
                shard_id=self.name_for(k),
                uri=self._uri,
                rows=self._rows_in_shard,
                bytes=self._sink.tell(),
                checksum=self._sink.checksum.hexdigest(),
            )
        )
        self._writer = self._sink = self._ctx = None

    def close(self) -> list[ShardEntry]:
        self._flush_row_group()
        self._close_shard()
        return self.shards

    def abort(self) -> None:
        """Drop the shard being written (its temporary file goes with it)."""
        if self._writer is not None:
            try:
                self._writer.close()
            finally:
                self._ctx.__exit__(RuntimeError, RuntimeError("aborted"), None)
                self._writer = self._sink = self._ctx = None


def read_shard(uri: str, columns: list[str] | None = None) -> pa.Table:
    with storage.open_read(uri) as f:
        return pq.read_table(f, columns=columns)


def attrs_columns(entry: ShardEntry, key: str) -> list[str]:
    """The columns of ``entry``'s ``key`` attrs file: as its writer recorded them in the entry
    (``attrs_columns``), else from the file's footer (an entry written before they were recorded). What a plan
    asks of every shard of its block (which attrs hold ``keep``, ``clean_text``...): recorded, it opens no file."""
    recorded = entry.attrs_columns.get(key)
    if recorded is not None:
        return list(recorded)
    return column_names(entry.attrs[key], entry.attrs_checksums.get(key), f"{key} attrs")


def column_names(uri: str, checksum: str | None = None, what: str = "file") -> list[str]:
    """The top-level columns of a Parquet file, from its footer alone (no data is read).

    :param checksum: what the file's manifest recorded. A footer that does not parse is checked against
        it first, so a corrupted file fails as one (:class:`~airflow_curation.core.integrity.IntegrityError`,
        naming the file) rather than as the reader's decode error.
    """
    try:
        with storage.open_read(uri) as f:
            return pq.ParquetFile(f).schema_arrow.names
    except Exception:
        verify_file(uri, checksum, what)
        raise
