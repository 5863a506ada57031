"""Exact quantiles of a Daft frame's numeric columns: DuckDB's ``quantile_cont``, the same value to the bit.

Daft's ``approx_percentiles`` (a sketch) gave values up to 14% off DuckDB's on a small lake, and Daft's
exact ``percentile`` holds a column's every value in one place. Here the DuckDB engine's selection
(:func:`.bounded.rank_quantiles`) runs on Daft: each pass is one query over the frame, every request
(a column's slice: its values, or its counts per bin of an equal-width division) a struct column, the
structs unpivoted and counted in one group-by, so memory holds a few thousand groups per request. The
passes: one for the counts of NaN and infinities (with count, min, max and mean), then two or three
selection passes (the first splits each column's range into 4,096 bins; a bin with at most 50,000 values
is fetched). The interpolation between the two values at a rank is DuckDB's own (two values, in process).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from airflow_curation.stages.validate import bounded


def signal_stats(
    daft, frame, names: list[str], bins: int = bounded.SELECT_BINS, fetch_max: int = bounded.FETCH_MAX
) -> dict[str, dict[str, Any]]:
    """``{name: {count, min, max, mean, p01.., hist (empty)}}`` of ``names`` (cast to float64) in ``frame``
    (``bins``, ``fetch_max``: the selection's, see :mod:`.bounded`)."""
    from daft import col, lit
    from daft.functions import when

    f64, i64 = daft.DataType.float64(), daft.DataType.int64()
    aggs = []
    for n in names:
        x = col(n).cast(f64)
        finite = ~x.is_inf() & x.not_nan()
        aggs += [
            x.count().alias(f"{n}__n"),
            x.min().alias(f"{n}__min"),  # Daft orders as DuckDB: -inf first, NaN last
            x.max().alias(f"{n}__max"),
            x.is_nan().cast(i64).sum().alias(f"{n}__nan"),
            (x == lit(math.inf)).cast(i64).sum().alias(f"{n}__inf"),
            (x == lit(-math.inf)).cast(i64).sum().alias(f"{n}__ninf"),
            when(finite, x).min().alias(f"{n}__fmin"),
            when(finite, x).max().alias(f"{n}__fmax"),
        ]
    g = {k: v[0] for k, v in frame.select(*names).agg(*aggs).to_pydict().items()}
    basics = []
    for n in names:
        b = {"count": int(g[f"{n}__n"] or 0), "min": g[f"{n}__min"], "max": g[f"{n}__max"]}
        b.update(nan=int(g[f"{n}__nan"] or 0), inf=int(g[f"{n}__inf"] or 0), fmin=g[f"{n}__fmin"], fmax=g[f"{n}__fmax"])
        b["-inf"] = int(g[f"{n}__ninf"] or 0)
        basics.append(b)
    for b, sums in zip(basics, _exact_sums(daft, frame, names)):
        b["mean"] = bounded.exact_mean(sums, b["count"], b["nan"], b["inf"], b["-inf"])
    interpolate = _Interpolator()
    try:
        values = bounded.rank_quantiles(
            basics, _scan(daft, frame, names, bins), interpolate, bounded.QUANTILES, bins, fetch_max
        )
    finally:
        interpolate.close()
    out = {}
    for n, b, vals in zip(names, basics, values):
        stats = {k: b[k] for k in ("count", "min", "max", "mean")}
        for qq, val in zip(bounded.QUANTILES, vals):
            stats[f"p{int(round(qq * 100)):02d}"] = val
        stats["hist"] = {"edges": [], "counts": []}
        out[n] = stats
    return out


def _times_power_of_two(x, s):
    """``x * 2**s`` for an integer expression ``s`` (|s| < 2,048), exactly: Daft's ``pow`` takes a literal exponent,
    so one factor per bit of |s| (each a power of two, applied from the smallest: nothing rounds, and the values on
    the way stay between ``x`` and the result, so none overflows)."""
    from daft import lit
    from daft.functions import when

    up, size = s > lit(0), s.abs()
    for i in range(11):
        step = 2.0 ** min(1 << i, 512)  # 2**1024 is no double: bit 10 is two factors of 2**512
        factor = when(up, lit(step)).otherwise(lit(1.0 / step))
        for _ in range(2 if i == 10 else 1):
            x = x * when(((size >> lit(i)) & lit(1)) == lit(1), factor).otherwise(lit(1.0))
    return x


def _requests(frame, fields: list):
    """One row a (row of ``frame``, request): ``req`` the request's name (``r<i>``, the i-th of ``fields``, struct
    columns named so) and ``v`` its struct, so that every request is aggregated by one group-by."""
    from daft import lit

    return (
        frame.select(*fields)
        .with_column("__one", lit(1))
        .unpivot(ids="__one", values=[f"r{i}" for i in range(len(fields))], variable_name="req", value_name="v")
    )


def _exact_sums(daft, frame, names: list[str]) -> list[list[tuple[int, int, int]]]:
    """Per column, the exact sums of its finite non-zero values as :func:`.bounded.exact_sums_sql` computes them in
    DuckDB (per exponent, the high and low bits of each value's integer ``m``): one query."""
    from daft import col, lit
    from daft.functions import to_struct, when

    f64, i64 = daft.DataType.float64(), daft.DataType.int64()
    bits = bounded._SCALE_BITS
    fields = []
    for i, n in enumerate(names):
        x = col(n).cast(f64)
        ok = ~x.is_inf() & x.not_nan() & (x != lit(0.0))
        e = x.abs().log2().floor().clip(-1022.0, 1100.0).cast(i64)
        m = _times_power_of_two(x, lit(53) - e).cast(i64)
        hi = m >> lit(bits)
        fields.append(when(ok, to_struct(e=e, hi=hi, lo=m - (hi << lit(bits)))).alias(f"r{i}"))
    long = (
        _requests(frame, fields)
        .where(col("v").not_null())
        .select(col("req"), col("v")["e"].alias("e"), col("v")["hi"].alias("hi"), col("v")["lo"].alias("lo"))
    )
    r = long.groupby("req", "e").agg(col("hi").sum().alias("hi"), col("lo").sum().alias("lo")).to_pydict()
    out: list[list[tuple[int, int, int]]] = [[] for _ in names]
    for req, e, hi, lo in zip(r["req"], r["e"], r["hi"], r["lo"]):
        out[int(req[1:])].append((int(e), int(hi), int(lo)))
    return out


def _scan(daft, frame, names: list[str], bins: int) -> bounded.Scan:
    from daft import col, lit
    from daft.functions import to_struct, when

    f64 = daft.DataType.float64()

    def bin_of(x, start: float, width: float):
        return ((x - lit(start)) / lit(width)).floor().clip(0, bins - 1)

    def scan(plan: Sequence[tuple[Any, bool]], first: bool) -> list:
        if not plan:
            return []
        fields = []
        for i, (sl, fetch) in enumerate(plan):
            x = col(names[sl.k]).cast(f64)
            if fetch:  # the values of the slice's range, counted per distinct value
                lo, hi = sl.range(bins)
                key = when((x >= lit(lo)) & (x <= lit(hi)), x)
            else:
                if sl.steps:
                    lo, hi = sl.range(bins)
                    cond = (x >= lit(lo)) & (x <= lit(hi))
                    for st, w, b in sl.steps:
                        cond = cond & (bin_of(x, st, w) == lit(float(b)))
                else:
                    cond = (~x.is_inf() & x.not_nan()) if sl.odd else x.not_null()
                start, width = sl.division(bins)
                key = when(cond, bin_of(x, start, width))
            fields.append(to_struct(k=key, x=x).alias(f"r{i}"))
        long = (
            _requests(frame, fields)
            .select(col("req"), col("v")["k"].alias("k"), col("v")["x"].alias("x"))
            .where(col("k").not_null())
        )
        g = long.groupby("req", "k").agg(
            col("x").count().alias("n"), col("x").min().alias("lo"), col("x").max().alias("hi")
        )
        got: dict[int, list] = {i: [] for i in range(len(plan))}
        r = g.to_pydict()
        for req, k, n, lo, hi in zip(r["req"], r["k"], r["n"], r["lo"], r["hi"]):
            got[int(req[1:])].append((k, int(n), lo, hi))
        out: list = []
        for i, (_, fetch) in enumerate(plan):
            rows = got[i]
            if fetch:
                out.append([lo for _, n, lo, _ in rows for _ in range(n)])
            else:
                out.append(
                    (
                        min(lo for _, _, lo, _ in rows),
                        max(hi for *_, hi in rows),
                        sorted((int(k), n) for k, n, _, _ in rows),
                    )
                )
        return out

    return scan


class _Interpolator:
    """DuckDB's own interpolation (its last bit), as the DuckDB engine does it: one in-process connection,
    opened at the first pair (a connection costs ~20 ms, a pair's query under 1)."""

    def __init__(self) -> None:
        self.con: Any = None

    def __call__(self, lo: float, hi: float, d: float) -> float:
        if self.con is None:
            import duckdb

            self.con = duckdb.connect(":memory:")
        return bounded._interpolate(lambda sql: self.con.execute(sql).fetchall(), lo, hi, d)

    def close(self) -> None:
        if self.con is not None:
            self.con.close()
