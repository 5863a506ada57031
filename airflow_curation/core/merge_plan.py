"""The shape of a two-pass shuffle's middle pass: how many consecutive readers' ranges a chunk holds and how many
writers' files a group merges, so that the reads of the merge plus the readers' are fewest within one merge
unit's memory.

Without it every reader of a range of partitions opens every writer's file: readers x writers reads, and both
grow with the corpus, so the reads grow with its square. With it, a merge unit reads one chunk of its group's
files (one ranged read each) and writes one file; a reader then opens one merged file a group. Used by export's
gather, boilerplate's global step and the dedup components' star steps; derived and measured in
docs/export.md (``benchmarks/bench_export_merge.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from airflow_curation.core import storage
from airflow_curation.core.lsh import SPILL_SUFFIX, merge_partitions

# What a merge unit holds per byte of its range: the pieces read, each bucket's concatenation while it is
# streamed to the file. Measured (benchmarks/bench_export_merge.py): 8 spill files of 64 MB, half their
# buckets (263 MB decoded): the RSS grew 1.26x (3.2x while the file was built in memory before its write).
MERGE_EXPANSION = 2
# Where the middle pass pays for writing the tokens once more: the gather's reads are many and small. Measured
# (benchmarks/bench_export_merge.py, 3,660 reads of ~2.7 KB): the pass won 3.1x on an S3 lake (~14 ms of
# client CPU a read) and 1.2x on a local one; ~1,000 reads cost seconds (tens one by one on an object store),
# not worth the pass's files and manifests; past a few MiB a read's fixed cost is lost in its bytes.
MERGE_MIN_READS = 1_000
MERGE_MAX_READ = 4 << 20


def merge_plan(
    units: int, shards: int, total: int, budget: int, force: bool = False, largest: int = 0
) -> tuple[int, int] | None:
    """``(gather units per chunk, shards per group)`` that minimise the reads of merge plus gather, or None
    where the middle pass does not pay: the gather's ``units x shards`` reads are fewer than
    :data:`MERGE_MIN_READS` or larger than :data:`MERGE_MAX_READ` on average, or merging would not at least
    halve them (``force``: merge anyway, as long as a group holds two shards).

    :param units: the gather units (consecutive ranges of buckets).
    :param shards: the spill files (packed shards).
    :param total: the tokens' bytes.
    :param budget: the memory of one merge unit.
    :param largest: the tokens' bytes of the largest spill file: groups are sized as if every file were that
        large (a group of large shards would pass the budget otherwise); 0: ``total / shards``, the mean.
    """
    if units < 1 or shards < 2:
        return None
    if not force and (units * shards < MERGE_MIN_READS or total / (units * shards) > MERGE_MAX_READ):
        return None
    best: tuple[int, int, int] | None = None  # (reads, k, g)
    for k in range(1, units + 1):
        chunks = math.ceil(units / k)
        one_shard_chunk = max(1.0, max(total / shards, largest) * k / units)  # a chunk's bytes in one spill file
        g = min(shards, int(budget // (MERGE_EXPANSION * one_shard_chunk)))
        if g < 2:  # not even two files of this chunk fit the budget
            continue
        reads = chunks * shards + units * math.ceil(shards / g)
        if best is None or reads < best[0]:
            best = (reads, k, g)
    if best is None:
        # ``force`` where no shape fits: chunks of one gather unit, groups of two files (a gather unit reads
        # that range of every file, so two of them are within its budget); a forced shape never chose larger
        # chunks past the budget for their fewer reads.
        return (1, 2) if force else None
    if not force and 2 * best[0] > units * shards:
        return None
    return best[1], best[2]


class MiddlePass(NamedTuple):
    """A middle pass done: ``files[c][j]`` is chunk ``c`` (``chunk`` consecutive readers' ranges) of group ``j``'s
    files merged into one; reader ``r`` reads its range from ``files[r // chunk]``, one file a group."""

    chunk: int
    files: list[list[str]]
    group: int
    reads: int
    rows: int

    def inputs(self, reader: int) -> list[str]:
        return self.files[reader // self.chunk]


def middle_pass(
    files: list[str],
    spans: list[tuple[int, int]],
    total: int,
    budget: int,
    folder: str,
    mapper: Callable[[Callable[..., Any], Iterable[tuple]], Iterator[Any]],
    force: bool = False,
    merge: Callable[[list[str], int, int, str], int] = merge_partitions,
) -> MiddlePass | None:
    """Where :func:`merge_plan` says it pays (or ``force``), the partitioned spill ``files`` merged by chunk of
    readers and group of files, under ``folder/<chunk>x<group>/`` (a shape of its own, so a file of another
    shape is never read), or None.

    :param spans: each reader's partition range ``[lo, hi)``, contiguous and ascending.
    :param total: the files' decoded bytes (what sizes a group to ``budget``).
    :param mapper: runs the merge units (``merge(group's files, lo, hi, out uri)``, returning rows).
    :returns: the merged files and the reads of merge plus readers (each a (file, range) open).
    """
    shape = merge_plan(len(spans), len(files), total, budget, force)
    if shape is None:
        return None
    k, g = shape
    chunks = [(spans[c][0], spans[min(c + k, len(spans)) - 1][1]) for c in range(0, len(spans), k)]
    groups = [files[i : i + g] for i in range(0, len(files), g)]
    merged = [
        [storage.join(folder, f"{k}x{g}", f"c{c:05d}-g{j:05d}{SPILL_SUFFIX}") for j in range(len(groups))]
        for c in range(len(chunks))
    ]
    jobs = [(groups[j], lo, hi, merged[c][j]) for c, (lo, hi) in enumerate(chunks) for j in range(len(groups))]
    rows = sum(mapper(merge, jobs))
    return MiddlePass(k, merged, g, len(chunks) * len(files) + len(spans) * len(groups), rows)
