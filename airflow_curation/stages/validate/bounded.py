"""Statistics of numeric columns over a relation read in parts, in bounded memory.

DuckDB's ``quantile_cont`` holds every value of its column, so a report over the whole lake grew with the
data. Here the relation is a list of parts (SQL relations whose union is the whole: one view, or one
relation per group of shards), every query keeps only a few thousand groups, and the results are
DuckDB's own over the whole relation:

- ``count``, ``min``, ``max`` and the histogram are combined from the parts exactly; ``mean`` is DuckDB's
  ``avg`` when there is one part, else the exactly rounded sum of the parts' sums over the count;
- quantiles are DuckDB's ``quantile_cont`` (rank ``(n - 1) q``, interpolated between the values at its
  floor and ceiling ranks), the values at those ranks found by selection: an equal-width histogram of the
  interval holding a rank, then of the bin holding it, until the bin is small enough to fetch (or holds a
  single value), then DuckDB's ``quantile_cont`` of those two values at the rank's fraction (so its own
  rounding). Ordering as DuckDB's: ``-inf``, the finite values, ``inf``, ``NaN``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

QUANTILES = (0.01, 0.05, 0.5, 0.95, 0.99)
HIST_BINS = 20
SELECT_BINS = 4096  # bins of one selection pass
FETCH_MAX = 50_000  # values of an interval fetched and sorted in Python rather than split again

Run = Callable[[str], list[tuple]]


def q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def dbl(x: float) -> str:
    """A DOUBLE literal that round-trips exactly (a bare ``0.1`` is a DECIMAL in DuckDB)."""
    return f"'{float(x)!r}'::DOUBLE"


def hist_bins(lo: float, hi: float, n: int = HIST_BINS) -> list[float]:
    if hi <= lo:
        return [lo, lo + 1.0]
    return [lo + (hi - lo) * i / n for i in range(n + 1)]


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
) -> dict[str, dict[str, Any]]:
    """``{out name: {count, min, max, mean, p01.., hist}}`` of ``columns`` (``(column in the parts, out
    name)``, cast to DOUBLE) over the union of ``parts``."""
    if not columns:
        return {}
    out: dict[str, dict[str, Any]] = {}
    basics = _basics(run, parts, [c for c, _ in columns])
    for (col, name), b in zip(columns, basics):
        stats: dict[str, Any] = {"count": b["count"], "min": b["min"], "max": b["max"], "mean": b["mean"]}
        out[name] = stats
    values = _quantiles(run, parts, columns, basics, quantiles, bins, fetch_max)
    for (_, name), vals in zip(columns, values):
        for qq, val in zip(quantiles, vals):
            out[name][f"p{int(round(qq * 100)):02d}"] = val
    _histograms(run, parts, [(c, out[name]) for c, name in columns])
    return out


def _basics(run: Run, parts: Sequence[str], cols: list[str]) -> list[dict[str, Any]]:
    per = 8
    exprs = []
    for c in cols:
        x = f"{q(c)}::DOUBLE"
        exprs += [
            f"count({x})",
            f"min({x})",
            f"max({x})",
            f"avg({x})",
            f"sum({x})",
            f"count({x}) FILTER (WHERE isnan({x}))",
            f"count({x}) FILTER (WHERE {x} = 'inf'::DOUBLE)",
            f"count({x}) FILTER (WHERE {x} = '-inf'::DOUBLE)",
        ]
    rows = [run(f"SELECT {', '.join(exprs)} FROM {p}")[0] for p in parts]
    out = []
    for k in range(len(cols)):
        got = [r[per * k : per * k + per] for r in rows]
        n = sum(int(g[0]) for g in got)
        mins = [g[1] for g in got if g[1] is not None]
        maxs = [g[2] for g in got if g[2] is not None]
        if len(got) == 1:
            mean = got[0][3]
        elif n:
            sums = [g[4] for g in got if g[4] is not None]
            try:
                mean = math.fsum(sums) / n
            except (ValueError, OverflowError):  # inf - inf, or a finite sum past the largest double
                mean = sum(sums) / n
        else:
            mean = None
        nan, pinf, ninf = (sum(int(g[i]) for g in got) for i in (5, 6, 7))
        out.append(
            {
                "count": n,
                "min": min(mins, key=_order) if mins else None,
                "max": max(maxs, key=_order) if maxs else None,
                "mean": mean,
                "nan": nan,
                "inf": pinf,
                "-inf": ninf,
            }
        )
    return out


def _histograms(run: Run, parts: Sequence[str], cols: list[tuple[str, dict]]) -> None:
    """Equal-width histograms (``HIST_BINS`` bins from min to max), each part's counts summed."""
    exprs, plan = [], []
    for src, stats in cols:
        if not stats["count"] or not (math.isfinite(stats["min"]) and math.isfinite(stats["max"])):
            stats["hist"] = {"edges": [], "counts": []}  # no equal-width bins reach an infinity (or NaN)
            continue
        edges = hist_bins(stats["min"], stats["max"])
        nb = len(edges) - 1
        width = (edges[-1] - edges[0]) / nb
        exprs.append(
            f"histogram(least(greatest(floor(({q(src)}::DOUBLE - {edges[0]!r}) / {width!r}), 0), {nb - 1})::INTEGER)"
        )
        plan.append((stats, edges))
    if not exprs:
        return
    totals = [[0] * (len(edges) - 1) for _, edges in plan]
    for p in parts:
        row = run(f"SELECT {', '.join(exprs)} FROM {p}")[0]
        for counts, hist in zip(totals, row):
            for b, n in (hist or {}).items():
                counts[int(b)] += int(n)
    for (stats, edges), counts in zip(plan, totals):
        stats["hist"] = {"edges": edges, "counts": counts}


