"""Versioned run manifests: the one document that XCom points to instead of carrying data.

A manifest names a stage run's units of work (what checkpoints are keyed by) and, once they are done,
the shards they produced. It is written when the run is planned (so that sensors can gate on it at
once) and again when the run ends.

Format 2 splits it so that no reader pays for all of it when it needs a part: ``<stage>.json`` is a small
*head* (run, config, status, counts, row and byte totals, unit statuses) and the unit and shard lists go
to one *pages* file each, ``<stage>.index/<generation>.{units,shards}.pages``: JSON lines, one entry a
line, in pages of :data:`PAGE_ENTRIES` lines whose byte length and xxh64 the head records. Group ``i`` of
``N`` (one task of an array) is a contiguous block of positions (:func:`group_range`), so its task reads the
head and the few consecutive pages that hold its block, in one ranged read (:meth:`ManifestHead.shards` with
its group): what it reads grows with its own units, not with the run's. A gate reads the head (and the unit
pages while the run is going); :meth:`Manifest.read` reads it all, as before. Pages are never rewritten:
each write makes a new generation and the head names it, so a reader never mixes two writes; the
generation before is kept (a reader may still be on it), older ones removed.
Format 1 (one JSON document with both lists) is still read.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import xxhash

from airflow_curation.core import storage, uris
from airflow_curation.core.integrity import IntegrityError

FORMAT = "airflow-curation/manifest"
# 1: both lists inline (before the split); 2: paged lists; 3: shard entries may carry ``attrs_columns`` and
# ``files`` (a reader of 2 would refuse those fields with a TypeError: the version makes it a clear error)
FORMAT_VERSION = 3
READ_VERSIONS = (1, 2, 3)

UNIT_STATUSES = ("pending", "done", "skipped", "failed")
# "superseded": a later run replaced this run's outputs (``ingest --replace``); ``superseded_by`` names it.
RUN_STATUSES = ("planned", "complete", "failed", "superseded")
# Where a manifest lies below its dataset base: ``_manifests/<run_id>/<stage>.json``.
_DEPTH = 2

# Entries per page: a task of an array over N groups reads the bytes of its S/N entries plus at most two
# partial pages at the ends of its block (hashes them whole, decodes only its own lines).
PAGE_ENTRIES = 64
KINDS = ("units", "shards")
FAILED_UNITS_IN_HEAD = 20  # failed unit ids a gate can name without reading the unit pages


def group_range(total: int, index: int, count: int) -> range:
    """Positions of group ``index`` of ``count`` over ``total`` entries: one contiguous block, the blocks in
    order and within one entry of each other in size. What one task of an array over ``count`` groups runs
    (``Stage.plan_group``), and what it reads of a manifest: the pages of its block only."""
    if not 0 <= index < count:
        raise ValueError(f"group {index}/{count} out of range")
    return range(index * total // count, (index + 1) * total // count)


def group_of(position: int, count: int, total: int) -> int:
    """The group (of ``count`` over ``total`` entries) whose block holds ``position``: the inverse of
    :func:`group_range`."""
    if not 0 <= position < total:
        raise ValueError(f"position {position} out of range of {total}")
    return ((position + 1) * count - 1) // total


class ManifestError(ValueError):
    """A manifest is missing, of an unknown version, or malformed."""


class ManifestPageError(ManifestError, IntegrityError):
    """A page of a manifest differs from what its head recorded (corrupted, truncated or replaced)."""


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
    # stage -> the columns of that attrs file, as its writer knew them: a downstream plan learns which attrs
    # hold keep, is_duplicate, clean_text... without opening their footers (a stage absent, e.g. in a
    # manifest written before they were recorded: its footer is read, :func:`~airflow_curation.core.shards.attrs_columns`).
    attrs_columns: dict[str, list[str]] = field(default_factory=dict)
    # Other files the unit that handed this shard on wrote for it, by role, each {uri, checksum, bytes}
    # (tokenize's ``packed`` sequences): in the shard pages, so that a task reads its block's only.
    files: dict[str, dict[str, Any]] = field(default_factory=dict)

    def with_attrs(
        self,
        stage: str,
        uri: str,
        checksum: str,
        columns: list[str] | None = None,
        files: dict[str, dict[str, Any]] | None = None,
    ) -> "ShardEntry":
        """This shard with one more stage's additive columns (what an attrs stage hands on).

        :param columns: the columns of that stage's attrs file (None: not known, a reader opens its footer).
        :param files: the other files that stage's unit wrote for the shard (the entry's ``files`` become these).
        """
        known = {k: v for k, v in self.attrs_columns.items() if k != stage}
        return ShardEntry(
            **{
                **asdict(self),
                "attrs": {**self.attrs, stage: uri},
                "attrs_checksums": {**self.attrs_checksums, stage: checksum},
                "attrs_columns": {**known, **({stage: list(columns)} if columns is not None else {})},
                "files": dict(files or {}),
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
    tallies: bool = False  # its tasks write tallies as units end (core/tally.py): a gate reads those
    # A failed run's relaunch: {"pending": True, ...} while its follower may still relaunch it (a reader
    # waits for the reopen), {"pending": False, "why": ...} once it decided not to (:attr:`ManifestHead.relaunch_pending`).
    relaunch: dict[str, Any] | None = None

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.shards)

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.shards)

    @property
    def status_text(self) -> str:
        """The status for a message: a superseded run names the run that replaced it."""
        return _status_text(self.status, self.superseded_by)

    def summary(self, uri: str) -> dict[str, Any]:
        """What goes into XCom: a pointer and counts, never the shard list."""
        return {"manifest_uri": uri, "shards": len(self.shards), "rows": self.rows, "bytes": self.bytes}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def write(self, uri: str, page_entries: int | None = None) -> str:
        """The pages of a new generation, then the head that names them (atomically: the commit), every URI
        in stored form: relative to the lake root (``core/uris.py``), so a copied lake reads its own files.
        :param page_entries: entries a page (fewer for large entries: a reader of a block reads whole pages);
            default :data:`PAGE_ENTRIES` (read at the call)."""
        page_entries = page_entries or PAGE_ENTRIES
        d = _uris(self.to_dict(), lambda u: uris.relativize(u, self.lake["root"]))  # asdict deep-copies: once
        d["format_version"] = FORMAT_VERSION
        for key, unset in (("supersedes", []), ("superseded_by", None), ("tallies", False), ("relaunch", None)):
            if d[key] == unset:  # absent unless used
                del d[key]
        _validate(d, uri)
        lists = {kind: d.pop(kind) for kind in KINDS}
        lists["shards"] = [_compact(s) for s in lists["shards"]]
        generation = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"
        d["index"] = {"page_entries": page_entries}
        for kind, entries in lists.items():
            rel = f"{_index_dir(uri)}/{generation}.{kind}.pages"
            lengths, checksums, data = _pages(entries, page_entries)
            storage.write_bytes(_sibling(uri, rel), data)
            d["index"][kind] = {"count": len(entries), "file": rel, "lengths": lengths, "checksums": checksums}
        d["totals"] = _totals(lists["units"], lists["shards"])
        storage.write_json(uri, d)
        _prune(uri, keep=2)
        return uri

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "<dict>", root: str | None = None) -> "Manifest":
        """A manifest from its format-1 form (both lists inline), e.g. ``to_dict()``'s. :param root: the lake
        root its relative URIs resolve against (default: its recorded one)."""
        _validate(d, where)
        return cls._build(_resolved(d, root))

    @classmethod
    def _build(cls, d: dict[str, Any]) -> "Manifest":
        d = {k: v for k, v in d.items() if k not in ("index", "totals")}
        d["units"] = [UnitEntry(**u) for u in d["units"]]
        d["shards"] = [ShardEntry(**s) for s in d["shards"]]
        return cls(**d)

    @classmethod
    def read(cls, uri: str) -> "Manifest":
        """The whole manifest, both lists (format 1 or 2)."""
        head = ManifestHead.read(uri)
        if head.inline is not None:
            return cls._build(head.inline)
        d = {**head.data, "units": head.unit_dicts(), "shards": head.shard_dicts()}
        _check_unique(d, uri)
        return cls._build(d)


class ManifestHead:
    """A manifest's head: everything but the unit and shard lists, which it reads page by page on demand.

    What a gate and a task of an array read (:meth:`Manifest.read` for everything). A format-1 manifest
    has no pages: its head holds the whole document, read once. URIs are resolved against the lake the
    manifest lies in (a copied lake reads its own files), or its recorded root where it lies elsewhere.
    """

    def __init__(self, uri: str, data: dict[str, Any], inline: dict[str, Any] | None = None) -> None:
        self.uri = uri
        self.data = data
        self.inline = inline  # format 1: the whole document

    @classmethod
    def read(cls, uri: str) -> "ManifestHead":
        try:
            data = storage.read_json(uri)
        except FileNotFoundError as e:
            raise ManifestError(f"manifest not found: {uri}") from e
        except ValueError as e:
            raise ManifestError(f"manifest {uri} is not valid JSON: {e}") from e
        lake = data.get("lake") if isinstance(data, dict) else None
        root = uris.root_of(uri, lake, _DEPTH) if isinstance(lake, dict) else None
        if isinstance(data, dict) and data.get("format_version") == 1:
            _validate(data, uri)
            data = _resolved(data, root)
            head = {k: v for k, v in data.items() if k not in KINDS}
            head["index"] = {kind: {"count": len(data[kind])} for kind in KINDS}
            head["totals"] = _totals(data["units"], data["shards"])
            return cls(uri, head, inline=data)
        _validate_head(data, uri)
        return cls(uri, _resolved(data, root))

    @property
    def root(self) -> str:
        """The lake root this manifest's URIs resolve against."""
        return self.data["lake"]["root"]

    @property
    def status_text(self) -> str:
        return _status_text(self.data["status"], self.data.get("superseded_by"))

    def __getattr__(self, name: str) -> Any:
        if name in _HEAD_FIELDS:
            return self.data[name]
        if name in _OPTIONAL_HEAD_FIELDS:
            return self.data.get(name, _OPTIONAL_HEAD_FIELDS[name])
        raise AttributeError(name)

    @property
    def relaunch_pending(self) -> bool:
        """The run failed and its follower may still relaunch it (reopen it, ``planned``): a downstream reader
        waits for that rather than giving up (``stages/attrs.py``)."""
        return self.data["status"] == "failed" and bool((self.data.get("relaunch") or {}).get("pending"))

    @property
    def unit_count(self) -> int:
        return int(self.data["index"]["units"]["count"])

    @property
    def shard_count(self) -> int:
        return int(self.data["index"]["shards"]["count"])

    @property
    def rows(self) -> int:
        return int(self.data["totals"]["rows"])

    @property
    def bytes(self) -> int:
        return int(self.data["totals"]["bytes"])

    @property
    def unit_statuses(self) -> dict[str, int]:
        """Units by status, as the run last wrote them."""
        return dict(self.data["totals"]["unit_statuses"])

    @property
    def failed_units(self) -> list[str]:
        """The first failed units' ids (at most :data:`FAILED_UNITS_IN_HEAD`)."""
        return list(self.data["totals"]["failed_units"])

    def summary(self) -> dict[str, Any]:
        return {"manifest_uri": self.uri, "shards": self.shard_count, "rows": self.rows, "bytes": self.bytes}

    def units(self, index: int = 0, count: int = 1) -> list[UnitEntry]:
        """Units of group ``index`` of ``count`` (:func:`group_range`; all by default), reading only their pages."""
        return [UnitEntry(**u) for u in self.unit_dicts(index, count)]

    def shards(self, index: int = 0, count: int = 1) -> list[ShardEntry]:
        """Shards of group ``index`` of ``count`` (all by default), reading only their pages."""
        return [ShardEntry(**s) for s in self.shard_dicts(index, count)]

    def unit_dicts(self, index: int = 0, count: int = 1) -> list[dict[str, Any]]:
        return self._entries("units", index, count)

    def shard_dicts(self, index: int = 0, count: int = 1) -> list[dict[str, Any]]:
        return self._entries("shards", index, count)

    def unit_dicts_at(self, positions: range) -> list[dict[str, Any]]:
        """The units at ``positions`` (a step-1 range, clipped to the list), reading only their pages: what a
        task checks of another run's manifest whose groups do not line up with its own."""
        return self._entries_at("units", positions)

    def shard_dicts_at(self, positions: range) -> list[dict[str, Any]]:
        """The shards at ``positions`` (a step-1 range, clipped to the list), reading only their pages: a task's
        block when its groups span several manifests (mix's inputs)."""
        return self._entries_at("shards", positions)

    def shards_at(self, positions: range) -> list[ShardEntry]:
        """:meth:`shard_dicts_at` as entries: what a task whose units name their own block of shards (validate's
        parts) reads."""
        return [ShardEntry(**s) for s in self.shard_dicts_at(positions)]

    def _entries(self, kind: str, index: int, count: int) -> list[dict[str, Any]]:
        total = len(self.inline[kind]) if self.inline is not None else int(self.data["index"][kind]["count"])
        return self._entries_at(kind, group_range(total, index, count))

    def _entries_at(self, kind: str, positions: range) -> list[dict[str, Any]]:
        total = len(self.inline[kind]) if self.inline is not None else int(self.data["index"][kind]["count"])
        positions = range(max(0, positions.start), max(0, min(positions.stop, total)))
        if self.inline is not None:
            return self.inline[kind][positions.start : positions.stop]
        if not positions:
            return []
        meta = self.data["index"][kind]
        per_page = int(self.data["index"]["page_entries"])
        first, last = positions.start // per_page, (positions.stop - 1) // per_page
        start = sum(meta["lengths"][:first])
        wanted = range(first, last + 1)
        where = _sibling(self.uri, meta["file"])
        ranges, at = [], start
        for p in wanted:
            ranges.append((at, at + meta["lengths"][p]))
            at += meta["lengths"][p]
        pages = _read_ranges(where, ranges, self.uri)  # consecutive: one read
        for p, data in zip(wanted, pages):
            self._verify(kind, where, p, data)
        whole = b"".join(pages)
        skip, keep = positions.start - first * per_page, len(positions)
        if skip or keep != whole.count(b"\n"):  # a block inside its pages: only its own lines are decoded
            whole = b"\n".join(whole.split(b"\n", skip + keep)[skip : skip + keep]) + b"\n"
        try:  # one decode for the block, as one JSON array
            decoded = json.loads(b"[" + whole[:-1].replace(b"\n", b",") + b"]")
        except ValueError as e:
            raise ManifestPageError(
                f"{kind} [{positions.start}:{positions.stop}] in {where}: not valid JSON: {e}"
            ) from e
        if len(decoded) != keep:
            raise ManifestPageError(f"{where}: {len(decoded)} {kind} where the head of {self.uri} lists {keep}")
        check = _check_unit if kind == "units" else _check_shard
        resolve = (lambda u: uris.resolve(u, self.root)) if self.root else (lambda u: u)
        for i, entry in enumerate(decoded):
            check(entry, f"{kind}[{positions.start + i}]", lambda msg: _fail(where, msg))
        return _uris({kind: decoded}, resolve)[kind]

    def _verify(self, kind: str, where: str, page: int, data: bytes | memoryview) -> None:
        """A page's bytes against the checksum its head recorded."""
        recorded = self.data["index"][kind]["checksums"][page]
        actual = f"xxh64:{xxhash.xxh64(data).hexdigest()}"
        if actual != recorded:
            raise ManifestPageError(
                f"page {page} of {where} (the {kind} of manifest {self.uri}) has checksum {actual} but the head "
                f"recorded {recorded}: corrupted or replaced after it was written; rerun the stage that wrote "
                f"the manifest"
            )


