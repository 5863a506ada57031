"""The batch normalisation that MinHash and exact keys share: Python's NFKC + lower on exactly the lines
that need it, whatever their number (the line list grows past its first allocation)."""

from __future__ import annotations

import unicodedata

import pyarrow as pa
import pytest

from airflow_curation.core.minhash import prepare


def _python(text: str) -> str:
    return unicodedata.normalize("NFKC", text).lower()


@pytest.mark.parametrize("lines", [1, 40, 500])
def test_many_lines_needing_python_in_one_document(lines):
    # every other line holds a ligature and a fullwidth letter (NFKC changes both), the rest plain ASCII
    doc = "\n".join(f"Line {i}: ﬁle Ｗord ΣΟΦΙΑ" if i % 2 else f"Plain line {i} Here" for i in range(lines))
    texts = ["", "ASCII Only", doc, "x\n\nＡ\n", None, doc[: len(doc) // 2]]
    got = prepare(pa.array(texts)).to_pylist()
    want = [_python(t or "") for t in texts]
    # prepare leaves safe lines to the kernels' per-character lowercase: compare after lowering them too
    assert [g.lower() for g in got] == want
    assert got[2].count("\n") == doc.count("\n")
