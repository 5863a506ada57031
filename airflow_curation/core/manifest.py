"""Versioned run manifests: the one document that XCom points to instead of carrying data.

A manifest names a stage run's units of work (what checkpoints are keyed by) and, once they are done,
the shards they produced. It is written when the run is planned (so that sensors can gate on it at
once) and again when the run ends.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_curation.core import storage, uris

FORMAT = "airflow-curation/manifest"
FORMAT_VERSION = 1

UNIT_STATUSES = ("pending", "done", "skipped", "failed")
# "superseded": a later run replaced this run's outputs (``ingest --replace``); ``superseded_by`` names it.
RUN_STATUSES = ("planned", "complete", "failed", "superseded")
# Where a manifest lies below its dataset base: ``_manifests/<run_id>/<stage>.json``.
_DEPTH = 2


class ManifestError(ValueError):
    """A manifest is missing, of an unknown version, or malformed."""


@dataclass
class ShardEntry:
    shard_id: str
    uri: str
    rows: int
    bytes: int
    checksum: str
    unit_id: str = ""
    attrs: dict[str, str] = field(default_factory=dict)  # stage -> URI of that stage's additive columns
    attrs_checksums: dict[str, str] = field(default_factory=dict)  # stage -> checksum of that attrs file

    def with_attrs(self, stage: str, uri: str, checksum: str) -> "ShardEntry":
        """This shard with one more stage's additive columns (what an attrs stage hands on)."""
        return ShardEntry(
            **{
                **asdict(self),
                "attrs": {**self.attrs, stage: uri},
                "attrs_checksums": {**self.attrs_checksums, stage: checksum},
            }
        )


@dataclass
class UnitEntry:
    unit_id: str
    inputs: list[str]
    input_checksum: str
    status: str = "pending"
    error: str | None = None
    rows: int | None = None  # rows the unit must read, from the upstream manifest (None: unknown, e.g. ingest)


@dataclass
class Manifest:
    dataset: str
    stage: str
    run_id: str
    fingerprint: str
    lake: dict[str, Any]
    units: list[UnitEntry] = field(default_factory=list)
    shards: list[ShardEntry] = field(default_factory=list)
    status: str = "planned"
    config: dict[str, Any] = field(default_factory=dict)
    accounting: dict[str, Any] = field(default_factory=dict)
    created_at: float = field(default_factory=time.time)
    format: str = FORMAT
    format_version: int = FORMAT_VERSION
    supersedes: list[str] = field(default_factory=list)  # manifest URIs this run replaced (ingest --replace)
    superseded_by: str | None = None  # the run id that replaced this run's outputs

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.shards)

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.shards)

    @property
    def status_text(self) -> str:
        """The status for a message: a superseded run names the run that replaced it."""
        if self.status == "superseded":
            return f"superseded by run {self.superseded_by} (its shards were replaced: ingest --replace)"
        return repr(self.status)

    def summary(self, uri: str) -> dict[str, Any]:
        """What goes into XCom: a pointer and counts, never the shard list."""
        return {"manifest_uri": uri, "shards": len(self.shards), "rows": self.rows, "bytes": self.bytes}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def write(self, uri: str) -> str:
        """Write the manifest with its URIs in stored form: relative to the lake root (``core/uris.py``)."""
        d = _uris(self.to_dict(), lambda u: uris.relativize(u, self.lake["root"]))
        for key, unset in (("supersedes", []), ("superseded_by", None)):
            if d[key] == unset:  # absent unless used: readers of earlier versions still read the rest
                del d[key]
        _validate(d, uri)
        storage.write_json(uri, d)
        return uri

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "<dict>", root: str | None = None) -> "Manifest":
        """:param root: the lake root the manifest's relative URIs resolve against (default: its recorded one)."""
        _validate(d, where)
        d = dict(d)
        root = root or d["lake"].get("root")
        if root:
            d = _uris(d, lambda u: uris.resolve(u, root))
            d["lake"] = {**d["lake"], "root": root}
        d["units"] = [UnitEntry(**u) for u in d["units"]]
        d["shards"] = [ShardEntry(**s) for s in d["shards"]]
        return cls(**d)

    @classmethod
    def read(cls, uri: str) -> "Manifest":
        """The manifest at ``uri``, its URIs resolved against the lake it lies in (a copied lake reads its own
        files), or against its recorded root where it lies outside the layout."""
        try:
            data = storage.read_json(uri)
        except FileNotFoundError as e:
            raise ManifestError(f"manifest not found: {uri}") from e
        except ValueError as e:
            raise ManifestError(f"manifest {uri} is not valid JSON: {e}") from e
        lake = data.get("lake") if isinstance(data, dict) else None
        root = uris.root_of(uri, lake, _DEPTH) if isinstance(lake, dict) else None
        return cls.from_dict(data, uri, root)


