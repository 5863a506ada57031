"""``core/boilerplate.py``: lines as Arrow splits them, keys equal exactly for equal stripped lines, counts
once per document, summed across shards, removal that leaves other lines byte for byte."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

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


def test_the_at_scale_table_of_the_docs_is_what_the_stage_sizes():
    """docs/boilerplate.md *At scale*: each row's partitions and reads from the stage's own rule (its spill
    estimate, ``partitions_for`` at the default budget), 286 M documents a TB as in docs/scale.md."""
    import re
    from pathlib import Path

    from airflow_curation.core.lsh import partitions_for
    from airflow_curation.stages.boilerplate.stage import _SPILL_BYTES

    doc = (Path(__file__).resolve().parents[2] / "docs" / "boilerplate.md").read_text()
    rows = re.findall(r"^\| ([\d.]+) (GB|TB) \| .*? \| ([\d,]+)(?: \(the cap\))? \| ([\d.]+) (k|M) \|", doc, re.M)
    assert len(rows) == 4
    for size, unit, parts, reads, scale in rows:
        tb = float(size) / (1000 if unit == "GB" else 1)
        want = partitions_for(int(tb * 286e6 * 64 * _SPILL_BYTES), 512 << 20)
        assert int(parts.replace(",", "")) == want
        shards = round(tb * 1000)
        assert float(reads) * (1e3 if scale == "k" else 1e6) == pytest.approx(want * shards, rel=0.05)
