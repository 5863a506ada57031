"""The split run's merge counts keys a partition at a time across every task's key file, on one thread or many."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from airflow_curation.stages.validate import partials


def _key_files(tmp_path, tasks: int, rows: int, parts: int) -> tuple[list[str], list[str]]:
    """Key files as the tasks write them (``__p``, then ``key``, sorted by ``__p``), an id in several tasks' files
    now and then; and every key written, in order."""
    rng = np.random.default_rng(7)
    uris, every = [], []
    for t in range(tasks):
        ids = [f"doc-{k}" for k in rng.integers(0, rows // 2, rows)]  # repeats within and across files
        p = np.array([hash(k) % parts for k in ids], np.uint64)
        order = np.argsort(p, kind="stable")
        table = pa.table({"__p": p[order], "key": pa.array(ids).take(pa.array(order))})
        uris.append(str(tmp_path / f"t{t}.parquet"))
        pq.write_table(table, uris[-1], row_group_size=997)  # partitions cross row groups
        every += ids
    return uris, every


def test_keys_counted_by_threads_give_the_one_thread_counts_and_pythons(tmp_path):
    uris, every = _key_files(tmp_path, tasks=5, rows=6_000, parts=37)
    counts = Counter(every)
    sizes = dict(sorted(Counter(counts.values()).items()))
    for threads in (1, 2, 8):
        assert partials.distinct_ids(uris, threads) == len(counts)
        got = partials.cluster_sizes(uris, threads)
        assert got == {"clusters": len(counts), "sizes": sizes, "largest": max(sizes)}


def test_partitions_come_in_order_whatever_the_threads(tmp_path):
    uris, _ = _key_files(tmp_path, tasks=3, rows=3_000, parts=50)
    # each partition's keys as a sorted list: the results in partition order, whatever finished first
    each = lambda keys: sorted(keys.to_pylist())  # noqa: E731
    seen = [list(partials.by_partition(uris, each, t)) for t in (1, 4)]
    assert seen[0] == seen[1] and len(seen[0]) == 50 and sum(map(len, seen[0])) == 9_000
