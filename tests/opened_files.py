"""Record what a piece of code opens for reading: the tests that say a task reads only its slice.

A file is recorded each time it is opened or fetched whole through the lake's storage (``storage.open_read``,
``open_arrow``, ``fetch``), and each Parquet footer parsed (``footer:<path>``: a ``pq.ParquetFile`` built, or a
file or path handed to pyarrow's ``read_table`` / ``read_schema`` / ``read_metadata``; a path is opened there
without the storage layer). An open of a file a unit already fetched and holds (``storage.holding``) reads no
byte of the file again: it is recorded as ``held:<path>``, and the footers parsed from it under the file's path.
"""

from __future__ import annotations

from typing import Any

import pyarrow.parquet as pq

from airflow_curation.core import storage


def record_opens(monkeypatch) -> list[str]:
    """Every open and footer from now on (until ``monkeypatch`` is undone), in order."""
    opened: list[str] = []
    readers: list[tuple[Any, str]] = []  # (reader over a held buffer, its file's path): kept, so ids stay unique

    def path_of(source: Any) -> Any:
        if isinstance(source, str):
            return source
        return next((p for r, p in readers if r is source), getattr(source, "path", source))

    def counting(real, label: str):
        def wrapper(source: Any, *args, **kwargs):
            path = path_of(source)
            held = not label and isinstance(source, str) and storage.held(source) is not None
            opened.append(f"{'held:' if held else label}{path}")
            result = real(source, *args, **kwargs)
            if held:
                readers.append((result, path))
            return result

        return wrapper

    monkeypatch.setattr(storage, "open_read", counting(storage.open_read, ""))
    monkeypatch.setattr(storage, "open_arrow", counting(storage.open_arrow, ""))
    monkeypatch.setattr(storage, "fetch", counting(storage.fetch, ""))  # the one read of a file a unit verifies
    monkeypatch.setattr(pq, "ParquetFile", counting(pq.ParquetFile, "footer:"))
    for name in ("read_table", "read_schema", "read_metadata"):
        monkeypatch.setattr(pq, name, counting(getattr(pq, name), "footer:"))
    return opened


def opens_of(opened: list[str], uri: str) -> int:
    """How many times ``uri`` was opened or fetched: its bytes read (its footer parses and the opens of
    its held buffer not counted)."""
    return sum(1 for f in opened if f == uri)


def held_of(opened: list[str], uri: str) -> int:
    """How many times ``uri``'s held buffer was opened (parsed again without reading the file)."""
    return sum(1 for f in opened if f == f"held:{uri}")


def footers_of(opened: list[str], uri: str) -> int:
    """How many times ``uri``'s footer was parsed."""
    return sum(1 for f in opened if f == f"footer:{uri}")


def by_unit(monkeypatch, opened: list, *stages: type) -> dict[tuple[str, str], tuple[list[str], list]]:
    """What each unit of ``stages`` (classes whose ``process_unit`` runs in this process, and their subclasses)
    added to ``opened`` while it ran: (stage class name, unit id) -> (the unit's inputs, that slice); a unit
    run twice: its last run."""
    units: dict[tuple[str, str], tuple[list[str], list]] = {}
    for cls in stages:

        def wrapped(self, unit, real=cls.process_unit):
            start = len(opened)
            try:
                return real(self, unit)
            finally:
                units[(type(self).__name__, unit.unit_id)] = (list(unit.inputs), opened[start:])

        monkeypatch.setattr(cls, "process_unit", wrapped)
    return units


def record_gets(monkeypatch) -> list[tuple[str, int]]:
    """Every S3 GET request s3fs sends from now on, as ``(s3://bucket/key, bytes returned)``, in order."""
    import s3fs

    gets: list[tuple[str, int]] = []
    real = s3fs.S3FileSystem._call_s3

    async def counting(self, method, *args, **kwargs):
        out = await real(self, method, *args, **kwargs)
        if method == "get_object":
            gets.append((f"s3://{kwargs['Bucket']}/{kwargs['Key']}", int(out.get("ContentLength") or 0)))
        return out

    monkeypatch.setattr(s3fs.S3FileSystem, "_call_s3", counting)
    return gets
