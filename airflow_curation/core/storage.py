"""One storage layer for every stage: fsspec URLs (local folders, ``s3://``, ``gs://``...).

Writes are atomic from a reader's point of view: on a local filesystem we write a temporary file and
rename it; on object stores an object appears whole when its upload completes, so we write the final
key directly and let checkpoint records (written last) define "done".
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import posixpath
import uuid
from collections.abc import Iterator
from typing import IO, Any

import fsspec
from fsspec.core import url_to_fs

from airflow_curation.core.faults import fault_point

_STORAGE_OPTIONS: dict[str, dict[str, Any]] = {}


def set_storage_options(protocol: str, **options: Any) -> None:
    """Register fsspec options (credentials, endpoint) used for every URL of ``protocol``."""
    _STORAGE_OPTIONS[protocol] = options


def _env_storage_options(protocol: str) -> dict[str, Any]:
    # Job processes get their options through the environment so that no secret lands in a job spec.
    raw = os.environ.get(f"CURATION_STORAGE_OPTIONS_{protocol.upper()}")
    return json.loads(raw) if raw else {}


def protocol_of(url: str) -> str:
    return url.split("://", 1)[0] if "://" in url else "file"


def filesystem(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem for ``url`` and the path inside it."""
    protocol = protocol_of(url)
    options = {**_env_storage_options(protocol), **_STORAGE_OPTIONS.get(protocol, {})}
    if not is_local(url):
        # Other processes (jobs, sensors) write the lake: a cached listing would hide their checkpoints.
        options.setdefault("use_listings_cache", False)
    fs, path = url_to_fs(url, **options)
    return fs, path


def is_local(url: str) -> bool:
    return protocol_of(url) in ("file", "local")


def join(base: str, *parts: str) -> str:
    if "://" in base:
        protocol, rest = base.split("://", 1)
        return f"{protocol}://{posixpath.join(rest, *parts)}"
    return os.path.join(base, *parts)


def exists(url: str) -> bool:
    fs, path = filesystem(url)
    return fs.exists(path)


def size(url: str) -> int:
    fs, path = filesystem(url)
    return int(fs.size(path))


def makedirs(url: str) -> None:
    if is_local(url):
        fs, path = filesystem(url)
        fs.makedirs(path, exist_ok=True)
    # Object stores have no directories.


def listdir(url: str) -> list[str]:
    """Full URLs of the files directly under ``url`` (empty when it does not exist), sorted."""
    fs, path = filesystem(url)
    try:
        entries = fs.ls(path, detail=True)
    except FileNotFoundError:
        return []
    names = sorted(e["name"] for e in entries if e.get("type") == "file")
    return [_unstrip(url, path, n) for n in names]


def _unstrip(url: str, path: str, name: str) -> str:
    if "://" in url and not is_local(url):
        return f"{protocol_of(url)}://{name}"
    return name


def open_read(url: str, mode: str = "rb") -> IO:
    fs, path = filesystem(url)
    return fs.open(path, mode)


def read_bytes(url: str) -> bytes:
    with open_read(url) as f:
        return f.read()


def read_json(url: str) -> Any:
    return json.loads(read_bytes(url))


@contextlib.contextmanager
def atomic_open(url: str, mode: str = "wb") -> Iterator[IO]:
    """Open ``url`` for writing so that readers see either nothing or the whole file."""
    fs, path = filesystem(url)
    if is_local(url):
        parent = os.path.dirname(path)
        os.makedirs(parent, exist_ok=True)
        tmp = os.path.join(parent, f".{os.path.basename(path)}.tmp-{uuid.uuid4().hex[:12]}")
        try:
            with open(tmp, mode) as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            fault_point("storage.before_rename")
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
    else:
        # The object is published when the upload completes on close. Closing is what an fsspec file's
        # own context manager does even on error, which would publish a partial object: on error we
        # discard the upload (aborting a multipart one) and mark the file closed instead.
        raw = fs.open(path, "wb")
        f = raw if "b" in mode else io.TextIOWrapper(raw, encoding="utf-8")
        try:
            yield f
        except BaseException:
            discard = getattr(raw, "discard", None)
            if callable(discard):
                discard()
            with contextlib.suppress(AttributeError):  # fsspec buffered files: no upload on close/del
                raw.closed = True
            raise
        f.close()


def write_bytes(url: str, data: bytes) -> None:
    with atomic_open(url, "wb") as f:
        f.write(data)


def write_json(url: str, obj: Any) -> None:
    write_bytes(url, (json.dumps(obj, indent=1, sort_keys=True, default=str) + "\n").encode())


def remove(url: str) -> None:
    fs, path = filesystem(url)
    with contextlib.suppress(FileNotFoundError):
        fs.rm(path)


def glob(pattern: str) -> list[str]:
    fs, path = filesystem(pattern)
    return sorted(_unstrip(pattern, path, p) for p in fs.glob(path))
