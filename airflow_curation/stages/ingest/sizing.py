"""How big ingest's units are, and how far through its input a unit is.

``target_shard_bytes`` is compressed output, input files are raw bytes, and JSONL text compresses ~3.3x
into zstd Parquet: units sized in input bytes made every shard a fraction of the target, and a unit's
last shard a sliver. So units are sized in *expected output* (input bytes / an expected ratio per file
kind) and hold a whole number of target shards, never less than :data:`MIN_UNIT_OUTPUT_BYTES` of work;
the unit's writer rolls shards at the target and, knowing how far through the unit it is
(:class:`UnitProgress`), lets a small rest join the last shard (``core.shards.ShardWriter``). The ratios
only decide where units end; shard sizes follow the data's real ratio as the writer measures it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from airflow_curation.stages.ingest.readers import detect

# Input bytes per byte of zstd Parquet output, by what the file holds. Plain JSONL / text: 3.3 measured on
# benchmarks/bench_ingest.py's data (real prose and code, bench_ingest_sizing), more for plainer prose;
# compressed input (.gz/.zst) and Parquet are compressed already. An error here moves where units end, not
# shard sizes (the writer follows the real ratio).
RATIO = {"plain": 3.5, "compressed": 1.0, "parquet": 1.0}
# A unit does at least this much output (~235 MB of JSONL, ~2.7 CPU-s at ingest's ~88 MB per CPU-s): more
# than a stage process's fixed cost (0.8-2 CPU-s), so a small target packs several shards in one unit.
MIN_UNIT_OUTPUT_BYTES = 64 * 1024 * 1024
MAX_FILES_PER_UNIT = 100_000  # bounds one unit's input list (its manifest entry, its retry)


def expected_output(url: str, size: int, fmt: str = "auto") -> float:
    """Output bytes a file of ``size`` input bytes is expected to give."""
    kind, compression = detect(url, fmt)
    if kind == "parquet":
        return size / RATIO["parquet"]
    return size / RATIO["compressed" if compression else "plain"]


def unit_output_bytes(target: int) -> int:
    """Expected output of one unit: a whole number of target shards, at least MIN_UNIT_OUTPUT_BYTES."""
    return max(1, math.ceil(MIN_UNIT_OUTPUT_BYTES / max(1, target))) * target


def group_files(
    files: list[tuple[str, dict]], target: int, unit_bytes: int | None = None, fmt: str = "auto", min_units: int = 1
) -> list[list[tuple[str, dict]]]:
    """Consecutive files grouped into units. ``unit_bytes`` (input bytes) when given; else by expected
    output, ``unit_output_bytes(target)`` a unit, a last group under half a shard joining the one before.

    :param min_units: without ``unit_bytes``, units are made small enough that there are at least this many
        where there are that many files (an array of N tasks then has a unit for each): a small input would
        else be one unit, and the array nothing to split."""
    groups: list[list[tuple[str, dict]]] = []
    group: list[tuple[str, dict]] = []
    amount = 0.0
    limit = unit_bytes if unit_bytes else unit_output_bytes(target)
    need = 0 if unit_bytes else min(min_units, len(files))
    if need > 1:
        total = sum(expected_output(u, int(i.get("size") or 0), fmt) for u, i in files)
        limit = min(limit, total / need)
    for n, (url, info) in enumerate(files, 1):
        size = int(info.get("size") or 0)
        group.append((url, info))
        amount += size if unit_bytes else expected_output(url, size, fmt)
        # The files left must still make the units min_units asks for.
        short = len(files) - n <= need - len(groups) - 1
        if amount >= limit or len(group) >= MAX_FILES_PER_UNIT or short:
            groups.append(group)
            group, amount = [], 0.0
    if group:
        keeps_count = len(groups) >= need  # joining must not undo min_units
        if (
            groups
            and not unit_bytes
            and keeps_count
            and amount < target / 2
            and len(groups[-1]) + len(group) <= MAX_FILES_PER_UNIT
        ):
            groups[-1].extend(group)
        else:
            groups.append(group)
    return groups


class UnitProgress:
    """The fraction of a unit's input bytes read so far: files done, plus the share of the current one
    its reader reports (bytes through the file, or rows through a Parquet file)."""

    def __init__(self, sizes: list[int]) -> None:
        self.total = sum(sizes)
        self._done = 0
        self._size = 0
        self._where: Callable[[], float] | None = None

    def start(self, size: int, where: Callable[[], float] | None) -> None:
        """A file of ``size`` bytes begins; ``where()`` says how far through it (0..1) the reader is."""
        self._size, self._where = size, where

    def follow(self, where: Callable[[], float] | None) -> None:
        """The current file's share is told another way from now on (rows rather than bytes)."""
        self._where = where

    def finish(self) -> None:
        self._done += self._size
        self._size, self._where = 0, None

    def __call__(self) -> float | None:
        if self.total <= 0:
            return None
        part = 0.0
        if self._where is not None:
            try:
                part = min(max(self._where(), 0.0), 1.0)
            except (OSError, ValueError):  # a closed or unseekable file: count none of it yet
                part = 0.0
        return min((self._done + part * self._size) / self.total, 1.0)