def _status_text(status: str, superseded_by: str | None) -> str:
    """A run's status for a message: a superseded run names the run that replaced it."""
    if status == "superseded":
        return f"superseded by run {superseded_by} (its shards were replaced: ingest --replace)"
    return repr(status)


def _resolved(d: dict[str, Any], root: str | None) -> dict[str, Any]:
    """A manifest (or head) dict with its URIs resolved against ``root`` (default: its recorded root), which
    becomes its lake's root; stored absolute URIs (earlier manifests, inputs outside the lake) stay as they are."""
    root = root or (d.get("lake") or {}).get("root")
    if not root:
        return d
    d = _uris(d, lambda u: uris.resolve(u, root))
    d["lake"] = {**d["lake"], "root": root}
    return d


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


_HEAD_FIELDS = ("dataset", "stage", "run_id", "fingerprint", "lake", "status", "config", "accounting", "created_at")
_OPTIONAL_HEAD_FIELDS = {"supersedes": [], "superseded_by": None, "tallies": False, "relaunch": None}


def _totals(units: list[dict[str, Any]], shards: list[dict[str, Any]]) -> dict[str, Any]:
    """What a head says of its lists: enough for a gate and the books check without reading them."""
    return {
        "rows": sum(s["rows"] for s in shards),
        "bytes": sum(s["bytes"] for s in shards),
        "unit_statuses": dict(Counter(u["status"] for u in units)),
        "failed_units": [u["unit_id"] for u in units if u["status"] == "failed"][:FAILED_UNITS_IN_HEAD],
    }


