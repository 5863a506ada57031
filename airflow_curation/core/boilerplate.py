"""Boilerplate across documents: lines that many documents of a snapshot share (menus, footers, cookie banners).

A line's key is a 64-bit hash of the line's UTF-8 bytes with surrounding whitespace stripped (blank lines have no
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

from airflow_curation.core.arrays import from_numpy, string_buffers
from airflow_curation.core.jit import numba
from airflow_curation.core.pairs import check_pairs, sort_rows

KEY_COLUMNS = {"key": np.uint64, "docs": np.uint64}


@numba.njit(cache=True, nogil=True)
def _split(data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover
    """(the bytes without the newlines, line offsets into them, lines per string): a string of k newlines
    has k + 1 lines."""
    n = len(offsets) - 1
    counts = np.ones(n, np.int64)
    newlines = 0
    for i in range(offsets[0], offsets[n]):
        if data[i] == 10:
            newlines += 1
    packed = np.empty(offsets[n] - offsets[0] - newlines, np.uint8)
    line_offsets = np.empty(n + newlines + 1, np.int64)
    line_offsets[0] = 0
    k = 1
    j = 0
    for d in range(n):
        for i in range(offsets[d], offsets[d + 1]):
            c = data[i]
            if c == 10:
                line_offsets[k] = j
                k += 1
                counts[d] += 1
            else:
                packed[j] = c
                j += 1
        line_offsets[k] = j
        k += 1
    return packed, line_offsets, counts


def split_lines(texts: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, np.ndarray]:
    """Every line of every text (split on ``\n``; a null text is one empty line) and each line's document
    index."""
    data, offsets = string_buffers(texts)
    packed, line_offsets, counts = _split(data, offsets)
    lines = pa.LargeStringArray.from_buffers(len(line_offsets) - 1, pa.py_buffer(line_offsets), pa.py_buffer(packed))
    return lines, np.repeat(np.arange(len(offsets) - 1, dtype=np.int64), counts)


_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xBF58476D1CE4E5B9)
_M3 = np.uint64(0x94D049BB133111EB)


@numba.njit(cache=True, nogil=True)
def _hash_lines(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """A 64-bit hash of each string's bytes: 8-byte words folded with multiply-xorshift steps (splitmix64's
    finaliser), the length mixed in. Not cryptographic; well spread for text, and the same on every machine."""
    n = len(offsets) - 1
    out = np.empty(n, np.uint64)
    for d in range(n):
        start, end = offsets[d], offsets[d + 1]
        h = np.uint64(end - start) * _M1
        w = np.uint64(0)
        k = 0
        for i in range(start, end):
            w = (w << np.uint64(8)) | np.uint64(data[i])
            k += 1
            if k == 8:
                h = (h ^ w) * _M2
                h ^= h >> np.uint64(31)
                w = np.uint64(0)
                k = 0
        if k:
            h = (h ^ w ^ (np.uint64(k) << np.uint64(59))) * _M2
            h ^= h >> np.uint64(31)
        h ^= h >> np.uint64(30)
        h *= _M2
        h ^= h >> np.uint64(27)
        h *= _M3
        h ^= h >> np.uint64(31)
        out[d] = h
    return out


def string_hashes(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The 64-bit hash of each value's UTF-8 bytes, as a line's key is hashed (the values as
    :func:`airflow_curation.core.arrays.string_buffers` takes them)."""
    return _hash_lines(*string_buffers(values))


def line_keys(lines: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """``(keys, has_key)``: the hash of each stripped line, and False for blank lines (key 0)."""
    data, offsets = string_buffers(pc.utf8_trim_whitespace(lines))
    has_key = np.diff(offsets) > 0
    keys = _hash_lines(data, offsets)
    keys[~has_key] = 0
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
        # One (document, key) pair per document that holds the line, however often it repeats it: sorted
        # by key, stably, the pairs of a key are in document order, so a repeat follows its first.
        order = np.argsort(keys, kind="stable")
        keys, doc = keys[order], doc[order]
        first = np.ones(len(keys), bool)
        first[1:] = (keys[1:] != keys[:-1]) | (doc[1:] != doc[:-1])
        per_doc.append(keys[first])
        docs_seen += len(texts)
    keys = np.concatenate(per_doc) if per_doc else np.empty(0, np.uint64)
    docs = np.ones(len(keys), np.uint64)
    m = sum_counts_in_place(keys, docs)
    stats = {"documents": docs_seen, "lines": lines_seen, "distinct_lines": m}
    return keys[:m], docs[:m], stats


def sum_counts(keys: np.ndarray, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The counts of equal keys summed: ``(distinct keys ascending, their summed counts)``; the inputs are left
    as they were (:func:`sum_counts_in_place` sums in the caller's own arrays)."""
    keys, docs = np.array(keys, np.uint64), np.array(docs, np.uint64)
    m = sum_counts_in_place(keys, docs)
    return keys[:m].copy(), docs[:m].copy()


def sum_counts_in_place(keys: np.ndarray, docs: np.ndarray) -> int:
    """Sum the counts of equal keys in the arrays themselves (both uint64, writable, the same length): after it,
    ``keys[:m]`` are the distinct keys ascending and ``docs[:m]`` their summed counts, for the ``m`` returned.

    No memory beyond the arrays (:mod:`~airflow_curation.core.pairs`): the global step sums a partition of (key,
    count) pairs in the arrays it read them into (docs/boilerplate.md, *At scale*)."""
    check_pairs(keys, docs, "sum_counts_in_place")
    return int(_sum_in_place(keys, docs))


@numba.njit(cache=True, nogil=True)
def _sum_in_place(keys: np.ndarray, docs: np.ndarray) -> int:  # pragma: no cover - compiled
    n = len(keys)
    if n == 0:
        return 0
    sort_rows(keys, docs)  # by key, then count: the counts of a key end up side by side either way
    m = 0
    for i in range(1, n):
        if keys[i] == keys[m]:
            docs[m] += docs[i]
        else:
            m += 1
            keys[m] = keys[i]
            docs[m] = docs[i]
    return m + 1


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
    joined = pc.binary_join(
        pa.ListArray.from_arrays(from_numpy(offsets), kept), pa.scalar("\n", pa.large_string())
    ).cast(texts.type)
    if texts.null_count:
        joined = pc.if_else(texts.is_null(), pa.scalar(None, pa.string()), joined)
    return joined, removed
