"""Ingest: raw JSONL / Parquet / text files into zstd Parquet shards of a target size.

Units of work are groups of consecutive input files (a large file is a unit of its own), so that a
rerun skips every group whose files are unchanged and a killed run redoes only the groups it had not
committed. Shard names derive from the unit (``part-<unit>-<k>``), so a redone unit overwrites its own
partial output instead of adding to it.
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Any

import pyarrow.parquet as pq
import xxhash

from airflow_curation.core import storage
from airflow_curation.core.accounting import RowAccounting
from airflow_curation.core.fingerprint import canonical_json
from airflow_curation.core.html_text import EXTRACTORS
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest, ManifestError, ManifestHead, UnitEntry, group_range
from airflow_curation.core.quarantine import QuarantineWriter, utf8_safe
from airflow_curation.core.schema import ID, META, SHARD_SCHEMA, SOURCE, TEXT
from airflow_curation.core.shards import ShardWriter
from airflow_curation.core.unique_ids import repeated_ids
from airflow_curation.stages.base import Stage, StageFailed, UnitResult, file_record
from airflow_curation.stages.ingest.inputs import link_outside, list_local, open_local
from airflow_curation.stages.ingest.plans import RunPlans
from airflow_curation.stages.ingest.readers import (
    Bad,
    Doc,
    decompress,
    detect,
    read_jsonl,
    read_parquet,
    read_text,
    sniff,
    text_too_large,
)
from airflow_curation.stages.ingest.sizing import UnitProgress, group_files
from airflow_curation.stages.ingest.warc import html_fields, read_html_file, read_warc
from airflow_curation.stages.settings import Setting, size

log = logging.getLogger(__name__)

MiB = 1024 * 1024
_SHARD_NAME = re.compile(r"^part-\d{5}-\d{3}\.parquet$")


class IngestStage(Stage):
    """Turn raw JSONL (.gz/.zst), Parquet, text, web crawl (WARC, WET, ARC) or HTML files into zstd Parquet
    shards.

    Inputs are files, folders (read recursively) or glob patterns, local paths or fsspec URLs. What cannot
    be read is quarantined with where and why; a rerun with the same inputs and settings does no work.

    A caller id (``id_field``) repeated within a unit is quarantined as ``duplicate_id`` (the first one in
    input order is kept); one repeated across units fails the run once every unit is done (``collect``).
    ``max_text_bytes`` defaults to 32 MiB: larger "documents" are nearly always dumps, logs or binary, and
    one of them would blow up every later stage's row group.
    """

    name = "ingest"
    version = "1"
    INPUTS = "raw"
    SETTINGS = Stage.SETTINGS.extend(
        Setting(
            "input_root",
            str,
            None,
            "source (and so id) is the path relative to this; default: the deepest folder holding every input",
        ),
        Setting(
            "format",
            str,
            "auto",
            "auto (by extension), jsonl, parquet, text, warc (WARC and WET), arc or html",
            choices=("auto", "jsonl", "parquet", "text", "warc", "arc", "html"),
        ),
        Setting(
            "html_extractor",
            str,
            "resiliparse",
            "HTML to text for WARC responses and .html files (docs/ingest-web.md)",
            choices=EXTRACTORS,
            keep_old_fingerprint=True,
        ),
        Setting(
            "html_only",
            bool,
            True,
            "WARC: take only HTML responses (and WET text); off: text/plain responses too",
            keep_old_fingerprint=True,
        ),
        Setting("text_field", str, "text", "the field or column holding the document text"),
        Setting(
            "text_format",
            str,
            "text",
            "JSONL and Parquet: text (as it is) or html (the page's main text, by html_extractor)",
            choices=("text", "html"),
            keep_old_fingerprint=True,
        ),
        Setting("id_field", str, None, "a field holding your own unique ids (default: ids from source and position)"),
        Setting("text_mode", str, "file", "text files: one document per file, or per line", choices=("file", "line")),
        Setting(
            "max_text_bytes",
            size,
            32 * MiB,
            "larger documents (UTF-8) are quarantined as text_too_large",
            flag="--max-text-size",
            minimum=1,
        ),
        Setting(
            "target_shard_bytes",
            size,
            512 * MiB,
            "a shard rolls over once its compressed size reaches this",
            flag="--target-shard-size",
            minimum=1,
        ),
        Setting("row_group_rows", int, 4096, "rows per Parquet row group", minimum=1),
        Setting(
            "unit_bytes",
            size,
            None,
            "consecutive input files are grouped into units of about this many input bytes (default: by expected "
            "output, a whole number of target shards and at least 64 MiB a unit; docs/architecture.md, Ingest)",
            minimum=1,
        ),
        Setting(
            "replace",
            bool,
            False,
            "replace the complete ingest runs of this dataset/snapshot made from other inputs or settings: "
            "their manifests, and those that read their shards, are marked superseded",
            runtime=True,
        ),
    )

    def __init__(self, lake, config, run_id) -> None:
        super().__init__(lake, config, run_id)
        if not self.config.get("inputs"):
            raise ValueError("ingest: no inputs given")

    # -- planning ----------------------------------------------------------------------------------
    def _list_inputs(self) -> list[tuple[str, dict]]:
        """Every input file with its fsspec info, sorted by URL, hidden files left out. Local entries that
        are not regular files are listed too: reading them reports why they were skipped."""
        found: dict[str, dict] = {}
        for spec in self.config["inputs"]:
            fs, path = storage.filesystem(spec)
            if storage.is_local(spec):
                found.update(list_local(path))
                continue
            listed = storage.list_files(spec)
            if listed is None:  # one object
                with storage.explained(spec):
                    if not fs.exists(path):
                        raise FileNotFoundError(f"ingest: input {spec!r} does not exist")
                    listed = {f"{storage.protocol_of(spec)}://{path}": fs.info(path)}
            found.update(listed)
        # An input folder that holds the lake must not feed the lake (its shards, leases...) back into it.
        own = self.lake.base.rstrip("/") + "/"
        found = {url: info for url, info in found.items() if not url.startswith(own)}
        if not found:
            raise FileNotFoundError(f"ingest: no input files under {self.config['inputs']}")
        return sorted(found.items())

    def _source_root(self, urls: list[str]) -> str:
        if self.config["input_root"]:
            given = self.config["input_root"]
            # listed local inputs are absolute paths: a relative root is taken from here, as the inputs are
            root = os.path.abspath(storage.local_path(given)) if storage.is_local(given) else given.rstrip("/")
            outside = [u for u in urls if not u.startswith(root.rstrip("/") + "/")]
            if outside:
                # its source (and id) would be its file name alone: two files of one name, one id
                raise ValueError(
                    f"ingest: input {outside[0]} is not under input_root {given!r} ({len(outside)} of {len(urls)} "
                    "inputs are not): give a folder that holds every input, or none"
                )
            return root.rstrip("/")
        if len(urls) == 1:
            return urls[0].rsplit("/", 1)[0]
        return os.path.commonpath(urls) if all("://" not in u for u in urls) else _common_url_prefix(urls)

    def _listed_plan(self) -> list[UnitEntry]:
        """The units of a listing of every input: consecutive files grouped (sets ``_root``)."""
        files = self._list_inputs()
        root = self._root = self._source_root([u for u, _ in files])
        units: list[UnitEntry] = []
        target = int(self.config["target_shard_bytes"])
        unit_bytes = int(self.config["unit_bytes"]) if self.config["unit_bytes"] else None
        min_units = int(self.config.get("min_units") or 1)
        for group in group_files(files, target, unit_bytes, self.config["format"], min_units):
            ident = [(_relpath(u, root), i.get("size"), _version_of(i)) for u, i in group]
            checksum = "xxh64:" + xxhash.xxh64(canonical_json(ident).encode()).hexdigest()
            units.append(UnitEntry(unit_id=f"{len(units):05d}", inputs=[u for u, _ in group], input_checksum=checksum))
        return units

    @classmethod
    def new_launch(cls, lake: Lake, run_id: str) -> None:
        """A new launch lists the inputs again: the run's plan pointer, left by a killed launch of the same run
        id, goes (its tasks would else follow a plan of inputs that may have changed since, and only the
        collect step would notice, one failed attempt later). A relaunch of some tasks keeps it."""
        RunPlans.forget(lake, run_id)

    def _in_array(self) -> bool:
        return self.shard_group is not None and self.shard_group[1] > 1

    def _run_plan(self) -> tuple[ManifestHead, list[UnitEntry] | None]:
        """The plan this run's tasks share (``plans.py``): read where a task of the run wrote it, else listed and
        written under the plan lease by this task, the first to hold it; with the units where this task listed
        them (sets ``_root``)."""
        store = RunPlans(self)
        head, listed = store.current(), None
        if head is None:
            with store.lease():
                head = store.current()  # else another task wrote it while this one waited
                if head is None:
                    listed = self._listed_plan()
                    head = store.publish(listed, self._root)
        self._root = head.config["source_root"]
        return head, listed

    def plan(self) -> list[UnitEntry]:
        """Every unit: listed (a whole run, and the collect step, which leaves its listing to a relaunch where
        the inputs changed), or, in group 0 of an array, the run's shared plan."""
        if self._in_array():
            head, units = self._run_plan()
            units = units if units is not None else head.units()
        else:
            units = self._listed_plan()
            if self.collecting:
                RunPlans(self).reconcile(units, self._root)
        self._guard_earlier_runs(units)
        return units

    def plan_group(self, index: int, count: int) -> list[UnitEntry]:
        """Group ``index`` of ``count`` (a task of an array that is not group 0): its block of the run's shared
        plan, read from the pages that hold it, listing nothing where another task wrote the plan; the check
        against earlier runs reads only their units at its block's positions (:meth:`_guard_group_only`)."""
        head, _ = self._run_plan()
        block = group_range(head.unit_count, index, count)
        units = [UnitEntry(**u) for u in head.unit_dicts_at(block)]
        if not self._guard_group_only(units, block, head, index, count):
            self._guard_earlier_runs(head.units())
        return units

    def _guard_group_only(
        self, units: list[UnitEntry], block: range, plan: ManifestHead, index: int, count: int
    ) -> bool:
        """:meth:`_guard_earlier_runs` for one task of an array: each earlier complete ingest run's units at the
        positions of this group's block (the last group: to their end) against the plan's (``units``: this
        block's), from the unit pages that hold them and the heads, so what it reads grows with its own units.
        Every position is checked by some group, and group 0 checks the whole run. Returns False where the
        whole check must run (a conflict under ``replace``: superseding reads the other manifests' shards)."""

        def planned(position: int, u: dict[str, Any]) -> bool:
            # Unit ids are positions, in this run's plan as in every earlier run's: look there.
            if position in block and units[position - block.start].unit_id == u["unit_id"]:
                return units[position - block.start].input_checksum == u["input_checksum"]
            at = int(u["unit_id"]) if str(u["unit_id"]).isdigit() else -1
            found = plan.unit_dicts_at(range(at, at + 1)) if at >= 0 else []  # one page; none past the end
            return bool(found) and (found[0]["unit_id"], found[0]["input_checksum"]) == (
                u["unit_id"],
                u["input_checksum"],
            )

        total = plan.unit_count
        superseded: list[str] = []
        for uri in storage.glob(self.lake.path("_manifests", "*", f"{self.name}.json")):
            try:
                head = ManifestHead.read(uri)
            except ManifestError:
                continue  # a torn or foreign file pins nothing
            if head.status == "superseded" and head.superseded_by == self.run_id:
                superseded.append(uri)
            if head.status != "complete":
                continue
            stop = head.unit_count if index == count - 1 else block.stop
            try:
                earlier = head.unit_dicts_at(range(block.start, stop))
            except ManifestError:
                continue  # as the whole check: a manifest it cannot read pins nothing
            changed = {
                u["unit_id"]
                for k, u in enumerate(earlier, start=block.start)
                if u["status"] in ("done", "skipped")
                and (head.fingerprint != self.fingerprint or k >= total or not planned(k, u))
            }
            if changed and self.config["replace"]:
                return False
            if changed:
                raise ReplaceRefused(self._refusal(uri, head.run_id, len(changed), 0))
        self.supersedes = tuple(u for u in dict.fromkeys(superseded) if u != self.manifest_uri)
        return True

    def _refusal(self, uri: str, run_id: str, changed: int, more: int) -> str:
        where = self.lake.dataset + (f" snapshot {self.lake.snapshot}" if self.lake.snapshot else "")
        others = f" (and {more} more)" if more else ""
        return (
            f"ingest: {where} already holds the complete run {run_id} ({uri}){others}, made from other "
            f"inputs or settings: this run would overwrite or remove {changed} of its units' shards, "
            f"and every manifest that reads them would fail. Ingest into another --snapshot (or dataset), "
            f"or pass --replace (replace=True) to supersede that run."
        )

    def _guard_earlier_runs(self, units: list[UnitEntry]) -> None:
        """Refuse to overwrite a complete run's shards, unless ``replace``: then supersede it.

        Shards are named by unit (``part-<unit>-<k>``), so a run whose units differ from a complete earlier
        run's (other inputs, a changed file, other settings) rewrites or removes that run's shards, and
        everything pinned to its manifest would fail its checksums. A run with the same units and settings
        rewrites nothing (its units are skipped, or redone into the same bytes). Runs under the stage's
        lease, before anything is written (the planned manifest included)."""
        plan = {(u.unit_id, u.input_checksum) for u in units}
        superseded: list[str] = []
        conflicts: list[tuple[str, Manifest, set[str]]] = []
        for uri in storage.glob(self.lake.path("_manifests", "*", f"{self.name}.json")):
            try:
                m = Manifest.read(uri)
            except ManifestError:
                continue  # a torn or foreign file pins nothing
            if m.status == "superseded" and m.superseded_by == self.run_id:
                superseded.append(uri)  # this run's earlier attempt (or another shard group) marked it
            if m.status != "complete":
                continue
            changed = {
                u.unit_id
                for u in m.units
                if u.status in ("done", "skipped")
                and (m.fingerprint != self.fingerprint or (u.unit_id, u.input_checksum) not in plan)
            }
            if changed:
                conflicts.append((uri, m, changed))
        if conflicts and not self.config["replace"]:
            uri, m, changed = conflicts[0]
            raise ReplaceRefused(self._refusal(uri, m.run_id, len(changed), len(conflicts) - 1))
        if conflicts:
            superseded += self._supersede(conflicts)
        self.supersedes = tuple(u for u in dict.fromkeys(superseded) if u != self.manifest_uri)

    def _supersede(self, conflicts: list[tuple[str, Manifest, set[str]]]) -> list[str]:
        """Mark superseded (by this run) the conflicting ingest runs and every complete manifest of this
        snapshot that names one of the shards they lose. Returns the ingest manifests' URIs."""
        lost = {
            (s.shard_id, s.checksum)
            for _, m, changed in conflicts
            for s in m.shards
            if not s.unit_id or s.unit_id in changed
        }
        marked = []
        for uri in storage.glob(self.lake.path("_manifests", "*", "*.json")):
            if uri == self.manifest_uri or uri.rsplit("/", 1)[-1].startswith("report."):
                continue  # this run's own manifest is rewritten as it plans
            try:
                m = Manifest.read(uri)
            except ManifestError:
                continue
            if m.status == "complete" and any((s.shard_id, s.checksum) in lost for s in m.shards):
                m.status, m.superseded_by = "superseded", self.run_id
                m.write(uri)
                log.warning("ingest: %s (%s run %s) superseded by run %s", uri, m.stage, m.run_id, self.run_id)
                if m.stage == self.name:
                    marked.append(uri)
        return marked

    # -- processing --------------------------------------------------------------------------------
    def process_unit(self, unit: UnitEntry) -> UnitResult:
        cfg = self.config
        # plan() ran in this object before it was shipped to a worker, so the root travels with it.
        root = getattr(self, "_root", None) or self._source_root(unit.inputs)
        sizes = {url: self._size(url) for url in unit.inputs}
        progress = UnitProgress([s or 0 for s in sizes.values()])
        writer = ShardWriter(
            self.lake.path("shards"),
            lambda k: f"part-{unit.unit_id}-{k:03d}",
            SHARD_SCHEMA,
            target_bytes=int(cfg["target_shard_bytes"]),
            row_group_rows=int(cfg["row_group_rows"]),
            progress=progress,
        )
        quarantine = QuarantineWriter(self.lake.quarantine_uri(self.name, unit.unit_id))
        acc = RowAccounting()
        max_text = int(cfg["max_text_bytes"])
        # JSON escapes can make a record several times its text; allow for it before calling it too large.
        max_record = 4 * max_text + 1024 * 1024
        # Caller ids seen in this unit -> where first: a repeat is quarantined, the first one kept.
        seen: dict[str, tuple[str, str]] = {}
        try:
            for url in unit.inputs:
                rel = _relpath(url, root)
                # A file name that is not UTF-8 (surrogate-escaped by the OS) must not fail every row.
                source = utf8_safe(rel)
                source_key = xxhash.xxh64(rel.encode("utf-8", "surrogateescape")).hexdigest()
                for item in self._read(url, max_record, sizes[url], progress):
                    if isinstance(item, Bad):
                        quarantine.add(url, item.location, item.reason, item.detail, item.raw, item.rows)
                        if item.rows:
                            acc.quarantine(item.reason, item.rows)
                        else:
                            acc.note(item.reason)
                        continue
                    row, problem = self._row(item, source, source_key, max_text)
                    if problem is None and cfg["id_field"]:
                        problem = _repeat(seen, row[ID], source, item.location)
                    if problem:
                        quarantine.add(url, item.location, *problem, _raw_of(item))
                        acc.quarantine(problem[0])
                        continue
                    writer.write(row, nbytes=len(item.text))
                    acc.keep()
            outputs = writer.close()
        except BaseException:
            writer.abort()
            raise
        for o in outputs:
            o.unit_id = unit.unit_id
        qpath = quarantine.write()
        return UnitResult(
            outputs=outputs,
            accounting=acc,
            extra={"quarantine": qpath, "quarantine_entries": len(quarantine)},
            files=[file_record(o.uri, o.bytes, o.checksum) for o in outputs],
        )

    def _row(self, item: Doc, source: str, source_key: str, max_text: int) -> tuple[dict, tuple[str, str] | None]:
        """The shard row for a record, or why it cannot be one. Everything that could fail while the row
        group is written (a lone surrogate, a value json cannot encode) is found here, for this row only."""
        problem = _check_text(item.text, max_text)
        if problem:
            return {}, problem
        doc_id = self._doc_id(item, source_key)
        if isinstance(doc_id, tuple):
            return {}, doc_id
        meta = _meta_json(item.meta)
        if isinstance(meta, tuple):
            return {}, meta
        return {ID: doc_id, TEXT: item.text, SOURCE: source, META: meta}, None

    def _doc_id(self, item: Doc, source_key: str) -> str | tuple[str, str]:
        field = self.config["id_field"]
        if not field:
            return f"{source_key}-{item.position}"
        if not isinstance(item.doc_id, (str, int)) or isinstance(item.doc_id, bool) or item.doc_id == "":
            return "missing_id", f"no usable id in field {field!r}: {_short_repr(item.doc_id)}"
        try:
            doc_id = str(item.doc_id)
            doc_id.encode("utf-8")
        except UnicodeEncodeError as e:
            return "invalid_utf8", f"id in field {field!r} holds an unpaired surrogate at character {e.start}"
        except ValueError as e:  # an int beyond the str-digits limit
            return "unsupported_value", f"id in field {field!r} cannot be written as text: {e}"
        return doc_id

    def _read(self, url: str, max_record: int, size_hint: int | None, progress: UnitProgress):
        # first: a FIFO or a dangling link is that, whatever its name
        opened = self._open(url, self.config["inputs"], size_hint)
        if isinstance(opened, Bad):
            yield opened
            return
        raw, size = opened
        progress.start(size_hint or 0, lambda: raw.tell() / size if size else 0.0)
        try:
            yield from self._records(url, raw, size, max_record, progress)
        finally:
            progress.finish()

    def _records(self, url: str, raw, size: int, max_record: int, progress: UnitProgress):
        cfg = self.config
        fmt, compression = detect(url, cfg["format"])
        with raw:
            if fmt is None:
                yield Bad(
                    0,
                    "file",
                    "unsupported_format",
                    "unknown file type (use .jsonl/.json/.ndjson, .parquet, .txt, .warc/.wet/.arc, .html, optionally "
                    ".gz/.zst, or set format)",
                    rows=0,
                )
                return
            if size == 0:
                yield Bad(0, "file", "empty_file", "the file is empty", rows=0)
                return
            if fmt == "parquet":
                # HTML is bigger than its text: allowed what a record is (the text is checked after extraction).
                limit = max_record if cfg["text_format"] == "html" else int(cfg["max_text_bytes"])
                records = read_parquet(raw, cfg["text_field"], cfg["id_field"], max_text_bytes=limit)
                rows = _with_row_progress(records, raw, progress)
                yield from self._html_or_text(rows)
                return
            compression, mismatch = sniff(raw, compression)
            if mismatch:
                yield mismatch
            stream = decompress(raw, compression)
            if fmt == "jsonl":
                yield from self._html_or_text(read_jsonl(stream, cfg["text_field"], cfg["id_field"], max_record))
            elif fmt in ("warc", "arc"):
                yield from read_warc(stream, fmt, cfg["html_extractor"], max_record, cfg["html_only"])
            elif fmt == "html":
                yield from read_html_file(stream, cfg["html_extractor"], max_record)
            else:
                yield from read_text(stream, cfg["text_mode"], max_record)

    def _html_or_text(self, rows):
        """JSONL/Parquet rows as they are, or with ``text_format: html`` their HTML text extracted."""
        if self.config["text_format"] == "html":
            return html_fields(rows, self.config["html_extractor"])
        return rows

    @staticmethod
    def _size(url: str) -> int | None:
        """An input's size before it is read (what the unit's progress counts), None when it cannot be had;
        on an object store this is the request opening it would make, done first."""
        try:
            if storage.is_local(url):
                return os.stat(storage.local_path(url)).st_size
            return storage.size(url)
        except OSError:
            return None

    @staticmethod
    def _open(url: str, inputs: list[str], size: int | None = None):
        if storage.is_local(url):
            path = storage.local_path(url)  # not filesystem(): fsspec's URL parsing costs ~80 us, per file
            return link_outside(path, inputs) or open_local(path)
        try:
            size = storage.size(url) if size is None else size
            return storage.open_read(url), size
        except OSError as e:
            return Bad(0, "file", "unreadable_input", f"cannot open: {e}", rows=0)

    def collect(self, manifest: Manifest) -> None:
        """Check that caller ids are unique across units, then remove shards a previous run of this dataset
        left that this run's manifest does not name. The collect step of an array ends the run's shared plan
        (a later run of the same id lists again)."""
        if self.collecting:
            RunPlans(self).drop()
        if self.config["id_field"]:
            self._check_ids_across_units(manifest)
        keep = {s.uri.rsplit("/", 1)[-1] for s in manifest.shards}
        for url in storage.listdir(self.lake.path("shards")):
            name = url.rsplit("/", 1)[-1]
            if _SHARD_NAME.match(name) and name not in keep:
                log.info("ingest: removing stale shard %s (not produced by this run's units)", url)
                storage.remove(url)

    def _check_ids_across_units(self, manifest: Manifest) -> None:
        """Units run in parallel, so a unit cannot see another's ids: repeats across units are found here,
        after all of them. Their rows are in committed shards (which are never rewritten, and later
        stages may be reading them already), so they cannot be quarantined now: each is listed in
        ``_quarantine/ingest/duplicate_ids.parquet`` (those of the first million repeated ids; the rest are
        counted) and the run fails. Fixing the inputs redoes only the units whose files changed. Found in
        bounded memory (:mod:`airflow_curation.core.unique_ids`)."""
        quarantine = QuarantineWriter(self.lake.quarantine_uri(self.name, "duplicate_ids"))
        found = repeated_ids(manifest.shards)
        for doc_id, first, later in found.listed:
            quarantine.add(
                later[2],
                f"{later[0]} row {later[1]}",
                "duplicate_id",
                f"id {_short_repr(doc_id)} of field {self.config['id_field']!r} is also kept from "
                f"{first[2]} ({first[0]} row {first[1]}), an earlier unit",
                rows=0,
            )
        uri = quarantine.write()
        if not uri:
            return
        n = found.total
        acc = RowAccounting.from_dict(manifest.accounting)
        acc.note("duplicate_id", n)
        manifest.accounting = acc.to_dict()
        listed = "each is listed" if len(quarantine) == n else f"the first {len(quarantine):,} are listed"
        raise StageFailed(
            f"ingest: {n} id{'s' if n > 1 else ''} of field {self.config['id_field']!r} repeated "
            f"across units (ids must be unique in a dataset); {listed} in {uri}"
        )