def _index_dir(uri: str) -> str:
    """Where a manifest's pages go, relative to its folder: ``<stage>.index``."""
    return uri.rsplit("/", 1)[-1].removesuffix(".json") + ".index"


def _sibling(uri: str, rel: str) -> str:
    return storage.join(uri.rsplit("/", 1)[0], rel) if "/" in uri else rel


def _pages(entries: list[dict[str, Any]], per_page: int) -> tuple[list[int], list[str], bytes]:
    # Keys sorted: a page's bytes (and the checksum that names it: export's scatter key, mix's plan file) are
    # the same whether an entry came from a fresh unit or a skipped unit's record, whose dicts load in
    # another key order.
    encode = json.JSONEncoder(separators=(",", ":"), sort_keys=True, default=str).encode
    lengths, checksums, chunks = [], [], []
    for start in range(0, len(entries), per_page):
        # One entry a line (JSON escapes every newline inside): a reader decodes only the lines it needs.
        data = "".join(encode(e) + "\n" for e in entries[start : start + per_page]).encode()
        lengths.append(len(data))
        checksums.append(f"xxh64:{xxhash.xxh64(data).hexdigest()}")
        chunks.append(data)
    return lengths, checksums, b"".join(chunks)


def _read_ranges(url: str, ranges: list[tuple[int, int]], manifest_uri: str) -> list[memoryview]:
    """The byte ranges of a pages file; adjacent ranges are read as one."""
    if not ranges:
        return []
    merged: list[list[int]] = []
    for start, end in ranges:
        if merged and merged[-1][1] == start:
            merged[-1][1] = end
        else:
            merged.append([start, end])
    fs, path = storage.filesystem(url)
    try:
        blobs = fs.cat_ranges([path] * len(merged), [m[0] for m in merged], [m[1] for m in merged])
    except FileNotFoundError as e:
        raise ManifestError(f"manifest {manifest_uri}: its pages file {url} is missing") from e
    for blob in blobs:
        if isinstance(blob, FileNotFoundError):
            raise ManifestError(f"manifest {manifest_uri}: its pages file {url} is missing") from blob
        if isinstance(blob, Exception):
            raise ManifestError(f"manifest {manifest_uri}: cannot read its pages file {url}: {blob}") from blob
    for (start, end), blob in zip(merged, blobs):
        if len(blob) != end - start:
            raise ManifestPageError(
                f"pages file {url} of manifest {manifest_uri} is truncated: {len(blob)} bytes at {start}, "
                f"expected {end - start}"
            )
    out, m = [], 0
    views = [memoryview(b) for b in blobs]
    for start, end in ranges:  # both in file order
        while merged[m][1] < end:
            m += 1
        out.append(views[m][start - merged[m][0] : end - merged[m][0]])  # no copy
    return out


