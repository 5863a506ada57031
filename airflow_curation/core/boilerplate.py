"""Boilerplate across documents: lines that many documents of a snapshot share (menus, footers, cookie banners).

A line's key is the 64-bit xxh3 hash of the line with surrounding whitespace stripped (blank lines have no
key and are never removed). A line counts once per document however often that document repeats it, so
its count is the number of documents holding it. Lines held by at least ``min_documents`` documents are
removed from every document; the other lines, blank ones included, are kept as they were, so a document
without boilerplate keeps its exact text.

The functions here are the three steps of ``stages/boilerplate`` on arrays: :func:`document_line_counts`
(one shard: its distinct keys and how many of its documents hold each), :func:`sum_counts` (one partition
of the keys: the counts of every shard summed), and :func:`remove_lines` (one batch: the text without the
frequent lines, and how many lines each document lost).

Two different lines share a key with probability ~n^2 / 2^65 for n distinct lines (1e-3 at 2e8 lines);
a collision can only remove a line when the other line of the pair is itself frequent.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from airflow_curation.core.arrays import from_numpy, to_numpy

KEY_COLUMNS = {"key": np.uint64, "docs": np.uint64}


def split_lines(texts: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, np.ndarray]:
    """Every line of every text (split on ``\\n``, a null text has none) and each line's document index."""
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks() if texts.num_chunks else pa.array([], pa.string())
    texts = pc.fill_null(texts, "") if texts.null_count else texts
    parts = pc.split_pattern(texts, "\n")
    lines = parts.flatten()
    lengths = to_numpy(pc.list_value_length(parts)).astype(np.int64)
    return lines, np.repeat(np.arange(len(texts), dtype=np.int64), lengths)


def line_keys(lines: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """``(keys, has_key)``: the xxh3-64 of each stripped line, and False for blank lines (key 0)."""
    stripped = pc.utf8_trim_whitespace(lines).to_pylist()
    digest = xxhash.xxh3_64_intdigest
    keys = np.fromiter((digest(s.encode()) if s else 0 for s in stripped), np.uint64, len(stripped))
    has_key = np.fromiter((bool(s) for s in stripped), bool, len(stripped))
    return keys, has_key


def document_line_counts(batches: Iterable[pa.Array | pa.ChunkedArray]) -> tuple[np.ndarray, np.ndarray, dict]:
    """``(keys, docs, stats)`` of one shard's texts: its distinct line keys (ascending), how many of its
    documents hold each, and ``{"documents", "lines", "distinct_lines"}``."""
    per_doc: list[np.ndarray] = []
    docs_seen = lines_seen = 0
    for texts in batches:
        lines, doc = split_lines(texts)
        keys, has_key = line_keys(lines)
        keys, doc = keys[has_key], doc[has_key]
        lines_seen += int(has_key.sum())
        # One (document, key) pair per document that holds the line, however often it repeats it.
        order = np.lexsort((keys, doc))
        keys, doc = keys[order], doc[order]
        first = np.ones(len(keys), bool)
        first[1:] = (keys[1:] != keys[:-1]) | (doc[1:] != doc[:-1])
        per_doc.append(keys[first])
        docs_seen += len(texts)
    keys = np.concatenate(per_doc) if per_doc else np.empty(0, np.uint64)
    unique, docs = np.unique(keys, return_counts=True)
    stats = {"documents": docs_seen, "lines": lines_seen, "distinct_lines": int(len(unique))}
    return unique, docs.astype(np.uint64), stats


def sum_counts(keys: np.ndarray, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The counts of equal keys summed: ``(distinct keys ascending, their summed counts)``."""
    if not len(keys):
        return keys.astype(np.uint64), docs.astype(np.uint64)
    order = np.argsort(keys, kind="stable")
    keys, docs = keys[order], docs[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    return keys[starts], np.add.reduceat(docs, starts).astype(np.uint64)


def remove_lines(texts: pa.Array | pa.ChunkedArray, frequent: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    """``texts`` without their lines whose key is in ``frequent`` (sorted uint64), joined again with
    ``\\n``, and the number of lines each text lost (int32). A null text stays null."""
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks() if texts.num_chunks else pa.array([], pa.string())
    n = len(texts)
    lines, doc = split_lines(texts)
    keys, has_key = line_keys(lines)
    hit = np.zeros(len(keys), bool)
    if len(frequent) and len(keys):
        pos = np.minimum(np.searchsorted(frequent, keys), len(frequent) - 1)
        hit = has_key & (frequent[pos] == keys)
    removed = np.bincount(doc[hit], minlength=n).astype(np.int32)
    if not hit.any():
        return texts, removed
    kept = lines.filter(from_numpy(~hit))
    lengths = np.bincount(doc[~hit], minlength=n).astype(np.int32)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    joined = pc.binary_join(pa.ListArray.from_arrays(from_numpy(offsets), kept), "\n")
    if texts.null_count:
        joined = pc.if_else(texts.is_null(), pa.scalar(None, pa.string()), joined)
    return joined, removed