def _uris(d: dict[str, Any], fn) -> dict[str, Any]:
    """A manifest dict with ``fn`` applied to every URI it holds (shards, attrs, unit inputs, the config's URI
    keys: the upstream manifest, the report, tokenize's packed files...); a copy, the input left as it is."""
    d = dict(d)
    if isinstance(d.get("shards"), list):
        d["shards"] = [uris.map_shard(s, fn) if isinstance(s, dict) else s for s in d["shards"]]
    if isinstance(d.get("units"), list):
        d["units"] = [
            {**u, "inputs": [fn(i) if isinstance(i, str) else i for i in u["inputs"]]}
            if isinstance(u, dict) and isinstance(u.get("inputs"), list)
            else u
            for u in d["units"]
        ]
    if isinstance(d.get("config"), dict):
        d["config"] = uris.map_keys(d["config"], fn)
    if isinstance(d.get("supersedes"), list):
        d["supersedes"] = [fn(u) if isinstance(u, str) else u for u in d["supersedes"]]
    return d


_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "format": str,
    "format_version": int,
    "dataset": str,
    "stage": str,
    "run_id": str,
    "fingerprint": str,
    "lake": dict,
    "units": list,
    "shards": list,
    "status": str,
}
_UNIT_FIELDS = {"unit_id": str, "inputs": list, "input_checksum": str, "status": str}
_SHARD_FIELDS = {"shard_id": str, "uri": str, "rows": int, "bytes": int, "checksum": str}


def _validate(d: Any, where: str) -> None:
    def fail(msg: str) -> None:
        raise ManifestError(f"invalid manifest {where}: {msg}")

    if not isinstance(d, dict):
        fail("not a JSON object")
    if d.get("format") != FORMAT:
        fail(f"format is {d.get('format')!r}, expected {FORMAT!r}")
    if d.get("format_version") != FORMAT_VERSION:
        fail(f"format_version {d.get('format_version')!r} is not supported (this reader knows {FORMAT_VERSION})")
    for key, typ in _REQUIRED.items():
        if not isinstance(d.get(key), typ):
            fail(f"field {key!r} missing or not {getattr(typ, '__name__', typ)}")
    if d["status"] not in RUN_STATUSES:
        fail(f"status {d['status']!r} not in {RUN_STATUSES}")
    seen: set[str] = set()
    for i, u in enumerate(d["units"]):
        for key, typ in _UNIT_FIELDS.items():
            if not isinstance(u, dict) or not isinstance(u.get(key), typ):
                fail(f"units[{i}].{key} missing or not {typ.__name__}")
        if u["status"] not in UNIT_STATUSES:
            fail(f"units[{i}].status {u['status']!r} not in {UNIT_STATUSES}")
        if u["unit_id"] in seen:
            fail(f"duplicate unit id {u['unit_id']!r}")
        seen.add(u["unit_id"])
    shard_ids: set[str] = set()
    for i, s in enumerate(d["shards"]):
        for key, typ in _SHARD_FIELDS.items():
            if not isinstance(s, dict) or not isinstance(s.get(key), typ) or isinstance(s.get(key), bool):
                fail(f"shards[{i}].{key} missing or not {typ.__name__}")
        if s["rows"] < 0 or s["bytes"] < 0:
            fail(f"shards[{i}] has negative counts")
        if s["shard_id"] in shard_ids:
            fail(f"duplicate shard id {s['shard_id']!r}")
        shard_ids.add(s["shard_id"])


def latest_manifest(lake, stages: tuple[str, ...] | list[str]) -> str | None:
    """URI of the newest complete manifest (by ``created_at``) of any of ``stages`` in ``lake``, or None.

    What a command-line run reads when no ``--input-manifest`` is given: the last stage that finished.
    """
    found = []
    for stage in stages:
        for uri in storage.glob(lake.path("_manifests", "*", f"{stage}.json")):
            try:
                m = Manifest.read(uri)
            except ManifestError:
                continue  # a foreign or torn file is not a candidate
            if m.status == "complete":
                found.append((m.created_at, uri))
    return max(found)[1] if found else None
