"""Streaming readers for ingest: JSONL (plain, .gz, .zst), Parquet and plain text (web crawls: ``warc.py``).

Each reader yields :class:`Doc` for a readable record and :class:`Bad` for anything it cannot use, with
where it was and why, so that the stage can quarantine and count it. Memory stays bounded by one record
(itself bounded by ``max_record_bytes``) plus one Parquet batch. A reader raises only for I/O failure of
the file itself; anything wrong with one record is a :class:`Bad` for that record.
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import msgspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fsspec.spec import AbstractBufferedFile

from airflow_curation.core.schema import is_text_type

# The fast parser is a declared dependency (pyproject.toml), never an optional import: an install without
# it fails loudly instead of parsing every line at the standard library's speed. Decoder reused: no
# per-line set-up (benchmarks/RESULTS.md, JSON parsers).
_decode = msgspec.json.Decoder().decode
FAST_PARSER = msgspec.__name__

RAW_HEAD = 64 * 1024  # how much of a rejected record is kept in quarantine
COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}
FORMATS = {
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".ndjson": "jsonl",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".txt": "text",
    ".text": "text",
    ".md": "text",
    ".rst": "text",
    ".warc": "warc",
    ".wet": "warc",  # Common Crawl's WET files (*.warc.wet.gz) are WARC files of conversion records
    ".arc": "arc",
    ".html": "html",
    ".htm": "html",
}


@dataclass
class Doc:
    position: int  # line number (1-based), row index (0-based) or 0 for a whole-file document
    location: str
    text: Any  # validated by the stage: must be a non-empty str
    meta: dict | None
    raw_size: int = 0
    doc_id: Any = None
    raw: bytes = b""  # the input line, for the quarantine should the stage reject the record


@dataclass
class Bad:
    position: int
    location: str
    reason: str
    detail: str
    raw: bytes = b""
    rows: int = 1  # input rows this entry stands for; 0 for a note about the file itself


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


def sniff(raw: IO[bytes], named: str | None) -> tuple[str | None, Bad | None]:
    """(compression, note): the compression the file's first bytes show, whatever its name says. A plain
    file named ``.gz`` is read as plain (a gzip reader would fail on its first byte and lose every row),
    a gzip one named ``.jsonl`` is decompressed; either way a ``compression_mismatch`` note says so.

    Only where the first bytes can be seen without losing them (a buffered or seekable file); otherwise
    the name decides. Text cannot start with either magic: both are invalid UTF-8 there."""
    if hasattr(raw, "peek"):
        head = raw.peek(4)[:4]
    elif raw.seekable():
        head = raw.read(4)
        raw.seek(0)
    else:
        return named, None
    found = _compression_of(head)
    if found == named:
        return named, None
    said = f"named as {named}" if named else "named as a plain file"
    bytes_are = f"its bytes are {found}" if found else "its bytes are not gzip or zstd"
    return found, Bad(0, "file", "compression_mismatch", f"{said} but {bytes_are}: read as {found or 'plain'}", rows=0)


def _compression_of(head: bytes) -> str | None:
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if len(head) == 4 and (
        int.from_bytes(head, "little") == _ZSTD_MAGIC or int.from_bytes(head, "little") in _SKIPPABLE
    ):
        return "zstd"
    return None


def decompress(raw: IO[bytes], compression: str | None) -> IO[bytes]:
    if compression == "gzip":
        # GzipFile is buffered already; a second buffer's read(n) would drop the lines it had decompressed
        # when a truncated stream raises EOFError part-way through.
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if compression == "zstd":
        return io.BufferedReader(_ZstdStream(raw), buffer_size=1 << 20)
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

_ZSTD_MAGIC = 0xFD2FB528
_SKIPPABLE = range(0x184D2A50, 0x184D2A60)


class _ZstdFrames:
    """Follows zstd frame boundaries (RFC 8878) in the compressed bytes as the decompressor reads them.

    zstandard's stream reader returns what it has when its input ends inside a frame, without an error,
    so a cut file would read as a shorter complete one. This tells the two apart without decompressing
    twice: it parses only frame and block headers and counts the rest.
    """

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self._state = "magic"  # what the next header is: magic, descriptor, block, skippable size
        self._need = 4  # bytes of that header
        self._head = b""
        self._skip = 0  # payload bytes to pass before it
        self._checksum = False
        self.lost = False  # not zstd framing: the decompressor will say what is wrong

    @property
    def inside_frame(self) -> bool:
        return not self.lost and (self._state != "magic" or bool(self._head) or self._skip > 0)

    def read(self, n: int = -1) -> bytes:
        data = self._raw.read(n)
        self._feed(data)
        return data

    def _feed(self, data: bytes) -> None:
        pos = 0
        while pos < len(data) and not self.lost:
            if self._skip:
                k = min(self._skip, len(data) - pos)
                self._skip -= k
                pos += k
                continue
            take = min(self._need - len(self._head), len(data) - pos)
            self._head += data[pos : pos + take]
            pos += take
            if len(self._head) == self._need:
                head, self._head = self._head, b""
                self._on_header(head)

    def _expect(self, state: str, need: int, skip: int = 0) -> None:
        self._state, self._need, self._skip = state, need, skip

    def _on_header(self, head: bytes) -> None:
        value = int.from_bytes(head, "little")
        if self._state == "magic":
            if value == _ZSTD_MAGIC:
                self._expect("descriptor", 1)
            elif value in _SKIPPABLE:
                self._expect("skippable size", 4)
            else:
                self.lost = True
        elif self._state == "skippable size":
            self._expect("magic", 4, skip=value)
        elif self._state == "descriptor":
            fcs_flag, single, dict_flag = value >> 6, (value >> 5) & 1, value & 3
            self._checksum = bool((value >> 2) & 1)
            rest = (0 if single else 1) + (0, 1, 2, 4)[dict_flag] + ((1 if single else 0), 2, 4, 8)[fcs_flag]
            self._expect("block", 3, skip=rest)
        else:  # block header: last-block bit, type (raw, RLE, compressed, reserved), size
            last, kind, size = value & 1, (value >> 1) & 3, value >> 3
            if kind == 3:
                self.lost = True
                return
            payload = 1 if kind == 1 else size
            if last:
                self._expect("magic", 4, skip=payload + (4 if self._checksum else 0))
            else:
                self._expect("block", 3, skip=payload)


class _ZstdStream(io.RawIOBase):
    """Decompressed zstd (every frame), raising EOFError when the input ends inside a frame, as gzip does."""

    def __init__(self, raw: IO[bytes]) -> None:
        import zstandard

        self._frames = _ZstdFrames(raw)
        self._reader = zstandard.ZstdDecompressor().stream_reader(self._frames, read_across_frames=True)
        self._pos = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self._reader.readinto(buffer)
        if n == 0 and self._frames.inside_frame:
            raise EOFError("the zstd stream ends inside a frame")
        self._pos += n
        return n

    def tell(self) -> int:
        # Decompressed bytes read so far. FastWARC asks once, and panics (a Rust unwrap) on
        # io.RawIOBase's tell, which seeks; gzip's reader answers, so a .warc.zst must too.
        return self._pos


_BOM = b"\xef\xbb\xbf"


def _lines(f: IO[bytes], max_record_bytes: int) -> Iterator[tuple[int, bytes, int]]:
    """(line number, line bytes or head of an over-long line, full length); over-long lines are not held.

    A UTF-8 byte order mark at the start of the file is not part of line 1 (editors on Windows add it).
    """
    line_no = 0
    while True:
        line = f.readline(max_record_bytes + 1)
        if not line:
            return
        line_no += 1
        total = len(line)
        if line_no == 1 and line.startswith(_BOM):
            line = line[len(_BOM) :]
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


def _parse(line: bytes) -> tuple[Any, tuple[str, str] | None]:
    """(JSON value, None) or (None, (reason, detail)).

    One behaviour (docs/architecture.md, Ingest): RFC 8259 JSON in UTF-8, integers of any size up to
    Python's str-digits limit kept exact, the last of duplicate keys wins, NaN / Infinity refused
    (``invalid_json``: not JSON), a number beyond the float range refused (``unsupported_value``). msgspec
    parses the line; a line it refuses is parsed again by the standard library, which gives the reason and
    accepts the one thing msgspec refuses that is JSON: a lone surrogate escape (``\\ud800``), which the
    stage then quarantines as ``invalid_utf8`` wherever it lands (text, id or meta).
    """
    try:
        return _decode(line), None
    except RecursionError:
        return None, ("unsupported_value", "JSON nested deeper than the parser allows")
    except msgspec.DecodeError:  # ValidationError (a number out of range) is one too
        pass
    try:
        # Parse the str, not the bytes: json.loads would guess UTF-16/32 from leading NUL bytes.
        decoded = line.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, ("invalid_utf8", f"invalid UTF-8 at byte {e.start} of the line: {e.reason}")
    try:
        return json.loads(decoded, parse_constant=_not_json, parse_float=_finite), None
    except _NotJSON as e:
        return None, ("invalid_json", str(e))
    except json.JSONDecodeError as e:
        return None, ("invalid_json", f"invalid JSON: {e}")
    except RecursionError:
        return None, ("unsupported_value", "JSON nested deeper than the parser allows")
    except ValueError as e:  # an integer beyond Python's str-digits limit, a float beyond its range
        return None, ("unsupported_value", f"JSON value the parser cannot represent: {e}")


class _NotJSON(ValueError):
    pass


def _not_json(name: str):
    raise _NotJSON(f"invalid JSON: {name} is not a JSON value (RFC 8259)")


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number {text[:40]} is beyond the float range")
    return value


def read_jsonl(f: IO[bytes], text_field: str, id_field: str | None, max_record_bytes: int) -> Iterator[Doc | Bad]:
    line_no = 0
    try:
        for line_no, line, total in _lines(f, max_record_bytes):
            loc = f"line {line_no}"
            if total > max_record_bytes:
                yield Bad(
                    line_no,
                    loc,
                    "record_too_large",
                    f"record of {total} bytes exceeds max_record_bytes={max_record_bytes}",
                    line,
                )
                continue
            if not line.strip():
                continue  # blank lines are separators, not records
            record, problem = _parse(line)
            if problem and problem[0] != "unsupported_value" and not line.endswith(b"\n"):
                # An unparsable last line with no newline is the head of a record the file was cut in
                # (a partial copy, a stream cut at a frame or member boundary): not a record of its own.
                yield Bad(
                    line_no, loc, "truncated_input", f"the input ends inside a record ({problem[1]})", line, rows=0
                )
                continue
            if problem:
                yield Bad(line_no, loc, *problem, line)
                continue
            if not isinstance(record, dict):
                yield Bad(line_no, loc, "not_an_object", f"JSON {type(record).__name__}, expected an object", line)
                continue
            if text_field not in record:
                yield Bad(line_no, loc, "missing_text", f"no field {text_field!r} (has {sorted(record)[:10]})", line)
                continue
            text = record.pop(text_field)
            doc_id = record.pop(id_field, None) if id_field else None
            yield Doc(line_no, loc, text, record or None, total, doc_id, line)
    except STREAM_ERRORS as e:
        yield Bad(
            line_no,
            f"after line {line_no}",
            "truncated_input",
            f"the compressed stream ends early or is corrupt after line {line_no}: {e}",
            rows=0,
        )


def read_text(f: IO[bytes], mode: str, max_record_bytes: int) -> Iterator[Doc | Bad]:
    if mode == "line":
        line_no = 0
        try:
            for line_no, line, total in _lines(f, max_record_bytes):
                loc = f"line {line_no}"
                if total > max_record_bytes:
                    yield Bad(
                        line_no, loc, "record_too_large", f"line of {total} bytes exceeds {max_record_bytes}", line
                    )
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
            yield Bad(
                0, "file", "record_too_large", f"document of {total} bytes exceeds {max_record_bytes}", data[:RAW_HEAD]
            )
            return
    except STREAM_ERRORS as e:
        yield Bad(0, "file", "truncated_input", f"stream ends early or is corrupt: {e}")
        return
    if total == 0:
        yield Bad(0, "file", "empty_file", "the file is empty", rows=0)
        return
    try:
        yield Doc(0, "file", data.removeprefix(_BOM).decode("utf-8"), None, total)
    except UnicodeDecodeError as e:
        yield Bad(0, "file", "invalid_utf8", f"invalid UTF-8 at byte {e.start}: {e.reason}", data)


def read_parquet(
    f: IO[bytes], text_field: str, id_field: str | None, batch_rows: int = 4096, max_text_bytes: int | None = None
) -> Iterator[Doc | Bad]:
    """The rows of a Parquet file. A text value longer than ``max_text_bytes`` is ``text_too_large``, found by
    its length in the Arrow batch: it never becomes a Python string (a 400 MB value cost 2.6 GB of memory
    as one: the batch, its Python bytes and string, the size check's encoding)."""
    try:
        pf = pq.ParquetFile(f)
    except (pa.ArrowException, OSError) as e:
        yield Bad(0, "file", "corrupt_input", f"not a readable Parquet file: {e}", rows=0)
        return
    total_rows = pf.metadata.num_rows
    schema = pf.schema_arrow
    problem = _schema_problem(schema, text_field, id_field)
    if problem:
        reason, detail = problem
        yield Bad(0, "file", reason, f"{detail}; all {total_rows} rows quarantined", rows=total_rows)
        return
    row = 0
    try:
        for batch in pf.iter_batches(batch_size=batch_rows, use_threads=False):  # one core a unit
            too_large = _large_texts(batch, row, text_field, max_text_bytes)
            start = 0  # the rows between two texts too large, converted as slices of the batch (no copy)
            for i in [*too_large, batch.num_rows]:
                if i > start:
                    yield from _batch_records(batch.slice(start, i - start), row + start, text_field, id_field)
                if i < batch.num_rows:
                    yield too_large[i]
                start = i + 1
            row += batch.num_rows
    except (pa.ArrowException, OSError) as e:
        left = total_rows - row
        yield Bad(row, f"row {row}", "corrupt_input", f"cannot read rows {row}..{total_rows - 1}: {e}", rows=left)


def _schema_problem(schema: pa.Schema, text_field: str, id_field: str | None) -> tuple[str, str] | None:
    names = schema.names
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        # Which of two same-named columns is the text (or the id, or a meta field) is anyone's guess.
        return "duplicate_column", f"column names {repeated} appear more than once (columns: {names})"
    if text_field not in names:
        return "missing_text", f"no column {text_field!r} (columns: {names})"
    typ = schema.field(text_field).type
    if not is_text_type(typ):
        return "non_string_text", f"column {text_field!r} has type {typ}, expected string"
    return None


def _as_binary(column: pa.Array) -> pa.Array:
    """A text column's bytes, whatever their UTF-8, in the same layout."""
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    if pa.types.is_string_view(column.type):
        return column.cast(pa.binary_view())
    return column.cast(pa.binary() if pa.types.is_string(column.type) else pa.large_binary())


def text_too_large(n: int, max_bytes: int) -> tuple[str, str]:
    """(reason, detail) of a text of ``n`` bytes past the limit: what every reader and the stage say."""
    return "text_too_large", f"text of {n} bytes exceeds max_text_bytes={max_bytes}"


def _large_texts(batch: pa.RecordBatch, row: int, text_field: str, max_bytes: int | None) -> dict[int, Bad]:
    """A ``text_too_large`` entry (keeping the text's head) by row of ``batch`` (whose first row is the file's
    ``row``) for each text longer than ``max_bytes``: measured in Arrow, so that such a text is never
    converted to Python."""
    if max_bytes is None:
        return {}
    text = batch.column(text_field)
    if pa.types.is_string_view(text.type):  # Arrow's length kernel takes no views
        text = text.cast(pa.large_string())
    text = _as_binary(text)
    lengths = pc.binary_length(text)
    over = pc.fill_null(pc.greater(lengths, max_bytes), False)
    if not pc.any(over).as_py():
        return {}
    found = {}
    for i in pc.indices_nonzero(over).to_pylist():
        # the head through a kernel: a scalar of the value (text[i]) would copy all of it
        head = pc.binary_slice(text.slice(i, 1), 0, RAW_HEAD)[0].as_py()
        found[i] = Bad(row + i, f"row {row + i}", *text_too_large(lengths[i].as_py(), max_bytes), head)
    return found


def _batch_records(batch: pa.RecordBatch, row: int, text_field: str, id_field: str | None) -> Iterator[Doc | Bad]:
    """One batch's rows; a value that cannot be converted (invalid UTF-8...) spoils its own row only."""
    columns: dict[str, list] = {}
    spoiled: list[tuple[str, list]] = []  # columns holding a value that did not convert, in schema order
    for name in batch.schema.names:
        columns[name], failed = _values(batch.column(name))
        if failed:
            spoiled.append((name, columns[name]))
    texts = columns.pop(text_field)
    ids = columns.pop(id_field) if id_field and id_field in columns else None
    for i in range(batch.num_rows):
        pos = row + i
        bad = next(((n, v[i]) for n, v in spoiled if isinstance(v[i], _Unconvertible)), None)
        if bad:
            name, value = bad
            yield Bad(pos, f"row {pos}", value.reason, f"column {name!r}: {value.detail}", value.raw)
            continue
        meta = {n: v[i] for n, v in columns.items()}
        yield Doc(pos, f"row {pos}", texts[i], meta or None, 0, ids[i] if ids else None)


class _Unconvertible:
    """A Parquet value that has no Python form: stands in for it so that only its row is quarantined."""

    def __init__(self, reason: str, detail: str, raw: bytes = b"") -> None:
        self.reason, self.detail, self.raw = reason, detail, raw


def _values(column: pa.Array) -> tuple[list, bool]:
    """(Python values of a column, whether any failed): a value that fails to convert becomes an
    :class:`_Unconvertible`. The whole column converts at once unless one value cannot."""
    try:
        values = column.to_pylist()
    except MemoryError:
        raise
    except Exception:  # noqa: BLE001 - invalid UTF-8, a date past year 9999 (OverflowError)...: found below
        pass
    else:
        return _checked(column, values)
    if is_text_type(column.type):
        return [_decode_or_bad(v) for v in _as_binary(column).to_pylist()], True
    return _checked(column, [_value_or_bad(column, i) for i in range(len(column))], failed=True)


_PER_DAY = {"s": 86_400, "ms": 86_400_000, "us": 86_400_000_000, "ns": 86_400_000_000_000}
_NAT = -(2**63)  # the smallest nanosecond timestamp or duration: pandas's NaT, so as_py() gives no value


def _checked(column: pa.Array, values: list, failed: bool = False) -> tuple[list, bool]:
    """Values that convert without an error but wrong are unconvertible too: a time of day outside
    00:00-24:00 wraps (time64[ns] 2**62 reads as 23:53:38), the smallest nanosecond timestamp or
    duration reads as NaT. (Top-level columns only: inside a list or struct they pass as they read.)"""
    typ = column.type
    if pa.types.is_time32(typ) or pa.types.is_time64(typ):
        ticks = column.cast(pa.int32() if pa.types.is_time32(typ) else pa.int64())
        wrong = pc.or_(pc.less(ticks, 0), pc.greater_equal(ticks, _PER_DAY[typ.unit]))
        what = "time of day {} " + typ.unit + " is outside 00:00-24:00"
    elif (pa.types.is_timestamp(typ) or pa.types.is_duration(typ)) and typ.unit == "ns":
        ticks = column.cast(pa.int64())
        wrong = pc.equal(ticks, _NAT)
        what = "{} ns is the NaT sentinel, not a value"
    else:
        return values, failed
    if not pc.any(wrong).as_py():
        return values, failed
    rows = [i for i, w in enumerate(wrong.to_pylist()) if w]
    for i in rows:
        values[i] = _Unconvertible("unsupported_value", what.format(ticks[i].as_py()))
    return values, failed or bool(rows)


def _value_or_bad(column: pa.Array, i: int):
    try:
        return column[i].as_py()
    except UnicodeDecodeError as e:  # invalid UTF-8 nested in a list or struct
        return _Unconvertible("invalid_utf8", f"invalid UTF-8 in a nested value: {e.reason}")
    except Exception as e:  # noqa: BLE001 - whatever one value raises (OverflowError: a date past year 9999) spoils its row only
        return _Unconvertible("unsupported_value", f"cannot convert the value: {type(e).__name__}: {e}")


def _decode_or_bad(value: bytes | None):
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as e:
        return _Unconvertible("invalid_utf8", f"invalid UTF-8 at byte {e.start}: {e.reason}", value)
