"""The scale benchmark's method: repeated, alternated runs reduced to medians, spreads and marginal costs.

A curve's CPU at each size says little about curvature: a fixed cost hides a growing term at small sizes,
and one run per size on a shared machine hides it in noise. ``bench_scale.py`` therefore runs every size
``repeats`` times in alternation (A B C A B C ...), keeps every run, and reports, per stage, the
**marginal** cost between adjacent sizes, (CPU_b - CPU_a) / (size_b - size_a), per GB and per row, for
each repeat k pairing the k-th run of both sizes (adjacent in time, so under similar load): its median
and spread. A linear stage has the same marginal cost at every interval; a superlinear one grows.
Pure functions on the JSON, no runs (``simulate_scale.py`` and the tests load them too).
"""

from __future__ import annotations

import statistics

STAGES = ("ingest", "preprocess", "dedup", "validate")
PIPELINE = "pipeline"


def aggregate(runs: list[dict]) -> dict:
    """One size's runs (``run_size`` results, in run order) -> the first run's description, ``stages`` with
    each stage's median run (its record, plus the CPU, wall and RSS of every run), and every run."""
    out = {k: v for k, v in runs[0].items() if k not in ("stages", "load_average", "compare")}
    out["stages"] = {}
    for s in runs[0]["stages"]:
        recs = [r["stages"][s] for r in runs]
        cpu = [x["cpu_s"] for x in recs]
        median = sorted(recs, key=lambda x: x["cpu_s"])[(len(recs) - 1) // 2]
        out["stages"][s] = {
            **median,
            "cpu_s_median": statistics.median(cpu),
            "cpu_s_runs": cpu,
            "wall_s_runs": [x["wall_s"] for x in recs],
            "peak_rss_runs": [x["peak_rss"] for x in recs],
            "load_runs": [x.get("load") for x in recs],
        }
    out["repeats"] = len(runs)
    out["runs"] = runs
    return out


def _cpu_runs(point: dict, stage: str, field: str = "cpu_s") -> list[float]:
    if stage == PIPELINE:
        stages = [s for s in STAGES if s in point["stages"]]
        return [sum(r["stages"][s][field] for s in stages) for r in point["runs"]]
    return [r["stages"][stage][field] for r in point["runs"]]


def marginals(points: list[dict], unit: str, field: str = "cpu_s") -> list[dict]:
    """Per interval between adjacent points (sorted by ``unit``: ``gb`` of input or ``rows``) and per stage (and
    the pipeline): the marginal CPU seconds per unit, one per repeat (the k-th run of each size), median,
    min and max, and the median's ratio to the first interval's. ``field``: a run's ``cpu_s`` (user + system),
    or ``user_s`` or ``sys_s`` alone where the runs recorded them."""

    def size(p: dict) -> float:
        return p["input_bytes"] / 1e9 if unit == "gb" else float(next(iter(p["stages"].values()))["rows"])

    points = sorted(points, key=size)
    stages = [s for s in STAGES if all(s in p["stages"] for p in points)]
    stages += [PIPELINE] if len(stages) > 1 else []  # one stage alone: no pipeline row that repeats it
    out = []
    first: dict[str, float] = {}
    for a, b in zip(points, points[1:]):
        dx = size(b) - size(a)
        for s in stages:
            ca, cb = _cpu_runs(a, s, field), _cpu_runs(b, s, field)
            per = [(y - x) / dx for x, y in zip(ca, cb)]
            med = statistics.median(per)
            first.setdefault(s, med)
            out.append(
                {
                    "from": size(a),
                    "to": size(b),
                    "stage": s,
                    "per_unit": per,
                    "median": med,
                    "min": min(per),
                    "max": max(per),
                    "vs_first": med / first[s] if first[s] else None,
                }
            )
    return out


def marginal_table(points: list[dict], unit: str, field: str = "cpu_s") -> list[str]:
    """A Markdown table of :func:`marginals`: per GB in CPU-s, per row in CPU-us (``field``: which CPU)."""
    scale, head = (1.0, "CPU-s per GB") if unit == "gb" else (1e6, "CPU-us per row")
    head = {"cpu_s": "", "user_s": "user ", "sys_s": "system "}[field] + head
    fmt = (lambda x: f"{x:.2f}") if unit == "gb" else (lambda x: f"{x:,.0f}")
    out = [
        f"| {'GB' if unit == 'gb' else 'rows'} from -> to | stage | marginal {head}, median | min - max "
        "| median / first interval's |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for m in marginals(points, unit, field):
        out.append(
            f"| {fmt(m['from'])} -> {fmt(m['to'])} | {m['stage']} | {m['median'] * scale:.2f} | "
            f"{m['min'] * scale:.2f} - {m['max'] * scale:.2f} | "
            + ("" if m["vs_first"] is None else f"{m['vs_first']:.2f}")
            + " |"
        )
    return out


def runs_table(points: list[dict], unit: str) -> list[str]:
    """Per size and stage: CPU median and every run's CPU in run order, peak RSS, the 1-minute load around the
    runs."""
    out = [
        f"| {'GB' if unit == 'gb' else 'rows'} | stage | shards | rows | CPU s, median | CPU s, every run "
        "| peak RSS MiB, max | load (1 min) before each run |",
        "| ---: | --- | ---: | ---: | ---: | --- | ---: | --- |",
    ]
    for p in sorted(points, key=lambda p: p["input_bytes"]):
        label = f"{p['input_bytes'] / 1e9:.2f}" if unit == "gb" else f"{next(iter(p['stages'].values()))['rows']:,}"
        for s, x in p["stages"].items():
            loads = ", ".join(f"{ld[0]:.1f}" for ld in x["load_runs"] if ld)
            out.append(
                f"| {label} | {s} | {x['shards']} | {x['rows']:,} | {x['cpu_s_median']:.1f} | "
                + ", ".join(f"{c:.1f}" for c in x["cpu_s_runs"])
                + f" | {max(x['peak_rss_runs']) / 2**20:.0f} | {loads} |"
            )
    return out


def shared_units(points: list[dict], stage: str) -> list[dict]:
    """Per pair of adjacent sizes whose runs recorded each unit's seconds (``own_unit_seconds``, wall seconds
    of a unit in a process pinned to one core): the units both lakes hold (the sizes share their input files,
    so these are the same shards, row for row) with each unit's median seconds summed in the smaller lake and in
    the larger, and their ratio; the units only the larger holds, in seconds per GB the interval adds; and the
    seconds between units (the run's span minus its units' sum: checkpoint commits, tallies), per unit, in each.
    A term that grows with the lake shows in the ratio and in the time between units, whatever the added text
    costs, which the marginal cost per GB mixes in."""

    def seconds(p: dict) -> dict[str, float] | None:
        runs = [r["stages"].get(stage, {}).get("own_unit_seconds") for r in p["runs"]]
        if not runs or any(not x for x in runs):
            return None
        return {u: statistics.median(x.get(u, 0.0) for x in runs) for u in runs[0]}

    def between(p: dict) -> float:
        recs = [r["stages"][stage] for r in p["runs"]]
        return statistics.median((x["own_span_s"] - x["own_unit_s"]) / x["own_units"] for x in recs)

    points = sorted(points, key=lambda p: p["input_bytes"])
    out = []
    for a, b in zip(points, points[1:]):
        sa, sb = seconds(a), seconds(b)
        if sa is None or sb is None:
            continue
        both = sa.keys() & sb.keys()
        if not both:  # lakes of other files: nothing to set side by side
            continue
        in_a, in_b = sum(sa[u] for u in both), sum(sb[u] for u in both)
        added = sum(v for u, v in sb.items() if u not in both)
        out.append(
            {
                "from": a["input_bytes"] / 1e9,
                "to": b["input_bytes"] / 1e9,
                "stage": stage,
                "shared": len(both),
                "seconds_smaller": in_a,
                "seconds_larger": in_b,
                "ratio": in_b / in_a if in_a else float("nan"),
                "added_units": len(sb) - len(both),
                "added_per_gb": added / ((b["input_bytes"] - a["input_bytes"]) / 1e9),
                "between_ms": (between(a) * 1e3, between(b) * 1e3),
            }
        )
    return out


def shared_units_table(points: list[dict], stage: str) -> list[str]:
    """A Markdown table of :func:`shared_units` (no lines where no pair of sizes recorded its units)."""
    rows = shared_units(points, stage)
    if not rows:
        return []
    out = [
        "| GB from -> to | stage | shards both hold | their seconds in the smaller lake | in the larger | larger / "
        "smaller | shards added | their seconds per GB added | between shards, ms a shard (smaller, larger) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for m in rows:
        out.append(
            f"| {m['from']:.2f} -> {m['to']:.2f} | {m['stage']} | {m['shared']} | {m['seconds_smaller']:.2f} | "
            f"{m['seconds_larger']:.2f} | {m['ratio']:.3f} | {m['added_units']} | {m['added_per_gb']:.2f} | "
            f"{m['between_ms'][0]:.2f}, {m['between_ms'][1]:.2f} |"
        )
    return out