def _with_row_progress(items, raw, progress: UnitProgress):
    """A Parquet file's records, its progress counted in rows: its reader reads whole row groups (often one
    a file), so its byte position says little about how many rows are out."""
    try:
        rows = pq.ParquetFile(raw).metadata.num_rows
        raw.seek(0)
    except Exception:  # noqa: BLE001 - the reader reports an unreadable file; progress just stays at 0
        rows = 0
    at = [0]
    progress.follow((lambda: at[0] / rows) if rows else None)
    for item in items:
        at[0] = item.position + max(item.rows if isinstance(item, Bad) else 1, 1)
        yield item


class ReplaceRefused(ValueError):
    """An ingest would overwrite a complete earlier run's shards and ``replace`` is not set."""


def _repeat(seen: dict[str, tuple[str, str]], doc_id: str, source: str, location: str) -> tuple[str, str] | None:
    first = seen.setdefault(doc_id, (source, location))
    if first == (source, location):
        return None
    return "duplicate_id", f"id {_short_repr(doc_id)} was first used by {first[0]} {first[1]}, which is kept"


def _meta_json(meta: dict | None) -> str | None | tuple[str, str]:
    """The meta column's JSON, or why a field cannot be stored (found now, not when the row group is
    written, where it would fail every row of the unit)."""
    if not meta:
        return None
    try:
        text = json.dumps(meta, ensure_ascii=False, default=str)
    except Exception as e:  # noqa: BLE001 - whatever one record's fields raise (str() of a value included) spoils it only
        return "unsupported_value", f"a field cannot be stored as JSON: {type(e).__name__}: {e}"
    if not _utf8_ok(text):
        field = ascii(_surrogate_field(meta))
        return "invalid_utf8", f"field {field} holds an unpaired surrogate (e.g. a \\ud800 escape)"
    return text