def _quantiles(
    run: Run,
    parts: Sequence[str],
    columns: Sequence[tuple[str, str]],
    basics: list[dict[str, Any]],
    quantiles: Sequence[float],
    bins: int,
    fetch_max: int,
) -> list[list[float | None]]:
    # ranks wanted, in DuckDB's order; the finite ones become selection targets (column, finite rank)
    wanted: dict[tuple[int, int], float | None] = {}
    targets: dict[tuple[int, int], list] = {}  # (column, finite rank) -> [lo, hi, below, count]
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
                    targets.setdefault((k, r - b["-inf"]), [None, None, 0, finite])
                elif r < b["-inf"] + finite + b["inf"]:
                    wanted[(k, r)] = math.inf
                else:
                    wanted[(k, r)] = math.nan
        plans.append(plan)
    if targets:
        bounds = _finite_bounds(run, parts, [c for c, _ in columns], sorted({k for k, _ in targets}))
        for (k, _), t in targets.items():
            t[0], t[1] = bounds[k]
        for (k, rank), v in _select(run, parts, [c for c, _ in columns], targets, bins, fetch_max).items():
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
                vals.append(_interpolate(run, lo, wanted[(k, crn)], rn - frn))
        out.append(vals)
    return out


def _interpolate(run: Run, lo: float, hi: float, d: float) -> float:
    """DuckDB's own interpolation between two neighbouring values (its formula, and whether the build fuses
    the multiply-add, decide the last bit): ``quantile_cont`` of the two values at ``d``."""
    return run(f"SELECT quantile_cont(x, {dbl(d)}) FROM (VALUES ({dbl(lo)}), ({dbl(hi)})) AS t(x)")[0][0]


def _finite_bounds(run: Run, parts: Sequence[str], cols: list[str], ks: list[int]) -> dict[int, tuple[float, float]]:
    exprs = []
    for k in ks:
        x = f"{q(cols[k])}::DOUBLE"
        exprs += [f"min({x}) FILTER (WHERE isfinite({x}))", f"max({x}) FILTER (WHERE isfinite({x}))"]
    rows = [run(f"SELECT {', '.join(exprs)} FROM {p}")[0] for p in parts]
    out = {}
    for j, k in enumerate(ks):
        los = [r[2 * j] for r in rows if r[2 * j] is not None]
        his = [r[2 * j + 1] for r in rows if r[2 * j + 1] is not None]
        out[k] = (min(los), max(his))
    return out


