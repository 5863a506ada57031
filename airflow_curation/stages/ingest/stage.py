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

import xxhash

from airflow_curation.core import storage
from airflow_curation.core.accounting import RowAccounting
from airflow_curation.core.fingerprint import canonical_json
from airflow_curation.core.manifest import Manifest, UnitEntry
from airflow_curation.core.quarantine import QuarantineWriter
from airflow_curation.core.schema import SHARD_SCHEMA
from airflow_curation.core.shards import ShardWriter
from airflow_curation.stages.base import Stage, UnitResult, file_record
from airflow_curation.stages.ingest.readers import Bad, Doc, decompress, detect, read_jsonl, read_parquet, read_text

log = logging.getLogger(__name__)

MiB = 1024 * 1024
_SHARD_NAME = re.compile(r"^part-\d{5}-\d{3}\.parquet$")


class IngestStage(Stage):
    """Settings (``config``):

    :param inputs: files, folders (read recursively) or glob patterns; local paths or fsspec URLs.
    :param input_root: ``source`` (and so ``id``) is the path relative to this; default: the deepest folder
        holding every input.
    :param format: ``auto`` (by extension), ``jsonl``, ``parquet`` or ``text``.
    :param text_field: the field or column holding the document text.
    :param id_field: a field holding the caller's own unique ids; default: ids from source and position.
    :param text_mode: for text files, ``file`` (one document per file) or ``line``.
    :param max_text_bytes: documents larger than this (UTF-8) are quarantined as ``text_too_large``.
        Default 32 MiB: larger "documents" are nearly always dumps, logs or binary, and one of them would
        blow up every later stage's row group.
    :param target_shard_bytes: a shard rolls over once its compressed size reaches this (default 512 MiB).
    :param row_group_rows: rows per Parquet row group (default 4096).
    :param unit_bytes: consecutive input files are grouped into units of about this many bytes.
    """

    name = "ingest"
    version = "1"
    DEFAULTS = {
        "input_root": None,
        "format": "auto",
        "text_field": "text",
        "id_field": None,
        "text_mode": "file",
        "max_text_bytes": 32 * MiB,
        "target_shard_bytes": 512 * MiB,
        "row_group_rows": 4096,
        "unit_bytes": None,
    }

    def __init__(self, lake, config, run_id) -> None:
        super().__init__(lake, config, run_id)
        if not self.config.get("inputs"):
            raise ValueError("ingest: no inputs given")
        if self.config["text_mode"] not in ("file", "line"):
            raise ValueError(f"ingest: text_mode must be 'file' or 'line', not {self.config['text_mode']!r}")
        if self.config["format"] not in ("auto", "jsonl", "parquet", "text"):
            raise ValueError(f"ingest: unknown format {self.config['format']!r}")

    # -- planning ----------------------------------------------------------------------------------
    def _list_inputs(self) -> list[tuple[str, dict]]:
        """Every input file with its fsspec info, sorted by URL, hidden files left out."""
        found: dict[str, dict] = {}
        for spec in self.config["inputs"]:
            fs, path = storage.filesystem(spec)
            remote = not storage.is_local(spec)
            prefix = f"{storage.protocol_of(spec)}://" if remote else ""
            if any(ch in path for ch in "*?["):
                infos = fs.glob(path, detail=True)
            elif fs.isdir(path):
                infos = fs.find(path, detail=True)
            elif fs.exists(path):
                infos = {path: fs.info(path)}
            else:
                raise FileNotFoundError(f"ingest: input {spec!r} does not exist")
            for name, info in infos.items():
                if info.get("type") != "file" or os.path.basename(name).startswith("."):
                    continue
                found[prefix + name] = info
        if not found:
            raise FileNotFoundError(f"ingest: no input files under {self.config['inputs']}")
        return sorted(found.items())

    def _source_root(self, urls: list[str]) -> str:
        if self.config["input_root"]:
            return self.config["input_root"].rstrip("/")
        if len(urls) == 1:
            return urls[0].rsplit("/", 1)[0]
        return os.path.commonpath(urls) if all("://" not in u for u in urls) else _common_url_prefix(urls)

    def plan(self) -> list[UnitEntry]:
        files = self._list_inputs()
        root = self._root = self._source_root([u for u, _ in files])
        unit_bytes = int(self.config["unit_bytes"] or self.config["target_shard_bytes"])
        units: list[UnitEntry] = []
        group: list[tuple[str, dict]] = []
        group_bytes = 0

        def close_group() -> None:
            nonlocal group, group_bytes
            if not group:
                return
            ident = [(_relpath(u, root), i.get("size"), _version_of(i)) for u, i in group]
            checksum = "xxh64:" + xxhash.xxh64(canonical_json(ident).encode()).hexdigest()
            units.append(UnitEntry(unit_id=f"{len(units):05d}", inputs=[u for u, _ in group],
                                   input_checksum=checksum))
            group, group_bytes = [], 0

        for url, info in files:
            group.append((url, info))
            group_bytes += int(info.get("size") or 0)
            if group_bytes >= unit_bytes or len(group) >= 10_000:
                close_group()
        close_group()
        return units

    # -- processing --------------------------------------------------------------------------------
    def process_unit(self, unit: UnitEntry) -> UnitResult:
        cfg = self.config
        # plan() ran in this object before it was shipped to a worker, so the root travels with it.
        root = getattr(self, "_root", None) or self._source_root(unit.inputs)
        writer = ShardWriter(self.lake.path("shards"), lambda k: f"part-{unit.unit_id}-{k:03d}", SHARD_SCHEMA,
                             target_bytes=int(cfg["target_shard_bytes"]), row_group_rows=int(cfg["row_group_rows"]))
        quarantine = QuarantineWriter(self.lake.quarantine_uri(self.name, unit.unit_id))
        acc = RowAccounting()
        max_text = int(cfg["max_text_bytes"])
        # JSON escapes can make a record several times its text; allow for it before calling it too large.
        max_record = 4 * max_text + 1024 * 1024
        try:
            for url in unit.inputs:
                source = _relpath(url, root)
                source_key = xxhash.xxh64(source.encode()).hexdigest()
                for item in self._read(url, max_record):
                    if isinstance(item, Bad):
                        quarantine.add(url, item.location, item.reason, item.detail, item.raw, item.rows)
                        if item.rows:
                            acc.quarantine(item.reason, item.rows)
                        continue
                    problem = _check_text(item.text, max_text)
                    if problem:
                        reason, detail = problem
                        raw = item.text.encode("utf-8", "replace") if isinstance(item.text, str) else \
                            json.dumps(item.text, default=str).encode()
                        quarantine.add(url, item.location, reason, detail, raw)
                        acc.quarantine(reason)
                        continue
                    doc_id = self._doc_id(item, source_key)
                    if isinstance(doc_id, Bad):
                        quarantine.add(url, item.location, doc_id.reason, doc_id.detail)
                        acc.quarantine(doc_id.reason)
                        continue
                    meta = json.dumps(item.meta, ensure_ascii=False, default=str) if item.meta else None
                    writer.write({"id": doc_id, "text": item.text, "source": source, "meta": meta},
                                 nbytes=len(item.text))
                    acc.keep()
            outputs = writer.close()
        except BaseException:
            writer.abort()
            raise
        for o in outputs:
            o.unit_id = unit.unit_id
        qpath = quarantine.write()
        return UnitResult(outputs=outputs, accounting=acc,
                          extra={"quarantine": qpath, "quarantine_entries": len(quarantine)},
                          files=[file_record(o.uri, o.bytes, o.checksum) for o in outputs])

    def _doc_id(self, item: Doc, source_key: str):
        if self.config["id_field"]:
            if isinstance(item.doc_id, (str, int)) and not isinstance(item.doc_id, bool) and str(item.doc_id):
                return str(item.doc_id)
            return Bad(item.position, item.location, "missing_id",
                       f"no usable id in field {self.config['id_field']!r}: {item.doc_id!r}")
        return f"{source_key}-{item.position}"

    def _read(self, url: str, max_record: int):
        fmt, compression = detect(url, self.config["format"])
        if fmt is None:
            yield Bad(0, "file", "unsupported_format",
                      "unknown file type (use .jsonl/.json/.ndjson, .parquet, .txt, optionally .gz/.zst, "
                      "or set format)", rows=0)
            return
        cfg = self.config
        try:
            raw = storage.open_read(url)
        except OSError as e:
            yield Bad(0, "file", "unreadable_input", f"cannot open: {e}", rows=0)
            return
        with raw:
            if storage.size(url) == 0:
                yield Bad(0, "file", "empty_file", "the file is empty", rows=0)
                return
            if fmt == "parquet":
                yield from read_parquet(raw, cfg["text_field"], cfg["id_field"])
                return
            stream = decompress(raw, compression)
            if fmt == "jsonl":
                yield from read_jsonl(stream, cfg["text_field"], cfg["id_field"], max_record)
            else:
                yield from read_text(stream, cfg["text_mode"], max_record)

    def finalize(self, manifest: Manifest) -> None:
        """Remove shards a previous run of this dataset left that this run's manifest does not name."""
        keep = {s.uri.rsplit("/", 1)[-1] for s in manifest.shards}
        for url in storage.listdir(self.lake.path("shards")):
            name = url.rsplit("/", 1)[-1]
            if _SHARD_NAME.match(name) and name not in keep:
                log.info("ingest: removing stale shard %s (not produced by this run's units)", url)
                storage.remove(url)


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
        return "text_too_large", f"text of {n} bytes exceeds max_text_bytes={max_text}"
    if not text.strip():
        return "empty_text", "text is empty or whitespace only"
    return None


def _relpath(url: str, root: str) -> str:
    if root and url.startswith(root.rstrip("/") + "/"):
        return url[len(root.rstrip("/")) + 1:]
    return url.rsplit("/", 1)[-1]


def _version_of(info: dict) -> str:
    """Whatever tells a changed file apart: ETag on object stores, mtime on disks."""
    for key in ("ETag", "etag", "mtime", "LastModified", "last_modified", "updated", "md5Hash"):
        if info.get(key) is not None:
            return str(info[key])
    return ""


def _common_url_prefix(urls: list[str]) -> str:
    prefix = os.path.commonprefix(urls)
    return prefix.rsplit("/", 1)[0]
