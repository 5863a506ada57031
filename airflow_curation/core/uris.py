"""How URIs are stored in the lake's own documents (manifests, checkpoint records): relative to the lake root.

A stored URI under the lake root is written relative to it (``web/snapshot=2026-11-30/shards/part-00000-000.parquet``)
and resolved against the root of the lake it is read from, so that a copied or moved lake (``cp -a``, an S3
prefix copied to another) reads its own files, never the original's. A URI outside the root (an ingest input
elsewhere) stays absolute. Documents written before this rule hold absolute URIs; they resolve to themselves.

In memory every URI is absolute: only :func:`relativize` (on write) and :func:`resolve` (on read) see the
stored form. A stored relative URI never holds ``..`` and never starts with ``/`` or a scheme.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from airflow_curation.core import storage


def is_absolute(uri: str) -> bool:
    return "://" in uri or os.path.isabs(uri)


def relativize(uri: str, root: str) -> str:
    """``uri`` as stored under a lake at ``root``: relative to ``root`` where it lies under it, else absolute
    (a relative local path is made absolute first: it meant the writer's working folder, not the lake)."""
    if not is_absolute(uri) and storage.is_local(root):
        uri = os.path.abspath(uri)
    prefix = root.rstrip("/") + "/"
    if uri.startswith(prefix) and len(uri) > len(prefix):
        return uri[len(prefix) :]
    return uri


def resolve(uri: str, root: str) -> str:
    """A stored ``uri`` read from the lake at ``root``: absolute URIs as they are, relative ones under ``root``."""
    return uri if is_absolute(uri) else storage.join(root, uri)


def map_shard(shard: dict[str, Any], fn: Callable[[str], str]) -> dict[str, Any]:
    """A shard entry (a manifest's ``shards[i]``, a checkpoint record's ``outputs[i]``) with ``fn`` applied to
    every URI it holds: the shard's, each stage's attrs file and the unit's other files (``files``)."""
    out = dict(shard)
    if isinstance(out.get("uri"), str):
        out["uri"] = fn(out["uri"])
    if isinstance(out.get("attrs"), dict):
        out["attrs"] = {k: fn(v) if isinstance(v, str) else v for k, v in out["attrs"].items()}
    if isinstance(out.get("files"), dict):
        out["files"] = {
            k: {**f, "uri": fn(f["uri"])} if isinstance(f, dict) and isinstance(f.get("uri"), str) else f
            for k, f in out["files"].items()
        }
    return out


# Keys whose values are URIs, in a manifest's ``config`` and a checkpoint record's ``extra`` (besides ``*_uri``).
_URI_KEYS = frozenset({"uri", "input_manifest", "quarantine", "report_json", "report_html"})


def map_keys(value: Any, fn: Callable[[str], str]) -> Any:
    """``value`` with ``fn`` applied to every string under a URI key (``*_uri``, ``uri``, ``input_manifest``,
    ``quarantine``, ``report_json``, ``report_html``), in nested dicts and lists too (tokenize's packed files,
    dedup's shard list); everything else as it is."""
    if isinstance(value, dict):
        return {
            k: fn(v) if isinstance(v, str) and (k in _URI_KEYS or k.endswith("_uri")) else map_keys(v, fn)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [map_keys(v, fn) for v in value]
    return value


def map_files(files: list[Any], fn: Callable[[str], str]) -> list[Any]:
    """A checkpoint record's ``files`` (``{uri, bytes, checksum}``) with ``fn`` applied to each URI."""
    return [{**f, "uri": fn(f["uri"])} if isinstance(f, dict) and isinstance(f.get("uri"), str) else f for f in files]


def root_of(doc_uri: str, lake: dict[str, Any], depth: int) -> str | None:
    """The root of the lake a document at ``doc_uri`` lies in, from where it lies: ``depth`` folders below the
    dataset base of ``lake`` (``{root, dataset, snapshot}``, as the document recorded it). None where the
    document is not where the layout puts it (a copy of one file elsewhere): its recorded root then holds."""
    if not is_absolute(doc_uri):
        doc_uri = os.path.abspath(doc_uri)
    parts = doc_uri.rstrip("/").split("/")
    tail = [lake.get("dataset")] + ([f"snapshot={lake['snapshot']}"] if lake.get("snapshot") else [])
    cut = len(parts) - 1 - depth  # the parts of the dataset base
    if cut <= len(tail) or parts[cut - len(tail) : cut] != tail:
        return None
    root = "/".join(parts[: cut - len(tail)])
    if root.endswith(":/"):  # "s3://bucket" split as "s3:", "", "bucket"
        return None
    return root or "/"
