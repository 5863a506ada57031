"""A NaN signal is filtered as DuckDB orders it (above every number) in the views declared checks query: a
Parquet file's min/max statistics leave NaN out, and DuckDB 2.0.1 reading them with their defaults folded
`x < 1.0` to true over a row group holding NaN (duckdb/duckdb#25521). Real DuckDB and Daft, real files."""

from __future__ import annotations

import math

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_curation.core.manifest import Manifest
from airflow_curation.stages.validate.query_engines import make_engine
from airflow_curation.stages.validate.view import CuratedView

from .synth import build_run, record_checksums

FILTERS = ["alpha_ratio < 1.0", "alpha_ratio <= 0.99", "alpha_ratio BETWEEN 0 AND 1"]
DUCKDB_ONLY = ["NOT isnan(alpha_ratio)"]  # Daft's SQL has no isnan


@pytest.fixture(scope="module")
def nan_lake(tmp_path_factory):
    """One shard whose preprocess attrs hold NaN in alpha_ratio on every third row (in every row group). One
    file, as a one-shard lake or a view read by column name has: DuckDB folded the filter away over those (over
    two files of one schema it happened not to)."""
    root = str(tmp_path_factory.mktemp("nanlake"))
    uris = build_run(root, shards=1, rows=180)
    tables = []
    for s in Manifest.read(uris["dedup"]).shards:
        uri = s.attrs["preprocess"]
        t = pq.read_table(uri)
        ratio = [math.nan if i % 3 == 0 else v for i, v in enumerate(t.column("alpha_ratio").to_pylist())]
        t = t.set_column(t.schema.get_field_index("alpha_ratio"), "alpha_ratio", pa.array(ratio, pa.float64()))
        pq.write_table(t, uri, row_group_size=64)
        tables.append(t)
    record_checksums(uris)
    return uris, pa.concat_tables(tables)


@pytest.mark.parametrize("engine_name", ["duckdb", "daft"])
def test_range_filters_over_a_nan_signal_count_as_over_the_rows(nan_lake, engine_name):
    uris, rows = nan_lake
    truth = duckdb.connect()
    truth.register("rows", rows)  # an Arrow table: no Parquet statistics between DuckDB and the values
    eng = make_engine(CuratedView.from_manifest(Manifest.read(uris["dedup"])), {"query_engine": engine_name})
    try:
        for f in FILTERS + (DUCKDB_ONLY if engine_name == "duckdb" else []):
            want = truth.execute(f"SELECT count(*) FROM rows WHERE {f}").fetchone()[0]
            got = eng.sql(f"SELECT count(*) FROM attrs_preprocess WHERE {f}")[0]
            assert got == want, (engine_name, f)
            assert want == 120  # the 180 rows less the 60 NaN
    finally:
        eng.close()