def _long(part: str, cols: list[str], ks: list[int], intervals: list[tuple[int, int, float, float]]) -> str:
    """``(i, x)``: the values of ``part`` in each interval ``(i, column, lo, hi)`` (inclusive)."""
    select = ", ".join(f"{q(cols[k])}::DOUBLE AS {q(str(k))}" for k in ks)
    on = ", ".join(q(str(k)) for k in ks)
    values = ", ".join(f"('{k}', {i}, {dbl(lo)}, {dbl(hi)})" for i, k, lo, hi in intervals)
    return (
        f"SELECT __p.i, __u.x FROM (UNPIVOT (SELECT {select} FROM {part}) ON {on} INTO NAME c VALUE x) AS __u "
        f"JOIN (VALUES {values}) AS __p(c, i, lo, hi) ON __p.c = __u.c AND __u.x >= __p.lo AND __u.x <= __p.hi"
    )


def _select(
    run: Run, parts: Sequence[str], cols: list[str], targets: dict[tuple[int, int], list], bins: int, fetch_max: int
) -> dict[tuple[int, int], float]:
    """The finite value at each target's rank: ``targets[(column, rank)] = [lo, hi, below, count]``, the
    interval of values that holds the rank, with ``below`` finite values under it and ``count`` in it."""
    found: dict[tuple[int, int], float] = {}
    pending = dict(targets)
    force: set[tuple] = set()
    while pending:
        for key, (lo, hi, _, _) in list(pending.items()):
            if lo == hi:
                found[key] = lo
                del pending[key]
        if not pending:
            break
        intervals: dict[tuple, int] = {}  # (column, lo, hi, below, count) -> i
        for (k, _), (lo, hi, below, count) in pending.items():
            intervals.setdefault((k, lo, hi, below, count), len(intervals))
        small = [iv for iv in intervals if iv[4] <= fetch_max or iv in force]
        big = [iv for iv in intervals if iv not in small]
        if small:
            got: dict[int, list[float]] = {intervals[iv]: [] for iv in small}
            spec = [(intervals[iv], iv[0], iv[1], iv[2]) for iv in small]
            ks = sorted({iv[0] for iv in small})
            for p in parts:
                for i, x in run(_long(p, cols, ks, spec)):
                    got[i].append(x)
            for key, (lo, hi, below, count) in list(pending.items()):
                i = intervals.get((key[0], lo, hi, below, count))
                if i in got:
                    vals = sorted(got[i])
                    found[key] = vals[key[1] - below]
                    del pending[key]
        if big:
            hist: dict[tuple[int, int], list] = {}  # (i, bin) -> [count, min, max]
            spec = [(intervals[iv], iv[0], iv[1], iv[2]) for iv in big]
            width = {intervals[iv]: (iv[2] - iv[1]) / bins for iv in big}
            lows = ", ".join(f"({intervals[iv]}, {dbl(iv[1])}, {dbl(width[intervals[iv]])})" for iv in big)
            ks = sorted({iv[0] for iv in big})
            for p in parts:
                rows = run(
                    f"SELECT __l.i, least(greatest(floor((__l.x - __w.lo) / __w.w), 0), {bins - 1})::BIGINT AS b, "
                    f"count(*), min(__l.x), max(__l.x) FROM ({_long(p, cols, ks, spec)}) AS __l "
                    f"JOIN (VALUES {lows}) AS __w(i, lo, w) ON __w.i = __l.i GROUP BY 1, 2"
                )
                for i, b, n, mn, mx in rows:
                    h = hist.setdefault((i, b), [0, mn, mx])
                    h[0] += n
                    h[1], h[2] = min(h[1], mn), max(h[2], mx)
            for key, (lo, hi, below, count) in list(pending.items()):
                iv = (key[0], lo, hi, below, count)
                if iv not in big:
                    continue
                i = intervals[iv]
                under = below
                for b in range(bins):
                    h = hist.get((i, b))
                    if h is None:
                        continue
                    if key[1] < under + h[0]:
                        new = [h[1], h[2], under, h[0]]
                        if (h[1], h[2], h[0]) == (lo, hi, count):  # no split (a width that overflowed): fetch it
                            force.add((key[0], lo, hi, below, count))
                            new = [lo, hi, below, count]
                        pending[key] = new
                        break
                    under += h[0]
                else:  # cannot happen: the interval's values were counted
                    raise RuntimeError(f"quantile selection lost rank {key[1]} of column {cols[key[0]]}")
    return found
