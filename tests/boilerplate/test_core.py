"""``core/boilerplate.py``: lines as Arrow splits them, keys equal exactly for equal stripped lines, counts
once per document, summed across shards, removal that leaves other lines byte for byte."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from airflow_curation.core.boilerplate import (
    document_line_counts,
    line_keys,
    remove_lines,
    split_lines,
    sum_counts,
    sum_counts_in_place,
)

TEXTS = [
    "Home | About\nFirst page's prose.\n\n  Footer (c) 2024  ",
    "Home | About\nSecond page, a line said twice.\nSecond page, a line said twice.\nFooter (c) 2024",
    None,
    "",
    "ça été\r\nnon-ASCII, and a CR before the newline",
]


def test_lines_are_those_arrow_splits_on_newline():
    arr = pa.array(TEXTS, pa.string())
    lines, doc = split_lines(arr.slice(1))  # an offset into the buffers too
    expected = pc.split_pattern(pc.fill_null(arr.slice(1), ""), "\n")
    assert lines.cast(pa.string()).to_pylist() == expected.flatten().to_pylist()
    assert doc.tolist() == np.repeat(np.arange(4), pc.list_value_length(expected).to_numpy()).tolist()


def test_keys_are_equal_exactly_for_equal_stripped_lines():
    lines = pa.array(["Footer (c) 2024", "  Footer (c) 2024\t", "Footer (c) 2025", "", "   ", "ça", "ca"])
    keys, has_key = line_keys(lines)
    assert has_key.tolist() == [True, True, True, False, False, True, True]
    assert keys[0] == keys[1] and len({int(k) for k in keys[[0, 2, 5, 6]]}) == 4


def test_counts_are_documents_and_sum_across_shards():
    a_keys, a_docs, stats = document_line_counts([pa.array(TEXTS[:2]), pa.array(TEXTS[2:])])
    assert stats == {"documents": 5, "lines": 9, "distinct_lines": 6}
    by_key = dict(zip(a_keys.tolist(), a_docs.tolist()))
    home, said = line_keys(pa.array(["Home | About", "Second page, a line said twice."]))[0].tolist()
    assert by_key[home] == 2 and by_key[said] == 1  # said twice by one document: one document
    keys, docs = sum_counts(np.concatenate([a_keys, a_keys]), np.concatenate([a_docs, a_docs]))
    assert keys.tolist() == sorted(by_key) and docs.tolist() == [2 * by_key[k] for k in keys.tolist()]


def _summed_by_numpy(keys: np.ndarray, docs: np.ndarray) -> tuple[list[int], list[int]]:
    unique, inverse = np.unique(keys, return_inverse=True)
    return unique.tolist(), np.bincount(inverse, weights=docs.astype(np.float64), minlength=len(unique)).astype(
        np.uint64
    ).tolist()


@pytest.mark.parametrize(
    "case", ["empty", "one", "distinct", "few_keys", "one_key", "ascending", "descending", "sawtooth", "small_runs"]
)
def test_sums_in_place_as_numpy_does(case):
    """The in-place sum (a quicksort of the pairs, then equal keys folded) gives numpy's unique keys and summed
    counts on every shape a partition takes: distinct keys, one line repeated across every pair (a footer on
    every page: a partition of equal keys must not go quadratic or overflow its stack), sorted either way,
    runs of equal keys, and the extreme key values."""
    rng = np.random.default_rng(7)
    n = 200_003
    keys = {
        "empty": np.empty(0, np.uint64),
        "one": np.array([2**64 - 1], np.uint64),
        "distinct": rng.integers(0, 2**64, n, dtype=np.uint64, endpoint=False),
        "few_keys": rng.choice(np.array([0, 1, 2**63, 2**64 - 1], np.uint64), n),
        "one_key": np.full(n, 12345, np.uint64),
        "ascending": np.arange(n, dtype=np.uint64) * np.uint64(3),
        "descending": np.arange(n, 0, -1, dtype=np.uint64),
        "sawtooth": np.arange(n, dtype=np.uint64) % np.uint64(1000),
        "small_runs": np.repeat(rng.integers(0, 2**64, n // 7, dtype=np.uint64, endpoint=False), 7),
    }[case]
    docs = rng.integers(1, 1000, len(keys)).astype(np.uint64)
    expected = _summed_by_numpy(keys, docs)
    k, d = keys.copy(), docs.copy()
    m = sum_counts_in_place(k, d)
    assert (k[:m].tolist(), d[:m].tolist()) == expected
    again = sum_counts(keys, docs)
    assert (again[0].tolist(), again[1].tolist()) == expected
    assert int(d[:m].sum()) == int(docs.sum())  # every count in one sum, none lost or counted twice


def test_a_partition_is_summed_in_the_arrays_it_was_read_into(tmp_path):
    """The global step's memory for a partition is its pairs, not a sorted copy of them beside an index: by
    tracemalloc (numpy's allocations), reading and summing a partition of (key, count) pairs from 8 spill files
    allocates < 1.5x the pairs' 16 bytes (the code before: ~3x, an argsort index and gathered keys and counts
    beside the concatenated columns, and each narrowed column widened once more while concatenated)."""
    import tracemalloc

    from airflow_curation.core.lsh import write_partitioned
    from airflow_curation.stages.boilerplate.stage import merge_partitions

    rng = np.random.default_rng(3)
    shared = rng.integers(1, 2**63, 1_000, dtype=np.uint64)
    spills, pairs = [], 0
    for s in range(8):
        keys = np.concatenate([shared, rng.integers(1, 2**63, 49_000, dtype=np.uint64)])
        docs = rng.integers(1, 3, len(keys)).astype(np.uint64)  # narrowed to 32 bits in the file, as real counts
        docs[: len(shared)] = 2  # the shared lines: 16 documents in all, past min_documents
        spills.append(str(tmp_path / f"s{s}.arrow"))
        write_partitioned(spills[-1], {"key": keys, "docs": docs}, np.zeros(len(keys), np.int64))
        pairs += len(keys)
    merge_partitions(0, 1, spills[:1], 10, str(tmp_path / "warm.arrow"))  # kernels loaded outside the count
    tracemalloc.start()
    try:
        stats = merge_partitions(0, 1, spills, 10, str(tmp_path / "frequent.arrow"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert stats["frequent_lines"] == 1_000 and stats["distinct_lines"] == 1_000 + 8 * 49_000
    assert peak < 1.5 * 16 * pairs, f"{peak / pairs:.1f} bytes a pair"


def test_removal_keeps_every_other_line_as_it_was():
    keys, docs, _ = document_line_counts([pa.array(TEXTS)])
    clean, removed = remove_lines(pa.array(TEXTS), np.sort(keys[docs >= 2]))
    assert clean.to_pylist() == [
        "First page's prose.\n",
        "Second page, a line said twice.\nSecond page, a line said twice.",
        None,
        "",
        TEXTS[4],
    ]
    assert removed.tolist() == [2, 2, 0, 0, 0]
    untouched, none = remove_lines(pa.chunked_array([pa.array(TEXTS)]), np.empty(0, np.uint64))
    assert untouched.to_pylist() == TEXTS and none.tolist() == [0] * 5


def _count(n: float) -> str:
    for scale, suffix in ((1e9, " G"), (1e6, " M"), (1e3, " k")):
        if n >= scale:
            return f"{n / scale:.3g}{suffix}"
    return f"{n:,.0f}"


def at_scale_rows() -> list[str]:
    """docs/boilerplate.md *At scale*, row by row, from the stage's own rules: its spill estimate, the partitions
    that fit ``memory_budget`` (each ``PARTITION_EXPANSION`` times its pairs while summed, up to
    ``MAX_PARTITIONS``), the middle pass's shape (``merge_plan``) and the global step's reads (``spill_reads``);
    286 M documents a TB and 1 GB shards, as in docs/scale.md."""
    from airflow_curation.core.lsh import partitions_for
    from airflow_curation.core.merge_plan import merge_plan
    from airflow_curation.stages.boilerplate.stage import (
        MAX_PARTITIONS,
        PARTITION_EXPANSION,
        spill_estimate,
        spill_reads,
    )

    rows = []
    for tb, budget in ((0.1, 512 << 20), (1, 512 << 20), (10, 512 << 20), (50, 512 << 20), (50, 2 << 30)):
        shards, est = round(tb * 1000), spill_estimate(int(tb * 286e6))
        parts = partitions_for(est, budget, PARTITION_EXPANSION, maximum=MAX_PARTITIONS)
        k, g = merge_plan(parts, shards, est, budget)
        size = f"{tb * 1000:.0f} GB" if tb < 1 else f"{tb:g} TB"
        cap = " (the cap)" if parts == MAX_PARTITIONS else ""
        rows.append(
            f"| {size} | {budget >> 20:,} MiB | {est / 1e12:.2f} TB | {parts:,}{cap} | {est / parts / 1e6:.0f} MB | "
            f"{_count(spill_reads(parts, shards))} | {_count(spill_reads(parts, shards, k, -(-shards // g)))} "
            f"({-(-parts // k):,} chunks x {-(-shards // g):,} groups) |"
        )
    return rows


def test_the_at_scale_table_of_the_docs_is_what_the_stage_sizes():
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "boilerplate.md").read_text()
    table = [line for line in doc.splitlines() if re.match(r"\| [\d.]+ (GB|TB) \| [\d,]+ MiB \|", line)]
    assert table == at_scale_rows()