def _prune(uri: str, keep: int) -> None:
    """Remove all but the newest ``keep`` generations of ``uri``'s pages (a reader of the head just
    replaced still finds the generation it names)."""
    folder = _sibling(uri, _index_dir(uri))
    files = [f for f in storage.listdir(folder) if not f.rsplit("/", 1)[-1].startswith(".")]  # not a temp file
    generations = sorted({f.rsplit("/", 1)[-1].split(".", 1)[0] for f in files})
    old = set(generations[:-keep])
    for f in files:
        if f.rsplit("/", 1)[-1].split(".", 1)[0] in old:
            storage.remove(f)


_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "format": str,
    "format_version": int,
    "dataset": str,
    "stage": str,
    "run_id": str,
    "fingerprint": str,
    "lake": dict,
    "status": str,
}
_UNIT_FIELDS = {"unit_id": str, "inputs": list, "input_checksum": str, "status": str}
_SHARD_FIELDS = {"shard_id": str, "uri": str, "rows": int, "bytes": int, "checksum": str}


def _fail(where: str, msg: str) -> None:
    raise ManifestError(f"invalid manifest {where}: {msg}")


def _validate_common(d: Any, where: str) -> None:
    def fail(msg: str) -> None:
        _fail(where, msg)

    if not isinstance(d, dict):
        fail("not a JSON object")
    if d.get("format") != FORMAT:
        fail(f"format is {d.get('format')!r}, expected {FORMAT!r}")
    if d.get("format_version") not in READ_VERSIONS:
        v = d.get("format_version")
        newer = isinstance(v, int) and v > FORMAT_VERSION
        fail(
            f"format_version {v!r} is not supported (this reader knows {READ_VERSIONS})"
            + ("; it was written by a newer airflow-curation: upgrade this one" if newer else "")
        )
    for key, typ in _REQUIRED.items():
        if not isinstance(d.get(key), typ):
            fail(f"field {key!r} missing or not {getattr(typ, '__name__', typ)}")
    if d["status"] not in RUN_STATUSES:
        fail(f"status {d['status']!r} not in {RUN_STATUSES}")


