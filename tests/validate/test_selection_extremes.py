"""The quantile selection gives DuckDB's ``quantile_cont`` bit for bit on extreme ranges: subnormals, +-0.0,
spans past the largest double, ranges near 2^52 with few bins, all-equal columns, NaN, infinities and nulls;
by DuckDB's queries and by the Arrow scan alike."""

from __future__ import annotations

import math
import random

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_curation.stages.validate import bounded

MAX = 1.7976931348623157e308
TINY = 5e-324  # the least subnormal
NORMAL = 2.2250738585072014e-308  # the least normal

# Columns (bins, fetch_max) the selection got wrong, or handled only by fetching every value.
CASES = {
    # [0, 1e-300] past [-1, 0)'s clamped last bin: each step split the empty bin again, its range cut the
    # clamped values away ("lost rank")
    "subnormal span": ([0.0, 1e-300, 1e-323, -1.0, -1.0, 1e-300, 1e-323, NORMAL], 64, 1),
    # a span past the largest double: its width was inf, so every value was fetched (memory unbounded);
    # divided, x - start overflows to inf and lands in the last bin from below its edge
    "overflowing span": ([0.0, 1.1092251434078664e308, 1e308, MAX * (1 - 2**-52), -1.11e308, -1.36e308, 0.0], 2, 1),
    "overflowing span, 64 bins": ([0.0, 1.1092251434078664e308, 1e308, MAX, -1.11e308, -1.36e308, 0.0], 64, 1),
    # NaN falls in the last bin, and DuckDB's Parquet scan let it through the slice's range comparisons
    "NaN in the last bin": ([-1.0, 0.0, 0.0, 0.0, 0.0, math.nan], 2, 1),
    "two subnormals apart": ([TINY, 2 * TINY, TINY, 2 * TINY, 3 * TINY], 64, 1),
}


def _check(tmp_path, xs: list, bins: int, fetch_max: int) -> None:
    f = str(tmp_path / "x.parquet")
    pq.write_table(pa.table({"x": pa.array(xs, pa.float64())}), f, row_group_size=7)
    con = duckdb.connect()
    run = lambda sql: con.execute(sql).fetchall()  # noqa: E731
    part = f"read_parquet('{f}')"
    qs = "[" + ", ".join(str(q) for q in bounded.QUANTILES) + "]"
    want = run(f"SELECT quantile_cont(x, {qs}) FROM {part}")[0][0]
    norm = lambda v: repr(abs(v)) if v == 0 else repr(v)  # noqa: E731  (-0.0 and 0.0 tie at a rank)
    for files in (None, [f]):
        got = bounded.column_stats(
            run, [part], [("x", "x")], bins=bins, fetch_max=fetch_max, values_per_query=0, files=files
        )["x"]
        mine = [got[f"p{int(round(q * 100)):02d}"] for q in bounded.QUANTILES]
        if want is None:
            assert mine == [None] * len(mine), (xs, bins, files)
        else:
            assert [norm(v) for v in mine] == [norm(v) for v in want], (xs, bins, fetch_max, files)


@pytest.mark.parametrize("case", sorted(CASES))
def test_selection_on_extreme_columns_equals_duckdb(tmp_path, case):
    xs, bins, fetch_max = CASES[case]
    _check(tmp_path, xs, bins, fetch_max)


def _draw(rng: random.Random) -> list:
    """A column of one kind of extreme values, with NaN, infinities and nulls at times."""
    kind = rng.choice(["subnormal", "zero", "huge", "2^52", "equal", "mixed", "wide"])
    n = rng.choice([1, 2, 3, 5, 8, 13, 40])
    pick = {
        "subnormal": lambda: rng.choice(
            [TINY * rng.randint(-40, 40), rng.uniform(-1, 1) * NORMAL, 0.0, -0.0, NORMAL, -NORMAL, 1e-300, -1.0]
        ),
        "zero": lambda: rng.choice([0.0, -0.0, TINY, -TINY]),
        "huge": lambda: rng.choice([MAX, -MAX, MAX * rng.uniform(0.5, 1), -MAX * rng.uniform(0.5, 1), 1e308, 0.0, 1.0]),
        "2^52": lambda: float(2**52 + rng.randint(-5, 5)) + rng.choice([0.0, 0.5, 0.25]),
        "wide": lambda: rng.choice([-1.0, 1.0]) * 10 ** rng.uniform(-323, 308),
        "mixed": lambda: rng.choice([TINY, -0.0, MAX, -MAX, 0.1, 1e-300, 3.0]),
    }
    if kind == "equal":
        xs = [rng.choice([0.1, TINY, 1e-310, MAX, -0.0, 1 / 3, 2.0**52 + 1])] * n
    else:
        xs = [pick[kind]() for _ in range(n)]
    if rng.random() < 0.3:
        for _ in range(rng.randint(1, 3)):
            xs.insert(rng.randrange(len(xs) + 1), rng.choice([None, math.nan, math.inf, -math.inf]))
    return xs


@pytest.mark.parametrize("seed", range(6))
def test_selection_on_random_extreme_columns_equals_duckdb(tmp_path, seed):
    """Seeded columns of extreme values (a fixed draw: a failure reproduces), few bins and tiny fetches (many
    steps), then the defaults."""
    rng = random.Random(seed)
    for _ in range(8):
        xs = _draw(rng)
        for bins, fetch_max in ((2, 1), (64, 5), (bounded.SELECT_BINS, bounded.FETCH_MAX)):
            _check(tmp_path, xs, bins, fetch_max)


@pytest.mark.parametrize("lo, hi", [(-1e308, 1e308), (-MAX, MAX), (-1.36e308, 1.11e308)])
def test_histogram_of_a_span_past_the_largest_double_has_finite_edges_and_true_bins(tmp_path, lo, hi):
    """``hi - lo`` overflows: the edges were NaN and inf, and every value fell in the first or last bin. Binned
    in halves, each value lands in the bin its edges say, the same by DuckDB's queries and by the Arrow scan."""
    from fractions import Fraction

    rng = random.Random(7)
    xs = [lo, hi, *(rng.uniform(lo / 2, hi / 2) * 2 for _ in range(400))]
    f = str(tmp_path / "x.parquet")
    pq.write_table(pa.table({"x": pa.array(xs, pa.float64())}), f, row_group_size=50)
    con = duckdb.connect()
    run = lambda sql: con.execute(sql).fetchall()  # noqa: E731
    part = f"read_parquet('{f}')"
    hists = [bounded.column_stats(run, [part], [("x", "x")], files=files)["x"]["hist"] for files in (None, [f])]
    assert hists[0] == hists[1]
    edges, counts = hists[0]["edges"], hists[0]["counts"]
    assert len(edges) == bounded.HIST_BINS + 1 and all(map(math.isfinite, edges))
    assert edges[0] == lo and edges[-1] == hi and edges == sorted(edges)
    # exact placement by the edges (no value of this draw lies within a rounding of an edge)
    want = [0] * bounded.HIST_BINS
    for x in xs:
        b = sum(Fraction(x) >= Fraction(e) for e in edges[1:-1])
        want[b] += 1
    assert counts == want and sum(counts) == len(xs)
    # Daft's histogram scan (the Daft engine's, on the same division)
    import types

    import daft

    from airflow_curation.stages.validate.query_engines import DaftEngine

    out = {"x": {}}
    plan = [("x", bounded.hist_division(min(xs), max(xs)))]
    DaftEngine._hists(types.SimpleNamespace(daft=daft), daft.from_arrow(pq.read_table(f)), plan, out)
    assert out["x"]["hist"] == hists[0]
