"""Which rows upstream stages kept (``stages/kept.py``): each attrs file is opened once per shard, its footer
and its decision columns from that one open, and a file not row for row with the shard is refused."""

from __future__ import annotations

import pyarrow as pa
import pytest
from opened_files import footers_of, opens_of, record_opens

from airflow_curation.core.shards import write_parquet
from airflow_curation.stages.kept import DUPLICATE, NOT_KEPT, skip_reasons

IDS = [f"d{i}" for i in range(6)]


@pytest.fixture
def files(tmp_path):
    """A keep file (with another column the reader leaves alone) and an is_duplicate file for IDS."""
    keep = str(tmp_path / "preprocess.parquet")
    write_parquet(keep, pa.table({"id": IDS, "keep": [True, False, True, None, True, True], "score": [0.5] * 6}))
    dup = str(tmp_path / "dedup.parquet")
    write_parquet(dup, pa.table({"id": IDS, "is_duplicate": [False, True, True, False, False, True]}))
    return keep, dup


def test_each_attrs_file_is_opened_once(files, monkeypatch):
    opened = record_opens(monkeypatch)
    reasons = skip_reasons("s0", pa.array(IDS), list(files))
    monkeypatch.undo()
    # not kept wins over duplicate (pipeline order); a null keep is no decision
    assert reasons.tolist() == [None, NOT_KEPT, DUPLICATE, None, None, DUPLICATE]
    for uri in files:
        assert (opens_of(opened, uri), footers_of(opened, uri)) == (1, 1), opened
    assert len(opened) == 4  # nothing else


@pytest.mark.parametrize(
    "ids, problem",
    [
        (list(reversed(IDS)), "do not match shard s0 row for row"),  # the shard's ids in another order
        (IDS[:-1], "do not match shard s0 row for row"),  # a row short
        (None, "have no 'id' column"),
    ],
)
def test_attrs_not_row_for_row_with_the_shard_are_refused(tmp_path, files, ids, problem):
    bad = str(tmp_path / "bad.parquet")
    n = len(ids) if ids is not None else len(IDS)
    write_parquet(bad, pa.table({**({"id": ids} if ids is not None else {}), "keep": [True] * n}))
    with pytest.raises(ValueError, match=problem) as e:
        skip_reasons("s0", pa.chunked_array([IDS[:3], IDS[3:]]), [files[0], bad])
    assert bad in str(e.value)
