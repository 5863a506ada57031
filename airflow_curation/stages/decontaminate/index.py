"""The evaluation n-gram index: built once per run, partitioned by hash, probed by every shard task.

Layout, under ``<index dir>`` (``decontaminate/<index key>/`` in the lake, keyed by the evaluation files'
checksums and the n-gram settings, so two runs with the same evaluation sets share one):

    part-<p>.parquet    (hash uint64, bench uint16), sorted, unique: the n-grams whose top bits are p
    quarantine.parquet  the evaluation rows that could not be read (bad_eval_rows=skip), with file, line, why
    _SUCCESS.json       benchmarks, partitions, counts; written last (the index is complete when it exists)

Memory: building holds at most ``memory_budget`` of hashes before spilling them by partition to
``spill/``; the partition count is chosen so that one partition fits the budget, and a probing process
keeps as many partitions as the budget holds (usually all: the test splits of every common benchmark
together are a few million n-grams, tens of MiB).
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import pyarrow as pa

from airflow_curation.core import storage
from airflow_curation.core.ngram_match import ngram_hashes, normalize
from airflow_curation.core.shards import write_parquet

log = logging.getLogger(__name__)

ENTRY_BYTES = 10  # hash + bench
_BATCH = 4096


class EvalSetError(ValueError):
    """An evaluation file that cannot be read, or a bad row in one (with ``bad_eval_rows=fail``)."""


@dataclass
class BadRow:
    benchmark: str
    file: str
    position: int
    reason: str
    detail: str


def eval_rows(benchmark: str, path: str, text_column: str) -> Iterator[str | BadRow]:
    """The texts of one evaluation file (JSONL, optionally .gz/.zst, or Parquet), or a :class:`BadRow` for
    each row that is not one (not JSON, no ``text_column``, not a string)."""
    from airflow_curation.stages.ingest.readers import Bad, decompress, detect, read_jsonl, read_parquet, sniff

    fmt, compression = detect(path)
    if fmt not in ("jsonl", "parquet"):
        raise EvalSetError(f"eval set {benchmark}: {path}: not JSONL or Parquet (by its name)")
    with storage.open_read(path) as raw:
        if fmt == "parquet":
            records = read_parquet(raw, text_column, None)
        else:
            compression, _ = sniff(raw, compression)
            records = read_jsonl(decompress(raw, compression), text_column, None, 1 << 30)
        for r in records:
            if isinstance(r, Bad):
                if r.rows:  # (a note about the file itself stands for no row)
                    yield BadRow(benchmark, path, r.position, r.reason, r.detail)
            elif not isinstance(r.text, str):
                yield BadRow(
                    benchmark, path, r.position, "text_not_string", f"{text_column} is {type(r.text).__name__}"
                )
            else:
                yield r.text


def index_partitions(estimated_entries: int, memory_budget: int) -> int:
    """A power of two of partitions, each fitting ``memory_budget``."""
    need = max(1, math.ceil(estimated_entries * ENTRY_BYTES / max(1, memory_budget)))
    return 1 << (need - 1).bit_length()


def _part_of(hashes: np.ndarray, partitions: int) -> np.ndarray:
    if partitions == 1:
        return np.zeros(len(hashes), np.int64)
    return (hashes >> np.uint64(64 - (partitions.bit_length() - 1))).astype(np.int64)


def build_index(
    folder: str, eval_sets: dict[str, list[str]], text_column: str, ngram: int, memory_budget: int, bad_eval_rows: str
) -> dict[str, Any]:
    """Build the index of ``eval_sets`` (benchmark -> files) into ``folder``; returns its ``_SUCCESS`` doc."""
    benchmarks = sorted(eval_sets)
    estimated = sum(
        storage.size(f) * (4 if f.endswith((".gz", ".zst")) else 1) for b in benchmarks for f in eval_sets[b]
    )
    parts = index_partitions(estimated // 5, memory_budget)  # about one n-gram per 5-6 bytes of text
    held: list[list[np.ndarray]] = [[] for _ in range(parts)]
    held_bytes, spills = 0, [[] for _ in range(parts)]
    bad: list[BadRow] = []
    counts: dict[str, dict[str, int]] = {}

    def flush() -> None:
        nonlocal held_bytes
        for p in range(parts):
            if held[p]:
                uri = storage.join(folder, "spill", f"part-{p:05d}-{len(spills[p]):05d}.npy")
                with storage.atomic_open(uri) as f:
                    np.save(f, np.unique(np.concatenate(held[p])))
                spills[p].append(uri)
                held[p] = []
        held_bytes = 0

    def add(texts: list[str], b: int) -> int:
        nonlocal held_bytes
        h = ngram_hashes([normalize(t) for t in texts], ngram)[0]
        # (hash, benchmark) rows: np.unique sorts them by hash, then benchmark
        keyed = np.empty(len(h), dtype=[("h", "<u8"), ("b", "<u2")])
        keyed["h"], keyed["b"] = h, b
        part = _part_of(h, parts)
        for p in np.unique(part):
            held[p].append(keyed[part == p])
        held_bytes += len(h) * ENTRY_BYTES
        if held_bytes > memory_budget:
            flush()
        return len(h)

    for b, bench in enumerate(benchmarks):
        rows = ngrams = 0
        texts: list[str] = []

        for path in eval_sets[bench]:
            for r in eval_rows(bench, path, text_column):
                if isinstance(r, BadRow):
                    if bad_eval_rows == "fail":
                        raise EvalSetError(
                            f"eval set {bench}: {r.file} {'line' if not path.endswith('.parquet') else 'row'} "
                            f"{r.position}: {r.reason}: {r.detail} (bad_eval_rows=skip quarantines such rows)"
                        )
                    bad.append(r)
                    continue
                rows += 1
                texts.append(r)
                if len(texts) >= _BATCH:
                    ngrams += add(texts, b)
                    texts = []
        if texts:
            ngrams += add(texts, b)
        if rows == 0:
            raise EvalSetError(f"eval set {bench}: no readable rows in {eval_sets[bench]}")
        counts[bench] = {"rows": rows, "ngrams": ngrams, "bad_rows": sum(r.benchmark == bench for r in bad)}

    files, entries = [], 0
    for p in range(parts):
        chunks = held[p]
        for u in spills[p]:
            with storage.open_read(u) as f:
                chunks.append(np.load(f))
        table = np.unique(np.concatenate(chunks)) if chunks else np.empty(0, dtype=[("h", "<u8"), ("b", "<u2")])
        entries += len(table)
        uri = storage.join(folder, f"part-{p:05d}.parquet")
        write_parquet(uri, pa.table({"hash": table["h"], "bench": table["b"]}))
        files.append(uri)
        held[p] = []
    for u in (u for s in spills for u in s):
        storage.remove(u)
    quarantine = None
    if bad:
        quarantine = storage.join(folder, "quarantine.parquet")
        cols = ("benchmark", "file", "position", "reason", "detail")
        write_parquet(quarantine, pa.table({c: [getattr(r, c) for r in bad] for c in cols}))
    # names relative to the folder: a copied or moved lake reads its own index
    rel = lambda u: u.rsplit("/", 1)[-1]  # noqa: E731
    doc = {
        "benchmarks": benchmarks,
        "partitions": parts,
        "ngram": ngram,
        "entries": entries,
        "counts": counts,
        "files": [rel(u) for u in files],
        "quarantine": rel(quarantine) if quarantine else None,
    }
    storage.write_json(storage.join(folder, "_SUCCESS.json"), doc)
    log.info("decontaminate: index of %d n-grams in %d partitions: %s", entries, parts, counts)
    return read_done(folder)


def read_done(folder: str) -> dict[str, Any] | None:
    uri = storage.join(folder, "_SUCCESS.json")
    if not storage.exists(uri):
        return None
    doc = storage.read_json(uri)
    res = lambda name: storage.join(folder, name)  # noqa: E731
    doc["files"] = [res(u) for u in doc["files"]]
    doc["quarantine"] = res(doc["quarantine"]) if doc.get("quarantine") else None
    return doc


class EvalIndex:
    """Probes the index: which hashes are evaluation n-grams, and of which benchmarks. Keeps the partitions
    it loaded while they fit ``memory_budget`` (a worker process probes many shards with one load)."""

    def __init__(self, doc: dict[str, Any], memory_budget: int) -> None:
        self.doc = doc
        self.benchmarks: list[str] = doc["benchmarks"]
        self.partitions = int(doc["partitions"])
        self.budget = memory_budget
        self._cache: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()

    def _part(self, p: int) -> tuple[np.ndarray, np.ndarray]:
        if p in self._cache:
            self._cache.move_to_end(p)
            return self._cache[p]
        t = storage.read_parquet(self.doc["files"][p])
        loaded = (t.column("hash").to_numpy(), t.column("bench").to_numpy())
        self._cache[p] = loaded
        while len(self._cache) > 1 and sum(len(h) for h, _ in self._cache.values()) * ENTRY_BYTES > self.budget:
            self._cache.popitem(last=False)
        return loaded

    def probe(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(query index, bench) of every (query, benchmark) pair that matches, query-ordered; and a hit mask."""
        q_idx, q_bench = [], []
        hit = np.zeros(len(hashes), bool)
        part = _part_of(hashes, self.partitions)
        for p in np.unique(part):
            sel = np.nonzero(part == p)[0]
            h, bench = self._part(int(p))
            if not len(h):
                continue
            q = hashes[sel]
            lo = np.searchsorted(h, q, "left")
            hi = np.searchsorted(h, q, "right")
            found = hi > lo
            if not found.any():
                continue
            sel, lo, hi = sel[found], lo[found], hi[found]
            hit[sel] = True
            n = hi - lo  # usually 1; more where benchmarks share an n-gram
            entry = np.repeat(lo - np.cumsum(n) + n, n) + np.arange(n.sum())
            q_idx.append(np.repeat(sel, n))
            q_bench.append(bench[entry])
        if not q_idx:
            return np.empty(0, np.int64), np.empty(0, np.uint16), hit
        qi, qb = np.concatenate(q_idx), np.concatenate(q_bench)
        order = np.lexsort((qb, qi))
        return qi[order], qb[order], hit
