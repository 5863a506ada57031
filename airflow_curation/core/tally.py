"""Tallies: what the tasks of a running stage have ended so far, so that a gate's look costs O(what changed).

A gate used to read a running stage's progress from its checkpoint folder: one listing of every record
and marker per look, and a fresh look (a poke in reschedule mode, a triggerer restart) read and verified
every record written so far: O(all units) per look, 5 s at 50,000 units half done. Now each task of a run
(``StageRunner``) also writes, as each of its units ends, a *tally*: one small JSON file per chunk of
:data:`CHUNK_UNITS` consecutive units of its own scope, ``_manifests/<run>/<stage>.tally/<first unit>.json``,
holding each ended unit's status, counts and accounting. A gate lists that folder (S/64 + N names for S
units over N tasks, not S) and reads only the files whose version changed since its last look
(:class:`TallyReader`); a fresh look reads them all, S/64 + N small files in one batched read.

The records stay the truth: a tally is written after the unit's record and only says what that record
said; the run's final manifest (written from the records) decides the gate. Entries name the config
fingerprint they were written under (another's are ignored); a failed entry counts only if written after
the run's plan (as failure markers do), and ``jobs reopen`` removes the failed entries of the units it
reopens. A run planned with tallies says so in its head (``Manifest.tallies``); a manifest without (one
written by other tools, or by this package before tallies) is looked at record by record.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from airflow_curation.core import storage

log = logging.getLogger(__name__)

CHUNK_UNITS = 64  # units per tally file (what a task rewrites when one of them ends)
# What a listing says that changes when a file is rewritten (local, S3, GCS): a look re-reads only those.
_STAMP = ("size", "mtime", "LastModified", "updated", "ETag", "etag", "generation", "ino")


def folder(manifest_uri: str) -> str:
    """Where a run's tallies go: ``<stage>.tally/`` beside its manifest."""
    base, name = manifest_uri.rsplit("/", 1) if "/" in manifest_uri else ("", manifest_uri)
    return storage.join(base, name.removesuffix(".json") + ".tally") if base else name + ".tally"


def entry(status: str, record: dict[str, Any] | None = None, error: str | None = None) -> dict[str, Any]:
    """One unit's tally entry: ``record`` is its checkpoint record as a dict (done, skipped)."""
    out: dict[str, Any] = {"status": status, "at": time.time()}
    if record is not None:
        outputs = record.get("outputs") or []
        out |= {
            "rows": sum(int(o.get("rows", 0)) for o in outputs),
            "bytes": sum(int(o.get("bytes", 0)) for o in outputs),
            "shards": len(outputs),
            "accounting": record.get("accounting") or {},
        }
    if error is not None:
        out["error"] = error
    return out


class TallyWriter:
    """One task's tallies: its scope (unit ids in plan order) cut in chunks of :data:`CHUNK_UNITS`; each
    :meth:`ended` rewrites the chunks it touches. A failed write is logged, never raised: a tally is progress
    for the gate, the record is what counts."""

    def __init__(self, manifest_uri: str, fingerprint: str, unit_ids: list[str]) -> None:
        self.folder = folder(manifest_uri)
        self.fingerprint = fingerprint
        self._chunk = {uid: i // CHUNK_UNITS for i, uid in enumerate(unit_ids)}
        self._names = [unit_ids[i] for i in range(0, len(unit_ids), CHUNK_UNITS)]
        self._entries: list[dict[str, dict[str, Any]]] = [{} for _ in self._names]
        self._warned = False

    def ended(self, entries: dict[str, dict[str, Any]]) -> None:
        touched = set()
        for uid, e in entries.items():
            chunk = self._chunk.get(uid)
            if chunk is not None:
                self._entries[chunk][uid] = e
                touched.add(chunk)
        for chunk in sorted(touched):
            uri = storage.join(self.folder, f"{self._names[chunk]}.json")
            try:
                doc = {"fingerprint": self.fingerprint, "units": self._entries[chunk]}
                # compact: json's C encoder (indent drops to its Python one, ~2 ms a write of a 64-unit chunk,
                # rewritten as each unit ends); only the gate reads these files
                storage.write_bytes(uri, json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str).encode())
            except Exception as e:  # noqa: BLE001 - the gate's progress only; the record is written
                if not self._warned:
                    log.warning("cannot write the tally %s (the gate's progress lags until the end): %s", uri, e)
                    self._warned = True


class TallyReader:
    """A run's tallies as a gate reads them: each look lists the folder and reads the files that changed.

    :meth:`look` returns the entries that are new or changed since the last look, unit id -> entry (the
    newest entry of a unit named in two files, e.g. by two attempts that cut the run in other groups); a
    unit taken out of the file its entry came from is returned as ``pending``."""

    def __init__(self, manifest_uri: str, fingerprint: str) -> None:
        self.folder = folder(manifest_uri)
        self.fingerprint = fingerprint
        self._versions: dict[str, tuple] = {}
        self._units: dict[str, set[str]] = {}  # file -> the units it named when last read
        self._source: dict[str, str] = {}  # unit -> the file its entry came from
        self.entries: dict[str, dict[str, Any]] = {}

    def look(self) -> dict[str, dict[str, Any]]:
        fs, path = storage.filesystem(self.folder)
        try:
            listing = fs.ls(path, detail=True)
        except FileNotFoundError:
            return {}
        changed = []
        for info in listing:
            name = info["name"]
            if info.get("type") != "file" or not name.endswith(".json") or name.rsplit("/", 1)[-1].startswith("."):
                continue  # a writer's temp file
            version = tuple(info.get(k) for k in _STAMP)
            if self._versions.get(name) != version:
                changed.append((name, version))
        if not changed:
            return {}
        blobs = fs.cat([name for name, _ in changed], on_error="return")
        new: dict[str, dict[str, Any]] = {}
        for name, version in changed:
            blob = blobs.get(name) if isinstance(blobs, dict) else None
            if blob is None or isinstance(blob, Exception):
                continue  # replaced or removed between the listing and the read: the next look has it
            try:
                doc = json.loads(blob)
                units = doc["units"] if doc.get("fingerprint") == self.fingerprint else {}
            except (ValueError, TypeError, KeyError, AttributeError):
                continue  # torn or foreign: not a tally
            self._versions[name] = version
            for uid in self._units.get(name, set()) - set(units):
                if self._source.get(uid) == name:  # taken out of its file (``jobs reopen``): not ended any more
                    del self.entries[uid], self._source[uid]
                    new[uid] = {"status": "pending", "at": 0.0}
            self._units[name] = set(units)
            for uid, e in units.items():
                old = self.entries.get(uid)
                if isinstance(e, dict) and (old is None or float(e.get("at", 0)) >= float(old.get("at", 0))):
                    self._source[uid] = name
                    if old != e:
                        self.entries[uid] = new[uid] = e
        return new


def drop_failed(manifest_uri: str, unit_ids: set[str]) -> int:
    """Remove the failed entries of ``unit_ids`` from a run's tallies (``jobs reopen``: they run again and a
    gate must wait for them, not fail on the old attempt); returns how many it removed."""
    removed = 0
    for uri in storage.listdir(folder(manifest_uri)):
        if not uri.endswith(".json") or uri.rsplit("/", 1)[-1].startswith("."):
            continue
        try:
            doc = storage.read_json(uri)
            units = doc["units"]
        except (FileNotFoundError, ValueError, TypeError, KeyError):
            continue
        drop = [uid for uid, e in units.items() if uid in unit_ids and e.get("status") == "failed"]
        if drop:
            for uid in drop:
                del units[uid]
            storage.write_json(uri, doc)
            removed += len(drop)
    return removed
