"""``core/boilerplate.py``: lines as Arrow splits them, keys equal exactly for equal stripped lines, counts
once per document, summed across shards, removal that leaves other lines byte for byte."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_curation.core.boilerplate import document_line_counts, line_keys, remove_lines, split_lines, sum_counts

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
    that fit ``memory_budget`` (up to ``MAX_PARTITIONS``), the middle pass's shape (``merge_plan``) and the
    global step's reads (``spill_reads``); 286 M documents a TB and 1 GB shards, as in docs/scale.md."""
    from airflow_curation.core.lsh import partitions_for
    from airflow_curation.core.merge_plan import merge_plan
    from airflow_curation.stages.boilerplate.stage import MAX_PARTITIONS, spill_estimate, spill_reads

    rows = []
    for tb, budget in ((0.1, 512 << 20), (1, 512 << 20), (10, 512 << 20), (50, 512 << 20), (50, 2 << 30)):
        shards, est = round(tb * 1000), spill_estimate(int(tb * 286e6))
        parts = partitions_for(est, budget, maximum=MAX_PARTITIONS)
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
