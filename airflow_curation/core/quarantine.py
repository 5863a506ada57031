"""Quarantine: what a stage could not read, with where it came from and why, kept for inspection."""

from __future__ import annotations

import io
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_curation.core import storage

# A quarantined record keeps at most this much of its raw bytes: enough to debug, bounded for 50 MB junk.
MAX_RAW_BYTES = 64 * 1024

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
    """Collects entries for one unit of work and writes them as one Parquet file (or nothing)."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.entries: list[QuarantineEntry] = []

    def add(self, source: str, location: str, reason: str, detail: str, raw: bytes = b"", rows: int = 1) -> None:
        self.entries.append(
            QuarantineEntry(
                utf8_safe(source),
                utf8_safe(location),
                reason,
                utf8_safe(detail[:2000]),
                rows,
                raw[:MAX_RAW_BYTES],
                len(raw),
            )
        )

    def __len__(self) -> int:
        return len(self.entries)

    def write(self) -> str | None:
        if not self.entries:
            storage.remove(self.uri)  # a rerun that found nothing bad must not leave an old file behind
            return None
        cols = {name: [getattr(e, name) for e in self.entries] for name in QUARANTINE_SCHEMA.names}
        table = pa.table(cols, schema=QUARANTINE_SCHEMA)
        buf = io.BytesIO()
        pq.write_table(table, buf, compression="zstd")
        storage.write_bytes(self.uri, buf.getvalue())
        return self.uri


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
    with storage.open_read(uri) as f:
        return pq.read_table(f)
