"""Statistics of numeric columns over a relation read in parts, in bounded memory.

DuckDB's ``quantile_cont`` holds every value of its column, so a report over the whole lake grew with the
data. Here the relation is a list of parts (SQL relations whose union is the whole: one view, or one
relation per group of shards), every query keeps only a few thousand groups, and the results are
DuckDB's own over the whole relation:

- ``count``, ``min``, ``max`` and the histogram are combined from the parts exactly; ``mean`` is the exact sum
  over the count, rounded once (:func:`exact_mean`): each finite value is an integer times a power of two, and
  the parts add the integers per exponent (:func:`exact_sums_sql`), which no order of addition changes. Not
  ``avg`` or ``sum``: with several DuckDB threads they add in the order the threads finish, so one report's mean
  differed between runs in its last bits (3 means in 6 runs of a 2 M-value column at 2 threads); nor the sum of
  the parts' ``fsum``, a rounding per part: several parts (an array's tasks) and one, or DuckDB and Daft
  (:mod:`.daft_stats` sums the same integers), gave means 1e-12 apart;
- quantiles: over one part, DuckDB's ``quantile_cont`` itself for the columns whose values fit a query's
  budget (``VALUES_PER_QUERY``, a batch of columns per query); past it (a lake of millions of rows per
  column), and over several parts, DuckDB's ``quantile_cont`` too (rank ``(n - 1) q``, interpolated between the values at its
  floor and ceiling ranks), the values at those ranks found by selection: an equal-width histogram of the
  interval holding a rank, then of the bin holding it, until the bin is small enough to fetch (or holds a
  single value), then DuckDB's ``quantile_cont`` of those two values at the rank's fraction (so its own
  rounding). Ordering as DuckDB's: ``-inf``, the finite values, ``inf``, ``NaN``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np

QUANTILES = (0.01, 0.05, 0.5, 0.95, 0.99)
HIST_BINS = 20
SELECT_BINS = 4096  # bins of one selection pass
FETCH_MAX = 50_000  # values of an interval fetched and sorted in Python rather than split again
VALUES_PER_QUERY = 8_000_000  # values DuckDB's own quantile_cont may hold in one query (8 bytes each)

Run = Callable[[str], list[tuple]]


def q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def dbl(x: float) -> str:
    """A DOUBLE literal that round-trips exactly (a bare ``0.1`` is a DECIMAL in DuckDB)."""
    return f"'{float(x)!r}'::DOUBLE"


def hist_bins(lo: float, hi: float, n: int = HIST_BINS) -> list[float]:
    return hist_division(lo, hi, n).edges


class HistDivision(NamedTuple):
    """The report's equal-width histogram of a column: its ``edges``, and how every engine bins a value:
    ``floor((x * scale - start) / width)`` clamped to the bins (``scale`` 1, written ``x - start``, unless
    ``hi - lo`` overflows: a span past 1.8e308 is binned in halves, where nothing overflows)."""

    edges: list[float]
    start: float
    width: float
    scale: float = 1.0


def hist_division(lo: float, hi: float, n: int = HIST_BINS) -> HistDivision:
    edges = [lo, lo + 1.0] if hi <= lo else [lo + (hi - lo) * i / n for i in range(n + 1)]
    width = (edges[-1] - edges[0]) / (len(edges) - 1)
    if math.isfinite(width) and all(map(math.isfinite, edges)):
        return HistDivision(edges, edges[0], width)
    start, width = lo / 2, (hi / 2 - lo / 2) / n  # halves: |x / 2 - lo / 2| <= 1.8e308
    return HistDivision([2 * (start + width * i) for i in range(n)] + [hi], start, width, 0.5)


def _order(x: float) -> tuple[bool, float]:
    return (math.isnan(x), x)  # DuckDB sorts NaN above everything


def column_stats(
    run: Run,
    parts: Sequence[str],
    columns: Sequence[tuple[str, str]],
    *,
    quantiles: Sequence[float] = QUANTILES,
    bins: int = SELECT_BINS,
    fetch_max: int = FETCH_MAX,
    values_per_query: int = VALUES_PER_QUERY,
    files: Sequence[str] | None = None,
    batches: Callable[[list[str]], Iterator[dict[str, Any]]] | None = None,
    threads: int = 1,
) -> dict[str, dict[str, Any]]:
    """``{out name: {count, min, max, mean, p01.., hist}}`` of ``columns`` (``(column in the parts, out
    name)``, cast to DOUBLE) over the union of ``parts``.

    Scans: one for count, min, max and mean (and one more where a column holds an infinity or NaN),
    one for the histograms with the first selection step, then one per further step (one, as a rule:
    the values of the bins that hold the ranks).

    :param files: the Parquet files whose union is the one part, if it is that: the histograms and
        selection passes then read them in Arrow and numpy (:mod:`.arrow_scan`), not in DuckDB.
    :param batches: else the parts' record batches (:func:`.arrow_scan.relation_batches`), read the same way.
    :param threads: threads that read and count ``files`` in those passes (the same numbers at any count)."""
    if not columns:
        return {}
    cols = [c for c, _ in columns]
    basics = _basics(run, parts, cols)
    out: dict[str, dict[str, Any]] = {}
    for (_, name), b in zip(columns, basics):
        out[name] = {"count": b["count"], "min": b["min"], "max": b["max"], "mean": b["mean"]}
    hists = _hist_plan([(c, out[name]) for c, name in columns])
    # One part whose columns' values all fit one query's budget: DuckDB's quantile_cont itself, one query.
    # Else every column by selection: a few scans, however many rows (a batch of columns per query was one
    # scan of every file per batch, the batches growing with the rows).
    direct = [k for k, b in enumerate(basics) if len(parts) == 1 and b["count"]]
    if sum(basics[k]["count"] for k in direct) > values_per_query:
        direct = []
    # Arrow and numpy for selection; DuckDB's histogram() alone (no column by selection) costs less than a read
    source = batches if batches is not None else files
    if source is not None and len(direct) < sum(1 for b in basics if b["count"]):
        from airflow_curation.stages.validate.arrow_scan import arrow_scan  # it imports this module

        scan = arrow_scan(source, cols, bins, hists, threads=threads)
    else:
        scan = _duckdb_scan(run, parts, cols, bins, hists)
    values = rank_quantiles(
        [{**b, "count": 0} if k in direct else b for k, b in enumerate(basics)],
        scan,
        lambda lo, hi, d: _interpolate(run, lo, hi, d),
        quantiles,
        bins,
        fetch_max,
    )
    batch: list[int] = []
    held = 0
    for k in [*direct, None]:
        if batch and (k is None or held + basics[k]["count"] > values_per_query):
            qs = "[" + ", ".join(str(float(qq)) for qq in quantiles) + "]"
            row = run(f"SELECT {', '.join(f'quantile_cont({_x(cols[j])}, {qs})' for j in batch)} FROM {parts[0]}")[0]
            for j, vals in zip(batch, row):
                values[j] = list(vals)
            batch, held = [], 0
        if k is not None:
            batch.append(k)
            held += basics[k]["count"]
    for (_, name), vals in zip(columns, values):
        for qq, val in zip(quantiles, vals):
            out[name][f"p{int(round(qq * 100)):02d}"] = val
    return out


def _x(col: str) -> str:
    return f"{q(col)}::DOUBLE"


# A finite non-zero double x is m * 2**(e - 53) with e = floor(log2|x|) (to within one: log2 may round across a
# power of two) and m an integer of at most 55 bits: x * 2**(53 - e), exact (a product by powers of two, in two
# steps so that neither factor overflows; e is at least -1022, so subnormals get the same scale). A part adds, per
# exponent, the high and low 28 bits of m as integers: exact, whatever the order or the engine. The factors come
# from a table of the 2,122 exponents joined on e (two pow() a value cost 1.6x more); the whole query 53 ns a
# value on one thread, against 3.3 for fsum (benchmarks/bench_exact_mean.py).
_SCALE_BITS = 28
MEAN_SQL = """
WITH u AS (UNPIVOT (SELECT {columns} FROM {part}) ON {names} INTO NAME k VALUE x),
v AS (SELECT k, x, greatest(floor(log2(abs(x))), -1022)::BIGINT AS e FROM u WHERE isfinite(x) AND x <> 0),
s AS (SELECT range AS e, pow(2.0, (53 - range) // 2) AS f1, pow(2.0, (53 - range) - (53 - range) // 2) AS f2
      FROM range(-1022, 1100)),
w AS (SELECT k, e, (x * f1 * f2)::BIGINT AS m FROM v JOIN s USING (e))
SELECT k, e, sum(m >> {bits})::HUGEINT, sum(m & {mask})::HUGEINT FROM w GROUP BY k, e
"""


def exact_sums_sql(part: str, cols: list[str]) -> str:
    """The query of one part's exact sums: rows ``(column index as 'cK', exponent, sum of m's high bits, sum of its
    low bits)`` for every finite non-zero value (see :func:`exact_mean`)."""
    return MEAN_SQL.format(
        columns=", ".join(f"{_x(c)} AS c{k}" for k, c in enumerate(cols)),
        part=part,
        names=", ".join(f"c{k}" for k in range(len(cols))),
        bits=_SCALE_BITS,
        mask=(1 << _SCALE_BITS) - 1,
    )


def exact_mean(
    sums: Iterable[tuple[int, int, int]], count: int, nan: int = 0, inf: int = 0, ninf: int = 0
) -> float | None:
    """The mean of ``count`` values from their exact sums ``(exponent, high sum, low sum)`` (of every part, in any
    order), rounded once: the same float whatever the parts, their order or the engine. With NaN, or both
    infinities, NaN; with one infinity, that infinity (IEEE's sum); no value: None."""
    if not count:
        return None
    if nan or (inf and ninf):
        return math.nan
    if inf or ninf:
        return math.inf if inf else -math.inf
    total = 0
    for e, hi, lo in sums:
        total += ((int(hi) << _SCALE_BITS) + int(lo)) << (int(e) + 1022)
    return float(Fraction(total, count << 1075))


def _basics(run: Run, parts: Sequence[str], cols: list[str]) -> list[dict[str, Any]]:
    # count, min, max, and the NaN count: with count, min and max alone DuckDB answers from Parquet's statistics,
    # which leave NaN out (the max of [NaN, 1.0] was 1.0, not DuckDB's own NaN); the NaN count makes it scan
    per = 4
    exprs = []
    for c in cols:
        exprs += [f"count({_x(c)})", f"min({_x(c)})", f"max({_x(c)})", f"count({_x(c)}) FILTER (WHERE isnan({_x(c)}))"]
    rows = [run(f"SELECT {', '.join(exprs)} FROM {p}")[0] for p in parts]
    sums: list[list[tuple[int, int, int]]] = [[] for _ in cols]
    for p in parts:
        for k, e, hi, lo in run(exact_sums_sql(p, cols)):
            sums[int(k[1:])].append((e, hi, lo))
    out = []
    for k in range(len(cols)):
        got = [r[per * k : per * k + per] for r in rows]
        n = sum(int(g[0]) for g in got)
        mins = [g[1] for g in got if g[1] is not None]
        maxs = [g[2] for g in got if g[2] is not None]
        lo = min(mins, key=_order) if mins else None
        hi = max(maxs, key=_order) if maxs else None
        out.append(
            {
                "count": n,
                "min": lo,
                "max": hi,
                "mean": exact_mean(sums[k], n),
                "nan": 0,
                "inf": 0,
                "-inf": 0,
                "fmin": lo,
                "fmax": hi,
            }
        )
    # Infinities and NaN sort apart (-inf first, inf then NaN last): count them, and the finite range.
    odd = [k for k, b in enumerate(out) if b["count"] and not (math.isfinite(b["min"]) and math.isfinite(b["max"]))]
    if odd:
        exprs = []
        for k in odd:
            x = _x(cols[k])
            exprs += [
                f"count({x}) FILTER (WHERE isnan({x}))",
                f"count({x}) FILTER (WHERE {x} = 'inf'::DOUBLE)",
                f"count({x}) FILTER (WHERE {x} = '-inf'::DOUBLE)",
                f"min({x}) FILTER (WHERE isfinite({x}))",
                f"max({x}) FILTER (WHERE isfinite({x}))",
            ]
        rows = [run(f"SELECT {', '.join(exprs)} FROM {p}")[0] for p in parts]
        for j, k in enumerate(odd):
            got = [r[5 * j : 5 * j + 5] for r in rows]
            b = out[k]
            b["nan"], b["inf"], b["-inf"] = (sum(int(g[i]) for g in got) for i in range(3))
            b["mean"] = exact_mean(sums[k], b["count"], b["nan"], b["inf"], b["-inf"])
            los = [g[3] for g in got if g[3] is not None]
            his = [g[4] for g in got if g[4] is not None]
            b["fmin"], b["fmax"] = (min(los), max(his)) if los else (None, None)
    return out


def _hist_plan(cols: list[tuple[str, dict]]) -> list[tuple[str, dict, HistDivision]]:
    """``(column, stats, division)``: the equal-width histograms (``HIST_BINS`` bins from min to max) to
    count, each part's counts summed, every scan binning with the division's doubles (DuckDB's SQL,
    :mod:`.arrow_scan`); a column with no value, or an infinity, gets none."""
    plan = []
    for src, stats in cols:
        if not stats["count"] or not (math.isfinite(stats["min"]) and math.isfinite(stats["max"])):
            stats["hist"] = {"edges": [], "counts": []}  # no equal-width bins reach an infinity (or NaN)
            continue
        division = hist_division(stats["min"], stats["max"])
        stats["hist"] = {"edges": division.edges, "counts": [0] * (len(division.edges) - 1)}
        plan.append((src, stats, division))
    return plan


def _hist_expr(src: str, d: HistDivision) -> str:
    """DuckDB's count of ``src`` in the division's bins."""
    x = f"{q(src)}::DOUBLE"
    xs = x if d.scale == 1.0 else f"({x} * {dbl(d.scale)})"
    # a null has no bin (greatest() would skip it and put it in bin 0); exact DOUBLE literals (a bare
    # 0.1 is a DECIMAL, and a bare inf, a width past the largest double, no literal at all)
    return (
        f"histogram(CASE WHEN {x} IS NULL THEN NULL"
        f" ELSE least(greatest(floor(({xs} - {dbl(d.start)}) / {dbl(d.width)}), 0), {len(d.edges) - 2}) END::INTEGER)"
    )


# One pass over the relation for a selection step: per request ``(slice, fetch)``, a fetched slice's values
# (those of its value range, in any order: the slice's own are picked out by ``_Slice.holds``), else the
# slice's ``(min, max, [(bin, count), ...])`` over the next division (``_Slice.division``); ``first`` is the
# first pass (DuckDB counts the histograms in it).
Scan = Callable[[list[tuple["_Slice", bool]], bool], list]


def rank_quantiles(
    basics: list[dict[str, Any]],
    scan: Scan,
    interpolate: Callable[[float, float, float], float],
    quantiles: Sequence[float] = QUANTILES,
    bins: int = SELECT_BINS,
    fetch_max: int = FETCH_MAX,
) -> list[list[float | None]]:
    """DuckDB's ``quantile_cont`` of each column (``basics``: count, nan, inf, -inf, fmin, fmax), exactly, by
    selection over passes of ``scan``: any engine that can filter, bin and count gives the same values."""
    # ranks wanted, in DuckDB's order; the finite ones become selection targets (column, finite rank)
    wanted: dict[tuple[int, int], float | None] = {}
    targets: list[tuple[int, int]] = []
    plans = []
    for k, b in enumerate(basics):
        n = b["count"]
        if not n:
            plans.append(None)
            continue
        finite = n - b["nan"] - b["inf"] - b["-inf"]
        plan = []
        for qq in quantiles:
            rn = (n - 1) * float(qq)
            frn, crn = math.floor(rn), math.ceil(rn)
            plan.append((rn, frn, crn))
            for r in (frn, crn):
                if r < b["-inf"]:
                    wanted[(k, r)] = -math.inf
                elif r < b["-inf"] + finite:
                    if (k, r - b["-inf"]) not in targets:
                        targets.append((k, r - b["-inf"]))
                elif r < b["-inf"] + finite + b["inf"]:
                    wanted[(k, r)] = math.inf
                else:
                    wanted[(k, r)] = math.nan
        plans.append(plan)
    found = _select(basics, targets, bins, fetch_max, scan)
    for (k, rank), v in found.items():
        wanted[(k, rank + basics[k]["-inf"])] = v
    out = []
    for k, plan in enumerate(plans):
        if plan is None:
            out.append([None] * len(quantiles))
            continue
        vals = []
        for rn, frn, crn in plan:
            lo = wanted[(k, frn)]
            if frn == crn:
                vals.append(lo)
            else:
                hi = wanted[(k, crn)]
                vals.append(interpolate(lo, hi, rn - frn))  # equal values too: DuckDB's formula decides
        out.append(vals)
    return out


def _interpolate(run: Run, lo: float, hi: float, d: float) -> float:
    """DuckDB's own interpolation between two neighbouring values (its formula, and whether the build fuses
    the multiply-add, decide the last bit): ``quantile_cont`` of the two values at ``d``. Equal values too:
    DuckDB's formula need not give the value back (47 copies of 0.1 have p01 0.10000000000000002, two
    5e-324 a median of 0.0)."""
    return run(f"SELECT quantile_cont(x, {dbl(d)}) FROM (VALUES ({dbl(lo)}), ({dbl(hi)})) AS t(x)")[0][0]


class _Slice:
    """Finite values of a column: those in ``[lo, hi]`` (the column's finite range, or the data bounds of
    the step above), then, at each step down, those in one bin of an equal-width division of the step
    above (``(start, width, bin)``: monotone in the value, so a bin is a run of consecutive ranks).
    ``below`` values come before it."""

    def __init__(self, k: int, lo: float, hi: float, below: int, count: int, steps: tuple = (), odd=False) -> None:
        self.k, self.lo, self.hi, self.below, self.count, self.steps = k, lo, hi, below, count, steps
        self.odd = odd  # the column holds infinities or NaN (excluded here)

    def key(self) -> tuple:
        return (self.k, self.steps)

    def range(self, bins: int) -> tuple[float, float]:
        """Value bounds that hold the slice: its bin's edges, each widened by far more than the rounding
        of the bin's arithmetic (a value in the margin is read, then left out by :meth:`holds`), within the
        data bounds of the step above. The first and last bins reach those bounds: the bin formula clamps
        every value below or above the division into them."""
        if not self.steps:
            return self.lo, self.hi
        start, width, b = self.steps[-1]
        a, z = _edge(start, width, b), _edge(start, width, b + 1)
        if b == bins - 1:  # past start + 1.8e308, x - start overflows to inf: the last bin too
            a = min(a, start + sys.float_info.max)
        margin = width * 1e-6
        lo = self.lo if b == 0 else max(self.lo, a - margin - 8 * math.ulp(a))
        hi = self.hi if b == bins - 1 else min(self.hi, z + margin + 8 * math.ulp(z))
        return lo, hi

    def where(self, col: str, bins: int) -> str:
        """The slice's rows, cheap comparisons first."""
        x = _x(col)
        if not self.steps:  # (not None: a null's bin would be 0, greatest() skipping nulls)
            return f"isfinite({x})" if self.odd else f"{x} IS NOT NULL"
        lo, hi = self.range(bins)
        # NaN has the last bin, and DuckDB 2.0.1's Parquet scan lets it through `x >= lo AND x <= hi` (and
        # `NOT isnan(x)`) where the range meets the data: only isfinite() keeps it out
        conds = [f"isfinite({x})"] if self.odd else []
        conds += [f"{x} >= {dbl(lo)}", f"{x} <= {dbl(hi)}"]
        conds += [f"{_bin(x, start, width, bins)} = {b}" for start, width, b in self.steps]
        return " AND ".join(conds)

    def holding(self, x: np.ndarray, bins: int) -> np.ndarray:
        """Which values ``x`` (of the range fetched) are in the slice: the bins as DuckDB computes them (IEEE
        subtraction and division, then floor: the same doubles in numpy), all values at once."""
        mask = (x >= self.lo) & (x <= self.hi)
        for st, w, b in self.steps:
            mask &= bin_of(x, st, w, bins) == b
        return mask

    def division(self, bins: int) -> tuple[float, float]:
        """Where the next step's bins start, and their width: :meth:`range` split in ``bins``. (A division of
        the bin alone never ended where the data lay past a clamped bin's edge, as ``[0, 1e-300]`` past
        ``[-1, 0)``'s last bin: each step split the empty bin again, until its width underflowed, and the
        range cut the clamped values away.)"""
        lo, hi = self.range(bins)
        return lo, _width(lo, hi, bins)


def bin_of(x: np.ndarray, start: float, width: float, bins: int) -> np.ndarray:
    """DuckDB's ``least(greatest(floor((x - start) / width), 0), bins - 1)``: NaN (an overflowed ``inf / inf``)
    sorts above every number there, so it lands in the last bin."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        f = np.floor((x - start) / width)
    f[np.isnan(f)] = bins - 1
    return np.clip(f, 0, bins - 1).astype(np.int64)


def _width(lo: float, hi: float, bins: int) -> float:
    """Width of ``bins`` equal bins from ``lo`` to ``hi``: finite where ``hi - lo`` overflows (a span near
    +-1.8e308), and at least the least subnormal where they differ (``1e-323 - 5e-324`` split in 64 is 0)."""
    width = (hi - lo) / bins
    if math.isinf(width):
        width = hi / bins - lo / bins
    if width == 0 and hi > lo:
        width = 5e-324
    return width


def _edge(start: float, width: float, b: int) -> float:
    """Bin ``b``'s lower edge; halved where ``b * width`` overflows (a division of a span past 1.8e308)."""
    edge = start + b * width
    return edge if math.isfinite(edge) else 2 * (start / 2 + b * (width / 2))


def _bin(x: str, start: float, width: float, bins: int) -> str:
    return f"least(greatest(floor(({x} - {dbl(start)}) / {dbl(width)}), 0), {bins - 1})::BIGINT"


def _select(
    basics: list[dict[str, Any]], targets: list[tuple[int, int]], bins: int, fetch_max: int, scan: Scan
) -> dict[tuple[int, int], float]:
    """The finite value at each target ``(column, finite rank)``."""
    found: dict[tuple[int, int], float] = {}
    at: dict[tuple[int, int], _Slice] = {}
    for k, r in targets:
        b = basics[k]
        odd = bool(b["nan"] or b["inf"] or b["-inf"])
        at[(k, r)] = _Slice(k, b["fmin"], b["fmax"], 0, b["count"] - b["nan"] - b["inf"] - b["-inf"], odd=odd)
    first = True
    while at or first:
        for t, sl in list(at.items()):
            lo, hi = sl.range(bins)
            if lo == hi:  # one value, however many times
                found[t] = lo
                del at[t]
        slices: dict[tuple, _Slice] = {}
        for sl in at.values():
            slices.setdefault(sl.key(), sl)
        plan = []  # (slice, fetch?)
        for sl in slices.values():
            start, width = sl.division(bins)
            plan.append((sl, sl.count <= fetch_max or not (width > 0 and math.isfinite(width))))
        if not plan and not first:
            break
        results = scan(plan, first)
        first = False
        moved: dict[tuple, Any] = {}
        for (sl, fetch), got in zip(plan, results):
            if fetch:
                x = np.asarray(got, dtype=np.float64)
                vals = np.sort(x[sl.holding(x, bins)], kind="stable").tolist()  # stable: as sorted() orders -0.0, 0.0
                if len(vals) != sl.count:  # cannot happen: the bins were counted as they are picked here
                    raise RuntimeError(f"quantile selection: {len(vals)} values for {sl.count} in column {sl.k}")
                moved[sl.key()] = vals
            else:
                moved[sl.key()] = (*got, sl.division(bins))
        for t, sl in list(at.items()):
            got = moved[sl.key()]
            if isinstance(got, list):
                found[t] = got[t[1] - sl.below]
                del at[t]
                continue
            lo, hi, counts, (start, width) = got
            if lo == hi:  # one value, however many times
                found[t] = lo
                del at[t]
                continue
            under = sl.below
            for b, n in counts:
                if t[1] < under + n:
                    at[t] = _Slice(sl.k, lo, hi, under, n, (*sl.steps, (start, width, b)), sl.odd)
                    break
                under += n
            else:  # cannot happen: the slice's values were counted
                raise RuntimeError(f"quantile selection lost rank {t[1]} of column {t[0]}")
    return found


def _duckdb_scan(
    run: Run, parts: Sequence[str], cols: list[str], bins: int, hists: list[tuple[str, dict, HistDivision]]
) -> Scan:
    """A selection pass as one query per part, every request a filtered aggregate; the histograms ``hists``
    are counted in the first pass."""

    def scan(plan: list[tuple[_Slice, bool]], first: bool) -> list:
        exprs = [_hist_expr(src, d) for src, _, d in hists] if first else []
        at = []  # position of each request's first expression
        for sl, fetch in plan:
            x = _x(cols[sl.k])
            start, width = sl.division(bins)
            at.append(len(exprs))
            if fetch:  # by value range alone (cheap), the slice's own values picked out by the caller
                lo, hi = sl.range(bins)
                exprs.append(f"list({x}) FILTER (WHERE {x} >= {dbl(lo)} AND {x} <= {dbl(hi)})")
            else:
                where = sl.where(cols[sl.k], bins)
                hist = f"histogram({_bin(x, start, width, bins)}) FILTER (WHERE {where})"
                if sl.steps:
                    exprs += [f"min({x}) FILTER (WHERE {where})", f"max({x}) FILTER (WHERE {where})", hist]
                else:  # the column's finite range is known
                    exprs += [dbl(sl.lo), dbl(sl.hi), hist]
        if not exprs:
            return []
        rows = [run(f"SELECT {', '.join(exprs)} FROM {p}")[0] for p in parts]
        if first:
            for j, (_, stats, _) in enumerate(hists):
                for row in rows:
                    for b, n in (row[j] or {}).items():
                        stats["hist"]["counts"][int(b)] += int(n)
        out: list = []
        for (sl, fetch), i in zip(plan, at):
            if fetch:
                out.append([v for row in rows for v in (row[i] or [])])
                continue
            mins = [row[i] for row in rows if row[i] is not None]
            maxs = [row[i + 1] for row in rows if row[i + 1] is not None]
            counts: dict[int, int] = {}
            for row in rows:
                for b, n in (row[i + 2] or {}).items():
                    counts[int(b)] = counts.get(int(b), 0) + int(n)
            out.append((min(mins), max(maxs), sorted(counts.items())))
        return out

    return scan
