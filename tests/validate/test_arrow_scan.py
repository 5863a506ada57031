"""The Arrow/numpy selection scan gives DuckDB's own statistics, bit for bit, on awkward columns."""

from __future__ import annotations

import json
import math

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_curation.stages.validate import bounded

AWKWARD = [0.0, -0.0, 1.0, -1.0, 0.1, 1e-300, -5e-324, 5e-324, 1.7976931348623157e308, -1e308, 3.0, 3.0]
# subnormals, the least normal, spans past the largest double, 2^52 and its neighbours
AWKWARD += [1e-323, 2.2250738585072014e-308, -1.7976931348623157e308, 2.0**52, 2.0**52 + 1, 2.0**52 - 0.5]

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
        ref = bounded.column_stats(run, [rel], pairs, **kw)
        got = bounded.column_stats(run, [rel], pairs, **kw, files=files)
        # the files read by threads, each its own run of them (here one file each): the same statistics
        threaded = bounded.column_stats(run, [rel], pairs, **kw, files=files, threads=4)
        assert json.dumps(threaded, default=repr) == json.dumps(got, default=repr)
        for c in ("x", "y", "i"):
            want = con.execute(f"SELECT quantile_cont({c}::DOUBLE, {qs}) FROM {rel}").fetchone()[0]
            mine = [got[c][f"p{int(round(q * 100)):02d}"] for q in bounded.QUANTILES]
            if want is None:
                assert mine == [None] * len(bounded.QUANTILES)
            else:  # bit for bit; -0.0 and 0.0 tie, and either may stand at a rank
                assert [repr(abs(v)) if v == 0 else repr(v) for v in mine] == [
                    repr(abs(v)) if v == 0 else repr(v) for v in want
                ], (c, bins)
            # the DuckDB scan's histogram, count for count (as JSON: an edge past the largest double is NaN)
            assert json.dumps(got[c]["hist"]) == json.dumps(ref[c]["hist"]), c
            assert sum(got[c]["hist"]["counts"]) in (0, got[c]["count"])


def _same(a, b) -> bool:
    """Equal statistics: NaN equals NaN, and -0.0 equals 0.0 (either may stand at a rank)."""
    norm = lambda v: repr(abs(v)) if isinstance(v, float) and v == 0 else repr(v)  # noqa: E731
    return json.dumps(a, sort_keys=True, default=norm) == json.dumps(b, sort_keys=True, default=norm) and all(
        norm(a[k]) == norm(b[k]) for k in a if k != "hist"
    )


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    x=values,
    y=values,
    ints=st.lists(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), max_size=120),
    groups=st.lists(st.integers(0, 4), max_size=120),
)
def test_relation_batches_equal_the_duckdb_scan_over_several_parts(tmp_path, x, y, ints, groups):
    """The curated rows' path: parts that are SQL relations (some empty), streamed from DuckDB as record
    batches and counted in numpy (the later passes from the first one's spill file), give ``_duckdb_scan``'s
    statistics over the same parts, bit for bit."""
    from airflow_curation.stages.validate import arrow_scan

    n = max(len(x), len(y), len(ints), 1)
    cols = {k: v + [None] * (n - len(v)) for k, v in (("x", x), ("y", y), ("i", ints))}
    g = (groups + [0] * n)[:n]  # part 0 holds the rest; parts 2 and 5 (of 0..5) may be empty, 5 always is
    con = duckdb.connect()
    t = pa.table({**{k: pa.array(v, pa.int64() if k == "i" else pa.float64()) for k, v in cols.items()}, "g": g})
    con.register("src", t)
    con.execute("CREATE TABLE t AS SELECT * FROM src")  # a table: the streaming cursors see it
    run = lambda sql: con.execute(sql).fetchall()  # noqa: E731
    parts = [f"(SELECT x, y, i FROM t WHERE g = {k})" for k in range(6)]
    pairs = [("x", "x"), ("y", "y"), ("i", "i")]
    for bins, fetch_max in ((64, 5), (bounded.SELECT_BINS, bounded.FETCH_MAX)):
        kw = {"bins": bins, "fetch_max": fetch_max}
        # several record batches per part; spilled by the first pass (the later passes read the file)
        spill = str(tmp_path / f"spill-{bins}.parquet")
        batches = arrow_scan.relation_batches(con, parts, ["x", "y", "i"], spill, batch_rows=7)
        ref = bounded.column_stats(run, parts, pairs, **kw)
        got = bounded.column_stats(run, parts, pairs, **kw, batches=batches)
        # a spill given up at once (spill_max): every pass streams the parts, the same statistics
        capped = arrow_scan.relation_batches(con, parts, ["x", "y", "i"], spill + ".capped", batch_rows=7, spill_max=8)
        streamed = bounded.column_stats(run, parts, pairs, **kw, batches=capped)
        for c in ("x", "y", "i"):
            assert _same(got[c], ref[c]), (c, bins, got[c], ref[c])
            assert _same(streamed[c], ref[c]), (c, bins, streamed[c], ref[c])


