"""Quarantine: what a stage could not read, with where it came from and why, kept for inspection."""

from __future__ import annotations

import io
import shutil
import tempfile
from dataclasses import dataclass
from typing import IO

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_curation.core import storage

# A quarantined record keeps at most this much of its raw bytes: enough to debug, bounded for 50 MB junk.
MAX_RAW_BYTES = 64 * 1024
# A writer holds at most about this much of its entries before it spills them as a row group.
FLUSH_BYTES = 16 << 20
FLUSH_ENTRIES = 50_000
_ENTRY_BYTES = 400  # an entry's Python objects beside its raw bytes (its strings, the dataclass)

QUARANTINE_SCHEMA = pa.schema(
    [
        ("source", pa.string()),  # input file URL or shard id
        ("location", pa.string()),  # "line 17", "row 3", "byte 1024", or "file"
        ("reason", pa.string()),  # machine-readable reason, e.g. invalid_json
        ("detail", pa.string()),  # human-readable error
        ("rows", pa.int64()),  # how many input rows this entry stands for (0 for file-level notes)
        ("raw", pa.binary()),  # the first MAX_RAW_BYTES of the record
        ("raw_bytes", pa.int64()),  # the record's full size
    ]
)


@dataclass
class QuarantineEntry:
    source: str
    location: str
    reason: str
    detail: str
    rows: int = 1
    raw: bytes = b""
    raw_bytes: int | None = None


class QuarantineWriter:
    """Collects entries for one unit of work and writes them as one Parquet file (or nothing).

    Entries are held until :data:`FLUSH_BYTES` of them (or :data:`FLUSH_ENTRIES`) and then written as a row
    group to a local temporary file, so a unit whose every record is bad holds one batch of them, not all: a
    unit's entries were held to its end before, up to 64 KB of raw bytes and ~0.4 KB of Python objects each
    (a 512 MB unit of short junk lines is tens of millions of entries). :meth:`write` publishes the file
    atomically.

    :param uri: where the file goes. :param flush_bytes: raw bytes held before a row group is spilled."""

    def __init__(self, uri: str, flush_bytes: int | None = None) -> None:
        self.uri = uri
        self.entries: list[QuarantineEntry] = []  # the batch not spilled yet
        self._flush_bytes = FLUSH_BYTES if flush_bytes is None else flush_bytes
        self._held = 0
        self._count = 0
        self._spill: IO[bytes] | None = None
        self._writer: pq.ParquetWriter | None = None

    def add(self, source: str, location: str, reason: str, detail: str, raw: bytes = b"", rows: int = 1) -> None:
        kept = raw[:MAX_RAW_BYTES]
        self.entries.append(
            QuarantineEntry(
                utf8_safe(source), utf8_safe(location), reason, utf8_safe(detail[:2000]), rows, kept, len(raw)
            )
        )
        self._count += 1
        self._held += len(kept) + _ENTRY_BYTES
        if self._held >= self._flush_bytes or len(self.entries) >= FLUSH_ENTRIES:
            self._spill_batch()

    def __len__(self) -> int:
        return self._count

    def _spill_batch(self) -> None:
        if not self.entries:
            return
        if self._writer is None:
            self._spill = tempfile.TemporaryFile(prefix="quarantine-")
            self._writer = pq.ParquetWriter(self._spill, QUARANTINE_SCHEMA, compression="zstd")
        self._writer.write_table(_table(self.entries))
        self.entries, self._held = [], 0

    def write(self) -> str | None:
        if not self._count:
            storage.remove(self.uri)  # a rerun that found nothing bad must not leave an old file behind
            return None
        if self._writer is None:  # one batch: straight from memory
            buf = io.BytesIO()
            pq.write_table(_table(self.entries), buf, compression="zstd")
            storage.write_bytes(self.uri, buf.getvalue())
            return self.uri
        self._spill_batch()
        self._writer.close()
        spill, self._spill, self._writer = self._spill, None, None
        with spill:
            spill.seek(0)
            with storage.atomic_open(self.uri) as out:
                shutil.copyfileobj(spill, out, 8 << 20)
        return self.uri


def _table(entries: list[QuarantineEntry]) -> pa.Table:
    cols = {name: [getattr(e, name) for e in entries] for name in QUARANTINE_SCHEMA.names}
    return pa.table(cols, schema=QUARANTINE_SCHEMA)


def utf8_safe(text: str) -> str:
    """``text`` storable as UTF-8: the bytes of a file name that is not UTF-8 (which the OS hands over
    surrogate-escaped) and unpaired surrogates (a ``\\ud800`` escape) are spelled out as backslash
    escapes, so that one odd character cannot make a whole file of rows unwritable."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def read_quarantine(uri: str) -> pa.Table:
    return storage.read_parquet(uri)  # without Arrow's threads: a spilled file has many row groups
