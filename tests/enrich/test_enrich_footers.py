"""What an enrich unit opens (issue 20, a task reads only its slice): it records its attrs file's columns from
the table it wrote, never reading that file back, and opens each upstream decision file (keep,
is_duplicate) once. A tiny random Llama on the transformers runtime (the score task): no vLLM engine."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from enrich_helpers import make_docs, read_attrs, run_enrich, write_lake
from opened_files import footers_of, held_of, opens_of, record_opens

COMMON = {
    "task": "score",
    "model_runtime": "transformers",
    "dtype": "float32",
    "max_input_tokens": 40,
    "batch_size": 4,
    "checkpoint_rows": 4,
    "max_model_len": 256,
}


@pytest.mark.parametrize("recorded", [True, False], ids=["columns-recorded", "lake-from-before"])
def test_an_enrich_unit_does_not_read_back_what_it_wrote(tmp_path, llama_score, monkeypatch, recorded):
    docs = make_docs(12)
    lake, uri = write_lake(
        str(tmp_path),
        {"s0": docs[:6], "s1": docs[6:]},
        keep={"s0": {"d00001"}},
        duplicates={"s1": {"d00008"}},
        recorded=recorded,
    )
    opened = record_opens(monkeypatch)
    _, m = run_enrich(lake, uri, model=llama_score, **COMMON)
    monkeypatch.undo()
    assert len(m.shards) == 2 and {u.status for u in m.units} == {"done"}
    for s in m.shards:
        out = s.attrs["enrich-score"]
        assert not [f for f in opened if f.endswith(out)], opened  # written, never opened after
        # the columns recorded for the next plans are those of the file, as its footer has them
        assert s.attrs_columns["enrich-score"] == pq.read_schema(out).names
        assert {"id", "enriched", "skip_reason", "score"} <= set(s.attrs_columns["enrich-score"])
        # each decision file: read once, by the unit's check of its inputs, then parsed from those held bytes,
        # the columns it has from that parse's footer (an entry from before, with no columns nor checksum
        # recorded, has its footer read by the plan as before: only what it enriches is checked of it)
        for key in ("preprocess", "dedup") if recorded else ():
            counts = opens_of(opened, s.attrs[key]), held_of(opened, s.attrs[key]), footers_of(opened, s.attrs[key])
            assert counts == (1, 1, 1), (key, opened)
    reasons = {}
    for s in m.shards:
        attrs = read_attrs(s.attrs["enrich-score"])
        reasons[s.shard_id] = dict(zip(attrs.column("id").to_pylist(), attrs.column("skip_reason").to_pylist()))
    assert reasons["s0"]["d00001"] == "not_kept" and reasons["s1"]["d00008"] == "duplicate"
    assert sum(r is not None for rs in reasons.values() for r in rs.values()) == 2
