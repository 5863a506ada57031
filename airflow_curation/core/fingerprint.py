"""Stable fingerprints of configurations and content."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import xxhash


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def config_fingerprint(stage: str, config: dict[str, Any], version: str = "1") -> str:
    """16 hex chars naming a stage's configuration; a change in any setting gives a new one.

    ``version`` is the stage's own logic version: bump it when the stage's output changes for the same
    config, so that old checkpoints stop matching.
    """
    payload = canonical_json({"stage": stage, "version": version, "config": config})
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


class StreamChecksum:
    """xxh64 over the bytes as they are written, so that a shard's checksum costs no second read."""

    def __init__(self) -> None:
        self._h = xxhash.xxh64()
        self.nbytes = 0

    def update(self, data: bytes | memoryview) -> None:
        self._h.update(data)
        self.nbytes += len(data)

    def hexdigest(self) -> str:
        return f"xxh64:{self._h.hexdigest()}"


def checksum_bytes(data: Any) -> str:
    """The checksum (:class:`StreamChecksum`'s) of bytes held in memory: anything with the buffer protocol."""
    c = StreamChecksum()
    c.update(memoryview(data))
    return c.hexdigest()


STAMP_PREFIX = "stamp:"


def stamp_checksum(size: int, stamp: str) -> str:
    """The identity of one version of a file from its size and storage stamp (``storage.stat``: inode and
    times on a disk, ETag or version on an object store), no byte read: what a user's input file is known by
    (a lake's files are known by their content's xxh64, which their writer computed on the way out)."""
    return STAMP_PREFIX + xxhash.xxh64(f"{size} {stamp}".encode()).hexdigest()


def file_identity(url: str) -> tuple[int, str]:
    """``(size, identity)`` of a file someone else wrote: :func:`stamp_checksum` where its storage gives a
    stamp (one stat or HEAD), else the xxh64 of its content (a read of the whole file)."""
    from airflow_curation.core import storage

    size, stamp = storage.stat(url)
    return size, (stamp_checksum(size, stamp) if stamp else checksum_url(url))


def checksum_url(url: str, chunk: int = 8 << 20) -> str:
    from airflow_curation.core import storage

    c = StreamChecksum()
    with storage.open_read(url) as f:
        while block := f.read(chunk):
            c.update(block)
    return c.hexdigest()


def checksum_folder(url: str) -> str:
    """xxh64 over every file under ``url`` (recursively, sorted by relative path; names starting with a
    dot, such as ``.gitattributes`` or a ``.cache`` folder, are left out): the identity of a model folder.

    Each file's relative path and content checksum enter the digest, so a renamed, added, removed or
    changed file gives another value; a copy of the folder elsewhere gives the same one.
    """
    from airflow_curation.core import storage

    fs, root = storage.filesystem(url)
    files = sorted(fs.find(root))
    if not files:
        raise FileNotFoundError(f"{url}: no such folder, or it holds no files")
    c = StreamChecksum()
    for path in files:
        rel = path[len(root.rstrip("/")) :].lstrip("/")
        if any(part.startswith(".") for part in rel.split("/")):
            continue
        c.update(f"{rel}\0{checksum_url(storage.join(url, rel))}\n".encode())
    return c.hexdigest()
