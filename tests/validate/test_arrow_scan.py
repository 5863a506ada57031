"""The Arrow/numpy selection scan gives DuckDB's own statistics, bit for bit, on awkward columns."""

from __future__ import annotations

import math

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_curation.stages.validate import bounded

AWKWARD = [0.0, -0.0, 1.0, -1.0, 0.1, 1e-300, -5e-324, 5e-324, 1.7976931348623157e308, -1e308, 3.0, 3.0]
values = st.lists(
    st.one_of(
        st.none(),
        st.sampled_from(AWKWARD + [math.nan, math.inf, -math.inf]),
        st.floats(allow_nan=True, allow_infinity=True),
        st.floats(min_value=-10, max_value=10),
    ),
    min_size=0,
    max_size=120,
)


def _write(tmp, cols: dict[str, list], split: int) -> list[str]:
    """The columns as two Parquet files (the second lacking column ``i``), as an attrs relation is."""
    t = pa.table({k: pa.array(v, pa.int64() if k == "i" else pa.float64()) for k, v in cols.items()})
    a, b = f"{tmp}/a.parquet", f"{tmp}/b.parquet"
    pq.write_table(t.slice(0, split), a, row_group_size=7)  # several row groups and record batches
    pq.write_table(t.slice(split).drop_columns(["i"]), b)
    return [a, b]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(x=values, y=values, ints=st.lists(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), max_size=120))
def test_arrow_scan_equals_duckdb_quantile_cont(tmp_path, x, y, ints):
    n = max(len(x), len(y), len(ints), 1)
    cols = {k: v + [None] * (n - len(v)) for k, v in (("x", x), ("y", y), ("i", ints))}
    files = _write(tmp_path, cols, n // 2)
    con = duckdb.connect()
    run = lambda sql: con.execute(sql).fetchall()  # noqa: E731
    rel = f"read_parquet({[str(f) for f in files]}, union_by_name = true)"
    qs = "[" + ", ".join(str(q) for q in bounded.QUANTILES) + "]"
    # tiny bins and fetches: several selection steps; budget 0: every column by selection
    for bins, fetch_max in ((64, 5), (bounded.SELECT_BINS, bounded.FETCH_MAX)):
        pairs = [("x", "x"), ("y", "y"), ("i", "i")]
        kw = {"bins": bins, "fetch_max": fetch_max, "values_per_query": 0}
        try:
            ref = bounded.column_stats(run, [rel], pairs, **kw)
        except RuntimeError as e:  # the selection's own limit (bins that stop nesting at 2**52 spans): same
            with pytest.raises(RuntimeError, match="quantile selection"):
                bounded.column_stats(run, [rel], pairs, **kw, files=files)
            assert "quantile selection" in str(e)
            continue
        got = bounded.column_stats(run, [rel], pairs, **kw, files=files)
        for c in ("x", "y", "i"):
            want = con.execute(f"SELECT quantile_cont({c}::DOUBLE, {qs}) FROM {rel}").fetchone()[0]
            mine = [got[c][f"p{int(round(q * 100)):02d}"] for q in bounded.QUANTILES]
            if want is None:
                assert mine == [None] * len(bounded.QUANTILES)
            else:  # bit for bit; -0.0 and 0.0 tie, and either may stand at a rank
                assert [repr(abs(v)) if v == 0 else repr(v) for v in mine] == [
                    repr(abs(v)) if v == 0 else repr(v) for v in want
                ], (c, bins)
            assert got[c]["hist"] == ref[c]["hist"], c  # the DuckDB scan's histogram, count for count
            assert sum(got[c]["hist"]["counts"]) in (0, got[c]["count"])
