"""Record what a piece of code opens for reading: the tests that say a task reads only its slice.

A file is recorded each time it is opened through the lake's storage (``storage.open_read``, ``open_arrow``),
and each Parquet footer parsed (``footer:<path>``: a ``pq.ParquetFile`` built, or a file or path handed to
pyarrow's ``read_table`` / ``read_schema`` / ``read_metadata``; a path is opened there without the storage layer).
"""

from __future__ import annotations

from typing import Any

import pyarrow.parquet as pq

from airflow_curation.core import storage


def record_opens(monkeypatch) -> list[str]:
    """Every open and footer from now on (until ``monkeypatch`` is undone), in order."""
    opened: list[str] = []

    def counting(real, label: str):
        def wrapper(source: Any, *args, **kwargs):
            path = source if isinstance(source, str) else getattr(source, "path", source)
            opened.append(f"{label}{path}")
            return real(source, *args, **kwargs)

        return wrapper

    monkeypatch.setattr(storage, "open_read", counting(storage.open_read, ""))
    monkeypatch.setattr(storage, "open_arrow", counting(storage.open_arrow, ""))
    monkeypatch.setattr(pq, "ParquetFile", counting(pq.ParquetFile, "footer:"))
    for name in ("read_table", "read_schema", "read_metadata"):
        monkeypatch.setattr(pq, name, counting(getattr(pq, name), "footer:"))
    return opened


def opens_of(opened: list[str], uri: str) -> int:
    """How many times ``uri`` was opened (its footer parses not counted)."""
    return sum(1 for f in opened if f == uri)


def footers_of(opened: list[str], uri: str) -> int:
    """How many times ``uri``'s footer was parsed."""
    return sum(1 for f in opened if f == f"footer:{uri}")
