"""Property: whatever the row sizes, target and row-group settings, the shard writer keeps every row
once, in order, and its entries describe the files exactly."""

import tempfile

import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_curation.core.schema import SHARD_SCHEMA
from airflow_curation.core.shards import ShardWriter, read_shard


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    texts=st.lists(st.text(min_size=0, max_size=300), min_size=0, max_size=120),
    target=st.integers(min_value=1, max_value=20_000),
    rg_rows=st.integers(min_value=1, max_value=50),
    rg_bytes=st.integers(min_value=1, max_value=5_000),
)
def test_every_row_once_in_order(texts, target, rg_rows, rg_bytes):
    with tempfile.TemporaryDirectory() as d:
        w = ShardWriter(
            d,
            lambda k: f"s-{k:04d}",
            SHARD_SCHEMA,
            target_bytes=target,
            row_group_rows=rg_rows,
            row_group_bytes=rg_bytes,
        )
        for i, t in enumerate(texts):
            w.write({"id": str(i), "text": t, "source": "x", "meta": None}, nbytes=len(t.encode()))
        shards = w.close()
        got_ids, got_texts = [], []
        for k, s in enumerate(shards):
            assert s.shard_id == f"s-{k:04d}" and s.rows > 0
            t = read_shard(s.uri)
            assert t.num_rows == s.rows
            md = pq.ParquetFile(s.uri).metadata
            assert all(md.row_group(g).num_rows <= rg_rows for g in range(md.num_row_groups))
            got_ids += t.column("id").to_pylist()
            got_texts += t.column("text").to_pylist()
        assert got_ids == [str(i) for i in range(len(texts))]
        assert got_texts == texts
        assert all(s.bytes >= target for s in shards[:-1])