def _surrogate_field(meta: dict) -> str:
    for key, value in meta.items():
        if not _utf8_ok(key) or not _utf8_ok(json.dumps(value, ensure_ascii=False, default=str)):
            return key
    return "?"


def _utf8_ok(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _raw_of(item: Doc) -> bytes:
    """What the quarantine keeps of a rejected record: its input line, else its text."""
    if item.raw:
        return item.raw
    if isinstance(item.text, str):
        return item.text.encode("utf-8", "replace")
    try:
        return json.dumps(item.text, default=str).encode()
    except (RecursionError, ValueError, TypeError):
        return _short_repr(item.text).encode()


def _short_repr(value, limit: int = 200) -> str:
    try:
        text = ascii(value)
    except (RecursionError, ValueError):
        return f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit] + "..."


def _check_text(text, max_text: int) -> tuple[str, str] | None:
    if text is None:
        return "missing_text", "text is null"
    if not isinstance(text, str):
        return "non_string_text", f"text is a {type(text).__name__}, expected a string"
    try:
        n = len(text.encode("utf-8"))
    except UnicodeEncodeError as e:
        return "invalid_utf8", f"text holds an unpaired surrogate at character {e.start} (e.g. a \\ud800 escape)"
    if n > max_text:
        return text_too_large(n, max_text)
    if not text.strip():
        return "empty_text", "text is empty or whitespace only"
    return None


def _relpath(url: str, root: str) -> str:
    if root and url.startswith(root.rstrip("/") + "/"):
        return url[len(root.rstrip("/")) + 1 :]
    # no common root (local files and object-store keys together): the whole URL, unique where a name is not
    return url


def _version_of(info: dict) -> str:
    """Whatever tells a changed file apart: ETag on object stores, mtime on disks."""
    for key in ("ETag", "etag", "mtime", "LastModified", "last_modified", "updated", "md5Hash"):
        if info.get(key) is not None:
            return str(info[key])
    return ""


def _common_url_prefix(urls: list[str]) -> str:
    prefix = os.path.commonprefix(urls)
    return prefix.rsplit("/", 1)[0]
