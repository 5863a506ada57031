"""Streaming readers for ingest: JSONL (plain, .gz, .zst), Parquet and plain text.

Each reader yields :class:`Doc` for a readable record and :class:`Bad` for anything it cannot use, with
where it was and why, so that the stage can quarantine and count it. Memory stays bounded by one record
(itself bounded by ``max_record_bytes``) plus one Parquet batch.
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from fsspec.spec import AbstractBufferedFile
import pyarrow as pa
import pyarrow.parquet as pq

try:  # orjson is several times faster and is already an Airflow dependency; json is the fallback.
    import orjson

    _loads = orjson.loads
    _JSONError: tuple[type[Exception], ...] = (orjson.JSONDecodeError,)
except ImportError:  # pragma: no cover
    _loads = json.loads
    _JSONError = (json.JSONDecodeError,)

RAW_HEAD = 64 * 1024  # how much of a rejected record is kept in quarantine
COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}
FORMATS = {".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".pq": "parquet",
           ".txt": "text", ".text": "text", ".md": "text", ".rst": "text"}


@dataclass
class Doc:
    position: int           # line number (1-based), row index (0-based) or 0 for a whole-file document
    location: str
    text: Any               # validated by the stage: must be a non-empty str
    meta: dict | None
    raw_size: int = 0
    doc_id: Any = None


@dataclass
class Bad:
    position: int
    location: str
    reason: str
    detail: str
    raw: bytes = b""
    rows: int = 1           # input rows this entry stands for; 0 for a note about the file itself


def detect(path: str, fmt: str = "auto") -> tuple[str | None, str | None]:
    """(format, compression) from the file name; format None when unknown."""
    name = path.lower().rsplit("/", 1)[-1]
    compression = None
    for ext, comp in COMPRESSIONS.items():
        if name.endswith(ext):
            compression, name = comp, name[: -len(ext)]
            break
    if fmt != "auto":
        return fmt, compression
    for ext, f in FORMATS.items():
        if name.endswith(ext):
            return f, compression
    return None, compression


def decompress(raw: IO[bytes], compression: str | None) -> IO[bytes]:
    if compression == "gzip":
        # GzipFile is buffered already; a second buffer's read(n) would drop the lines it had decompressed
        # when a truncated stream raises EOFError part-way through.
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if compression == "zstd":
        import zstandard

        reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
        return io.BufferedReader(reader, buffer_size=1 << 20)
    if isinstance(raw, AbstractBufferedFile):
        # fsspec's object-store files (s3, gcs...) take no size in readline(): buffer them like a disk file.
        return io.BufferedReader(raw, buffer_size=1 << 20)
    return raw


# Errors a damaged compressed stream raises part-way through.
def _stream_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [EOFError, zlib.error, gzip.BadGzipFile]
    try:
        import zstandard

        errors.append(zstandard.ZstdError)
    except ImportError:  # pragma: no cover
        pass
    return tuple(errors)


STREAM_ERRORS = _stream_errors()


def _lines(f: IO[bytes], max_record_bytes: int) -> Iterator[tuple[int, bytes, int]]:
    """(line number, line bytes or head of an over-long line, full length); over-long lines are not held."""
    line_no = 0
    while True:
        line = f.readline(max_record_bytes + 1)
        if not line:
            return
        line_no += 1
        total = len(line)
        if total > max_record_bytes and not line.endswith(b"\n"):
            head = line[:RAW_HEAD]
            while True:  # skip the rest of the line without keeping it
                chunk = f.readline(1 << 20)
                total += len(chunk)
                if not chunk or chunk.endswith(b"\n"):
                    break
            yield line_no, head, total
            continue
        yield line_no, line, total


def read_jsonl(f: IO[bytes], text_field: str, id_field: str | None, max_record_bytes: int) -> Iterator[Doc | Bad]:
    line_no = 0
    try:
        for line_no, line, total in _lines(f, max_record_bytes):
            loc = f"line {line_no}"
            if total > max_record_bytes:
                yield Bad(line_no, loc, "record_too_large",
                          f"record of {total} bytes exceeds max_record_bytes={max_record_bytes}", line)
                continue
            if not line.strip():
                continue  # blank lines are separators, not records
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as e:
                yield Bad(line_no, loc, "invalid_utf8", f"invalid UTF-8 at byte {e.start} of the line: {e.reason}", line)
                continue
            try:
                record = _loads(line)
            except _JSONError as e:
                yield Bad(line_no, loc, "invalid_json", f"invalid JSON: {e}", line)
                continue
            if not isinstance(record, dict):
                yield Bad(line_no, loc, "not_an_object", f"JSON {type(record).__name__}, expected an object", line)
                continue
            if text_field not in record:
                yield Bad(line_no, loc, "missing_text", f"no field {text_field!r} (has {sorted(record)[:10]})", line)
                continue
            text = record.pop(text_field)
            doc_id = record.pop(id_field, None) if id_field else None
            yield Doc(line_no, loc, text, record or None, total, doc_id)
    except STREAM_ERRORS as e:
        yield Bad(line_no, f"after line {line_no}", "truncated_input",
                  f"the compressed stream ends early or is corrupt after line {line_no}: {e}", rows=0)


def read_text(f: IO[bytes], mode: str, max_record_bytes: int) -> Iterator[Doc | Bad]:
    if mode == "line":
        line_no = 0
        try:
            for line_no, line, total in _lines(f, max_record_bytes):
                loc = f"line {line_no}"
                if total > max_record_bytes:
                    yield Bad(line_no, loc, "record_too_large", f"line of {total} bytes exceeds {max_record_bytes}", line)
                    continue
                if not line.strip():
                    continue
                try:
                    yield Doc(line_no, loc, line.decode("utf-8").rstrip("\r\n"), None, total)
                except UnicodeDecodeError as e:
                    yield Bad(line_no, loc, "invalid_utf8", f"invalid UTF-8 at byte {e.start}: {e.reason}", line)
        except STREAM_ERRORS as e:
            yield Bad(line_no, f"after line {line_no}", "truncated_input", f"stream ends early: {e}", rows=0)
        return
    # mode == "file": the whole file is one document
    try:
        data = f.read(max_record_bytes + 1)
        total = len(data)
        if total > max_record_bytes:
            while chunk := f.read(8 << 20):
                total += len(chunk)
            yield Bad(0, "file", "record_too_large", f"document of {total} bytes exceeds {max_record_bytes}",
                      data[:RAW_HEAD])
            return
    except STREAM_ERRORS as e:
        yield Bad(0, "file", "truncated_input", f"stream ends early or is corrupt: {e}")
        return
    if total == 0:
        yield Bad(0, "file", "empty_file", "the file is empty", rows=0)
        return
    try:
        yield Doc(0, "file", data.decode("utf-8"), None, total)
    except UnicodeDecodeError as e:
        yield Bad(0, "file", "invalid_utf8", f"invalid UTF-8 at byte {e.start}: {e.reason}", data)


def read_parquet(f: IO[bytes], text_field: str, id_field: str | None, batch_rows: int = 4096) -> Iterator[Doc | Bad]:
    try:
        pf = pq.ParquetFile(f)
    except (pa.ArrowInvalid, OSError) as e:
        yield Bad(0, "file", "corrupt_input", f"not a readable Parquet file: {e}", rows=0)
        return
    total_rows = pf.metadata.num_rows
    schema = pf.schema_arrow
    if text_field not in schema.names:
        yield Bad(0, "file", "missing_text", f"no column {text_field!r} (columns: {schema.names}); all "
                  f"{total_rows} rows quarantined", rows=total_rows)
        return
    typ = schema.field(text_field).type
    if not (pa.types.is_string(typ) or pa.types.is_large_string(typ)):
        yield Bad(0, "file", "non_string_text", f"column {text_field!r} has type {typ}, expected string; all "
                  f"{total_rows} rows quarantined", rows=total_rows)
        return
    row = 0
    try:
        for batch in pf.iter_batches(batch_size=batch_rows):
            texts = batch.column(text_field)
            ids = batch.column(id_field).to_pylist() if id_field and id_field in batch.schema.names else None
            rest = batch.drop_columns([c for c in (text_field, id_field) if c and c in batch.schema.names])
            metas = rest.to_pylist() if rest.num_columns else [None] * batch.num_rows
            try:
                texts.validate(full=True)
                values = texts.to_pylist()
            except pa.ArrowInvalid:
                values = [_decode_or_bad(v) for v in texts.cast(pa.binary()).to_pylist()]
            for i, text in enumerate(values):
                pos = row + i
                if isinstance(text, _InvalidUtf8):
                    yield Bad(pos, f"row {pos}", "invalid_utf8", text.detail, text.raw)
                    continue
                yield Doc(pos, f"row {pos}", text, metas[i] or None, 0, ids[i] if ids else None)
            row += batch.num_rows
    except (pa.ArrowInvalid, OSError) as e:
        left = total_rows - row
        yield Bad(row, f"row {row}", "corrupt_input", f"cannot read rows {row}..{total_rows - 1}: {e}", rows=left)


class _InvalidUtf8:
    def __init__(self, raw: bytes, detail: str) -> None:
        self.raw, self.detail = raw, detail


def _decode_or_bad(value: bytes | None):
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as e:
        return _InvalidUtf8(value, f"invalid UTF-8 at byte {e.start}: {e.reason}")