def _validate_head(d: Any, where: str) -> None:
    """A format-2 head: the common fields, and an index of pages that adds up."""
    _validate_common(d, where)
    index, totals = d.get("index"), d.get("totals")
    if not isinstance(index, dict) or not isinstance(totals, dict):
        _fail(where, "field 'index' or 'totals' missing or not dict")
    per_page = index.get("page_entries")
    if not isinstance(per_page, int) or per_page < 1:
        _fail(where, "index.page_entries missing or not a positive int")
    for kind in KINDS:
        meta = index.get(kind)
        ok = isinstance(meta, dict) and isinstance(meta.get("count"), int) and isinstance(meta.get("file"), str)
        ok = ok and isinstance(meta.get("lengths"), list) and isinstance(meta.get("checksums"), list)
        if ok:
            pages = -(-meta["count"] // per_page)
            ok = len(meta["lengths"]) == len(meta["checksums"]) == pages
            ok = ok and not meta["file"].startswith("/") and ".." not in meta["file"].split("/")
        if not ok:
            _fail(where, f"index.{kind} missing, malformed or outside the manifest's folder")
    for key, typ in (("rows", int), ("bytes", int), ("unit_statuses", dict), ("failed_units", list)):
        if not isinstance(totals.get(key), typ):
            _fail(where, f"totals.{key} missing or not {typ.__name__}")


def _check_unit(u: Any, at: str, fail) -> None:
    for key, typ in _UNIT_FIELDS.items():
        if not isinstance(u, dict) or not isinstance(u.get(key), typ):
            fail(f"{at}.{key} missing or not {typ.__name__}")
    if u["status"] not in UNIT_STATUSES:
        fail(f"{at}.status {u['status']!r} not in {UNIT_STATUSES}")


def _check_shard(s: Any, at: str, fail) -> None:
    for key, typ in _SHARD_FIELDS.items():
        if not isinstance(s, dict) or not isinstance(s.get(key), typ) or isinstance(s.get(key), bool):
            fail(f"{at}.{key} missing or not {typ.__name__}")
    if s["rows"] < 0 or s["bytes"] < 0:
        fail(f"{at} has negative counts")
    columns = s.get("attrs_columns", {})
    if not isinstance(columns, dict) or not all(
        isinstance(v, list) and all(isinstance(c, str) for c in v) for v in columns.values()
    ):
        fail(f"{at}.attrs_columns is not a dict of column name lists")
    files = s.get("files", {})
    if not isinstance(files, dict) or not all(
        isinstance(f, dict) and isinstance(f.get("uri"), str) for f in files.values()
    ):
        fail(f"{at}.files is not a dict of {{uri, checksum, bytes}} records")


def _compact(shard: dict[str, Any]) -> dict[str, Any]:
    """A shard entry without its optional fields where they are empty (most stages' entries have none)."""
    return {k: v for k, v in shard.items() if v or k not in _OPTIONAL_SHARD_FIELDS}


_OPTIONAL_SHARD_FIELDS = ("attrs_columns", "files")


def _check_unique(d: dict[str, Any], where: str) -> None:
    for kind, key, what in (("units", "unit_id", "unit"), ("shards", "shard_id", "shard")):
        seen: set[str] = set()
        for e in d[kind]:
            if e[key] in seen:
                _fail(where, f"duplicate {what} id {e[key]!r}")
            seen.add(e[key])


def _validate(d: Any, where: str) -> None:
    """A whole manifest with both lists inline (format 1 as stored; format 2 before it is split)."""
    _validate_common(d, where)
    for key in KINDS:
        if not isinstance(d.get(key), list):
            _fail(where, f"field {key!r} missing or not list")
    for i, u in enumerate(d["units"]):
        _check_unit(u, f"units[{i}]", lambda msg: _fail(where, msg))
    for i, s in enumerate(d["shards"]):
        _check_shard(s, f"shards[{i}]", lambda msg: _fail(where, msg))
    _check_unique(d, where)


def latest_manifest(lake, stages: tuple[str, ...] | list[str]) -> str | None:
    """URI of the newest complete manifest (by ``created_at``) of any of ``stages`` in ``lake``, or None.

    What a command-line run reads when no ``--input-manifest`` is given: the last stage that finished.
    """
    found = []
    for stage in stages:
        for uri in storage.glob(lake.path("_manifests", "*", f"{stage}.json")):
            try:
                m = ManifestHead.read(uri)
            except ManifestError:
                continue  # a foreign or torn file is not a candidate
            if m.status == "complete":
                found.append((m.created_at, uri))
    return max(found)[1] if found else None
