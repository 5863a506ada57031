"""Re-verifying what upstream stages wrote, and the row books across stages.

A shard or attrs file is checked against the checksum its manifest recorded when a stage reads it, so a
flipped byte fails the unit that reads it (clearly, without retries) instead of flowing into the curated
data. Row counts are checked across stages: every stage reads exactly the rows its upstream manifest
hands on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_curation.core import storage, storage_map
from airflow_curation.core.fingerprint import STAMP_PREFIX, checksum_bytes, checksum_url, stamp_checksum

if TYPE_CHECKING:
    from airflow_curation.core.manifest import Manifest, ManifestHead, ShardEntry


class IntegrityError(ValueError):
    """A file differs from what its manifest recorded: corrupted or replaced after it was written."""


def verify_file(uri: str, expected: str | None, what: str = "file") -> None:
    """Raise :class:`IntegrityError` when ``uri``'s checksum is not ``expected``.

    One streaming xxh64 pass (several GB/s, so cheap beside any stage's work). ``expected`` None or
    empty means the writer recorded none (older manifests): nothing to compare.
    """
    if not expected:
        return
    try:
        actual = _stamp_now(uri) if expected.startswith(STAMP_PREFIX) else checksum_url(uri)
    except FileNotFoundError:
        raise _missing(uri, expected, what) from None
    _compare(uri, actual, expected, what)


def _stamp_now(uri: str) -> str:
    """The :func:`~airflow_curation.core.fingerprint.stamp_checksum` of ``uri`` as it is now."""
    size, stamp = storage.stat(uri)
    return stamp_checksum(size, stamp or "")


def _missing(uri: str, expected: str, what: str) -> IntegrityError:
    return IntegrityError(f"{what} {uri} is missing; its manifest lists it with checksum {expected}")


def _compare(uri: str, actual: str, expected: str, what: str) -> None:
    if actual != expected and expected.startswith(STAMP_PREFIX):
        raise IntegrityError(
            f"{what} {uri} was written again after this run planned it (its size or storage stamp changed): "
            "run the stage again, which plans it as it is now"
        )
    if actual != expected:
        raise IntegrityError(
            f"{what} {uri} has checksum {actual} but its manifest recorded {expected}: it was "
            f"corrupted or replaced after it was written; rerun the stage that wrote it (a unit whose "
            f"output no longer matches its checkpoint is redone; delete the file first if it is skipped)"
        )


def read_verified(uri: str, expected: str | None, what: str = "file") -> pa.Buffer:
    """``uri``'s whole content, fetched once (:func:`~airflow_curation.core.storage.fetch`: one GET on an
    object store) and checked against ``expected`` (the xxh64 its manifest recorded, as :func:`verify_file`
    does): the bytes a reader then parses (``pa.BufferReader``), so the file is not read a second time.

    Memory: the whole (compressed) file is held while it is parsed, up to ingest's shard target (256-512 MB).
    ``expected`` None or empty (no checksum recorded): the bytes, unchecked.

    :raises IntegrityError: the file is missing or its checksum is not ``expected`` (:func:`verify_file`'s messages).
    """
    stamped = bool(expected) and expected.startswith(STAMP_PREFIX)
    try:
        if stamped:  # a user's file known by its stamp: the same version as planned, then its bytes
            _compare(uri, _stamp_now(uri), expected, what)
        buffer = storage.fetch(uri)
    except FileNotFoundError:
        if not expected:
            raise
        raise _missing(uri, expected, what) from None
    if expected and not stamped:
        _compare(uri, checksum_bytes(buffer), expected, what)
    return buffer


@contextlib.contextmanager
def verified_reads(files: Iterable[tuple[str, str | None, str]]) -> Iterator[None]:
    """:func:`verify_files`, keeping the bytes: inside the block, the storage layer's opens of these files
    (``storage.open_read`` / ``open_arrow``: every stage reader) parse the verified bytes instead of fetching
    the files again, so a unit reads each input once. A file with no recorded checksum is neither fetched
    here nor held: it is read as it is opened.

    Memory: every checked file of the unit (its shard and attrs: compressed, up to ingest's 256-512 MB shard
    target) is held until the block ends; a user's file known by its stamp is checked (a stat) and not held.
    """
    held = {}
    for uri, expected, what in files:
        if expected and expected.startswith(STAMP_PREFIX):
            # A user's file (plain-file mode) is checked by its stamp and streamed by its readers, not held:
            # it may be of any size, where a lake's shards are ingest's target at most.
            verify_file(uri, expected, what)
        elif expected:
            held[uri] = read_verified(uri, expected, what)
    with storage.holding(held):
        yield


def shard_files(
    entry: "ShardEntry", attrs: Iterable[str] | None = None, name: str | None = None
) -> list[tuple[str, str | None, str]]:
    """``(uri, recorded checksum, what)`` of a manifest's shard and of its attrs files (``attrs``: those keys;
    None: every one), what :func:`verify_file` and :func:`verify_files` take."""
    name = name or entry.shard_id
    keys = list(entry.attrs) if attrs is None else list(attrs)
    return [(entry.uri, entry.checksum, f"shard {name}")] + [
        (entry.attrs[k], entry.attrs_checksums.get(k), f"{k} attrs of shard {name}") for k in keys
    ]


def verify_files(files: Iterable[tuple[str, str | None, str]], threads: int = 1) -> None:
    """:func:`verify_file` over ``(uri, checksum, what)`` triples, on up to ``threads`` threads (xxhash and
    file reads release the GIL: hashing scales with cores). Raises the first mismatch in the given order."""
    files = list(files)
    if threads <= 1 or len(files) <= 1:
        for f in files:
            verify_file(*f)
        return
    with ThreadPoolExecutor(max_workers=min(threads, len(files))) as pool:
        try:
            for _ in pool.map(storage_map.carried(lambda f: verify_file(*f)), files):
                pass
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def handed_rows(manifest: "Manifest | ManifestHead") -> int:
    """Rows a complete manifest hands to the next stage: the rows of the shards it lists (a head's total)."""
    return manifest.rows


def input_manifest_uris(config: Mapping[str, Any]) -> list[str]:
    """The manifests a stage run reads, from its config: ``input_manifest`` and, for a stage that takes
    several (mix), ``manifests``."""
    first = config.get("input_manifest")
    return [*([first] if first else []), *(config.get("manifests") or [])]


def chain_problem(manifest: "Manifest | ManifestHead", *upstreams: "Manifest | ManifestHead") -> str | None:
    """Why ``manifest``'s books disagree with its upstream manifests', or None.

    A stage that reads upstream manifests reads every row of every shard they list: its ``read`` must be
    exactly those rows, summed over its inputs (rows of units that failed within the budget are counted as
    quarantined ``failed_unit``, so they are not lost either).
    """
    read = int(manifest.accounting.get("read", -1)) if manifest.accounting else -1
    expected = sum(handed_rows(u) for u in upstreams)
    if read != expected:
        names = " + ".join(f"{u.stage}" for u in upstreams)
        several = "s" if len(upstreams) > 1 else ""
        return (
            f"{manifest.stage} read {read} rows but its upstream {names} manifest{several} hand{'' if several else 's'} "
            f"on {expected}: rows were lost or invented between the stages"
        )
    return None
