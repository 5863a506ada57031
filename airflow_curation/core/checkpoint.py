"""Per-unit checkpoint records: the single source of truth for "this unit of work is done".

A record is written last and atomically, after every output it names is complete. A unit is done
exactly when a record exists whose input checksum and config fingerprint match and whose outputs still hold
what the unit wrote (their recorded checksums; see :meth:`CheckpointRecord.files_intact`). Failed units leave a
``<unit>.failed.json`` beside it so sensors can count them against the failure budget.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_curation.core import storage, uris
from airflow_curation.core.fingerprint import checksum_url

log = logging.getLogger(__name__)


@dataclass
class CheckpointRecord:
    unit_id: str
    stage: str
    fingerprint: str
    input_checksum: str
    outputs: list[dict[str, Any]] = field(default_factory=list)  # ShardEntry dicts
    accounting: dict[str, Any] = field(default_factory=dict)
    attempt: int = 1
    started_at: float = 0.0
    finished_at: float = field(default_factory=time.time)
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    extra: dict[str, Any] = field(default_factory=dict)
    # what the unit wrote: {uri, bytes, checksum, stamp} (stamp: storage.stat's at write time, may be absent)
    files: list[dict[str, Any]] = field(default_factory=list)

    def files_intact(self, rehash: bool = False) -> bool:
        """Every file the unit wrote still holds what it held when the unit ended.

        Each file is stat'ed: a missing file or another size means no. A file that still carries the stamp
        recorded at write time (:func:`~airflow_curation.core.storage.stat`: inode and ctime, or an object
        store's ETag/version) was not written since, and is trusted without reading it; any other (another
        stamp, none recorded, or ``rehash``) is re-hashed and must match its recorded checksum. The checksum
        is the authority; the stamp only spares a rerun over an untouched lake from reading every output.
        """
        for f in self.files:
            uri = f.get("uri", "?")
            try:
                nbytes, stamp = storage.stat(uri)
                if nbytes != int(f["bytes"]):
                    log.warning(
                        "%s unit %s: %s has %d bytes, its checkpoint recorded %s: redoing the unit",
                        self.stage,
                        self.unit_id,
                        uri,
                        nbytes,
                        f["bytes"],
                    )
                    return False
                if not f.get("checksum") or (not rehash and stamp is not None and stamp == f.get("stamp")):
                    continue
                actual = checksum_url(uri)
            except (FileNotFoundError, KeyError, TypeError, ValueError):
                return False
            if actual != f["checksum"]:
                log.warning(
                    "%s unit %s: %s has checksum %s but its checkpoint recorded %s (corrupted or replaced since "
                    "it was written): redoing the unit",
                    self.stage,
                    self.unit_id,
                    uri,
                    actual,
                    f["checksum"],
                )
                return False
        return True

    @property
    def seconds(self) -> float:
        return max(0.0, self.finished_at - self.started_at)


class CheckpointStore:
    """The records of one stage configuration, ``<lake>/.../_checkpoints/<stage>/<fingerprint>/``.

    :param root: the lake root: the URIs a record holds are stored relative to it (``core/uris.py``), so that
        a copied lake's records vouch for the copy's files. None: stored as they are.
    """

    def __init__(self, directory: str, root: str | None = None) -> None:
        self.directory = directory
        self.root = root

    def _stored(self, data: dict[str, Any], fn) -> dict[str, Any]:
        if self.root is None:
            return data
        return {
            **data,
            "outputs": [uris.map_shard(o, fn) if isinstance(o, dict) else o for o in data.get("outputs") or []],
            "files": uris.map_files(data.get("files") or [], fn),
            "extra": uris.map_keys(data.get("extra") or {}, fn),
        }

    def _uri(self, unit_id: str, suffix: str = ".json") -> str:
        return storage.join(self.directory, f"{unit_id}{suffix}")

    def load(self, unit_id: str) -> CheckpointRecord | None:
        try:
            data = storage.read_json(self._uri(unit_id))
        except FileNotFoundError:
            return None
        except (ValueError, TypeError):
            return None  # a torn or foreign file is not a checkpoint; the unit is redone
        try:
            return CheckpointRecord(**self._stored(data, lambda u: uris.resolve(u, self.root)))
        except (TypeError, AttributeError):
            return None

    def is_done(
        self, unit_id: str, input_checksum: str, fingerprint: str, rehash: bool = False
    ) -> CheckpointRecord | None:
        """The unit's record when it matches input and config and its outputs still hold what it wrote, else
        None (a deleted, truncated or corrupted output makes the unit run again instead of breaking the next
        stage). ``rehash``: re-hash every output, even those whose stamp is unchanged."""
        rec = self.load(unit_id)
        if rec and rec.input_checksum == input_checksum and rec.fingerprint == fingerprint and rec.files_intact(rehash):
            return rec
        return None

    def commit(self, record: CheckpointRecord) -> str:
        uri = self._uri(record.unit_id)
        storage.write_json(uri, self._stored(asdict(record), lambda u: uris.relativize(u, self.root)))
        storage.remove(self._uri(record.unit_id, ".failed.json"))
        return uri

    def mark_failed(self, unit_id: str, error: str, attempt: int) -> None:
        storage.write_json(
            self._uri(unit_id, ".failed.json"),
            {"unit_id": unit_id, "error": error, "attempt": attempt, "at": time.time()},
        )

    def failure(self, unit_id: str) -> dict[str, Any] | None:
        try:
            return storage.read_json(self._uri(unit_id, ".failed.json"))
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def scan(self) -> tuple[set[str], set[str]]:
        """Unit ids with a record and unit ids with a failure marker, from one listing."""
        done, failed = set(), set()
        for url in storage.listdir(self.directory):
            name = url.rsplit("/", 1)[-1]
            if name.startswith("."):
                continue
            if name.endswith(".failed.json"):
                failed.add(name[: -len(".failed.json")])
            elif name.endswith(".json"):
                done.add(name[: -len(".json")])
        return done, failed - done