def test_a_spill_past_its_limit_is_removed_and_the_passes_stream(tmp_path):
    """The curated rows' spill is given up past ``spill_max`` bytes: no file is left on the local disk, and
    every later pass streams the parts again, with the same values."""
    from airflow_curation.stages.validate import arrow_scan

    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT range::DOUBLE AS x, range % 3 AS g FROM range(5000)")
    parts = [f"(SELECT x FROM t WHERE g = {k})" for k in range(3)]
    expected = sorted(float(v) for v in range(5000))
    for limit, kept in ((1 << 30, True), (1000, False)):
        spill = tmp_path / f"spill-{limit}.parquet"
        batches = arrow_scan.relation_batches(con, parts, ["x"], str(spill), batch_rows=500, spill_max=limit)
        for _ in range(2):
            assert sorted(v for b in batches(["x"]) for v in b["x"].tolist()) == expected
        assert spill.exists() is kept


# Equal neighbouring order statistics that DuckDB's interpolation does not give back: two 5e-324 have a
# median of 0.0; 47 copies of 0.1 (and a 2.0) a p01 of 0.10000000000000002 (rank 0.47, its formula's rounding).
EQUAL_NEIGHBOURS = {
    "subnormal": ([-0.0, 5e-324, 5e-324, -5e-324, 1e-300, 5e-324], "p50", 0.0),
    "normal": ([0.1] * 47 + [2.0], "p01", 0.10000000000000002),
}


@pytest.mark.parametrize("case", sorted(EQUAL_NEIGHBOURS))
@pytest.mark.parametrize("by_files", [False, True])
def test_equal_neighbours_interpolate_as_duckdb_does(tmp_path, by_files, case):
    """Two equal neighbouring order statistics are interpolated by DuckDB's own formula, as its
    ``quantile_cont`` does: not always the value itself, subnormal or not."""
    xs, stat, odd = EQUAL_NEIGHBOURS[case]
    f = str(tmp_path / "x.parquet")
    pq.write_table(pa.table({"x": pa.array(xs, pa.float64())}), f)
    con = duckdb.connect()
    run = lambda sql: con.execute(sql).fetchall()  # noqa: E731
    part = f"read_parquet('{f}')"
    qs = "[" + ", ".join(str(q) for q in bounded.QUANTILES) + "]"
    expected = run(f"SELECT quantile_cont(x, {qs}) FROM {part}")[0][0]
    got = bounded.column_stats(
        run, [part], [("x", "x")], bins=64, fetch_max=1, values_per_query=0, files=[f] if by_files else None
    )["x"]
    assert [repr(got[f"p{int(round(q * 100)):02d}"]) for q in bounded.QUANTILES] == [repr(v) for v in expected]
    assert repr(got[stat]) == repr(odd)  # DuckDB's interpolation of the two equal values


def test_daft_interpolates_equal_neighbours_as_duckdb_does():
    import daft

    from airflow_curation.stages.validate.daft_stats import signal_stats

    xs, stat, odd = EQUAL_NEIGHBOURS["normal"]
    got = signal_stats(daft, daft.from_pydict({"x": xs}), ["x"], bins=64, fetch_max=1)["x"]
    assert repr(got[stat]) == repr(odd)


def test_the_files_of_a_pass_are_split_into_runs_for_the_threads(tmp_path):
    """Each thread counts runs of consecutive files, a few runs a thread, every file in exactly one run; the
    statistics of 9 files read by 1, 2 and 3 threads are the same, histogram counts and quantiles alike."""
    from airflow_curation.stages.validate.arrow_scan import _runs

    files = [f"f{i}" for i in range(9)]
    for threads in (1, 2, 3, 20):
        runs = _runs(files, threads)
        assert [f for r in runs for f in r] == files and all(runs)
        assert len(runs) == (1 if threads == 1 else min(9, 4 * threads))
    paths = []
    for i in range(9):  # a column of repeats and a wide range, files of different sizes
        t = pa.table({"x": [float((i * 37 + j) % 101) * (10.0 ** (j % 7)) for j in range(200 * (i + 1))]})
        paths.append(str(tmp_path / f"p{i}.parquet"))
        pq.write_table(t, paths[-1], row_group_size=64)
    con = duckdb.connect()
    run = lambda sql: con.execute(sql).fetchall()  # noqa: E731
    rel = f"read_parquet({paths})"
    kw = {"bins": 64, "fetch_max": 5, "values_per_query": 0}
    got = [bounded.column_stats(run, [rel], [("x", "x")], **kw, files=paths, threads=t) for t in (1, 2, 3)]
    assert got[0] == got[1] == got[2]
    want = con.execute(f"SELECT quantile_cont(x, {list(bounded.QUANTILES)}) FROM {rel}").fetchone()[0]
    assert [got[0]["x"][f"p{int(round(q * 100)):02d}"] for q in bounded.QUANTILES] == want
