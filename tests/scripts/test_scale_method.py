"""benchmarks/scale_method.py: medians of alternated runs and the marginal cost that shows curvature."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "scale_method.py"


@pytest.fixture
def method():
    spec = importlib.util.spec_from_file_location("scale_method", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(gb: float, noise: float) -> dict:
    """One run: ingest linear (2 s + 10 s/GB), dedup quadratic (4 s/GB^2), 1 M rows per GB."""
    rec = {"wall_s": 1.0, "peak_rss": 1 << 20, "shards": 1, "rows": int(gb * 1e6), "load": [1.0] * 6}
    return {
        "gb": gb,
        "input_bytes": gb * 1e9,
        "stages": {"ingest": {**rec, "cpu_s": 2 + 10 * gb + noise}, "dedup": {**rec, "cpu_s": 4 * gb * gb + noise}},
    }


def test_marginals_pair_the_kth_runs_and_show_a_superlinear_stage(method):
    noise = [0.0, 0.3, -0.2]  # the same shift for every size in a round: paired, it cancels
    points = [method.aggregate([_run(gb, n) for n in noise]) for gb in (1, 2, 4)]
    assert points[0]["stages"]["ingest"]["cpu_s_runs"] == [12.0, 12.3, 11.8]
    assert points[0]["stages"]["ingest"]["cpu_s"] == 12.0  # the median run's record
    assert len(points[0]["runs"]) == 3
    m = {(x["from"], x["stage"]): x for x in method.marginals(points, "gb")}
    # a linear stage: the same marginal cost per GB at every interval, whatever its fixed cost
    assert m[(1, "ingest")]["median"] == pytest.approx(10) and m[(2, "ingest")]["median"] == pytest.approx(10)
    assert m[(2, "ingest")]["vs_first"] == pytest.approx(1)
    assert m[(2, "ingest")]["min"] == pytest.approx(m[(2, "ingest")]["max"])
    # a quadratic one: 12 s/GB from 1 to 2 GB, 24 from 2 to 4: the ratio a curve of totals would hide
    assert m[(1, "dedup")]["median"] == pytest.approx(12) and m[(2, "dedup")]["vs_first"] == pytest.approx(2)
    per_row = {(x["from"], x["stage"]): x for x in method.marginals(points, "rows")}
    assert per_row[(1e6, "ingest")]["median"] == pytest.approx(10e-6)
    assert per_row[(2e6, "pipeline")]["median"] == pytest.approx(34e-6)
    assert "| 2.00 -> 4.00 | dedup | 24.00 |" in "\n".join(method.marginal_table(points, "gb"))


def test_marginals_of_user_and_system_cpu_apart(method):
    # a stage whose user CPU is linear (10 s/GB) and whose system CPU per GB doubles past 2 GB
    def run(gb: float) -> dict:
        r = _run(gb, 0.0)
        user, sys_ = 10 * gb, (gb if gb <= 2 else 2 + 2 * (gb - 2))
        r["stages"] = {"dedup": {**r["stages"]["dedup"], "cpu_s": user + sys_, "user_s": user, "sys_s": sys_}}
        return r

    points = [method.aggregate([run(gb)]) for gb in (1, 2, 4)]
    user = {x["from"]: x["median"] for x in method.marginals(points, "gb", "user_s")}
    system = {x["from"]: x["median"] for x in method.marginals(points, "gb", "sys_s")}
    assert user == pytest.approx({1: 10, 2: 10}) and system == pytest.approx({1: 1, 2: 2})
    assert "marginal system CPU-s per GB" in method.marginal_table(points, "gb", "sys_s")[0]


def test_the_scale_report_splits_user_and_system_cpu_where_every_run_has_both(method):
    """bench_scale's report of the sizes curve adds the user-only and system-only marginal tables when every run
    recorded both (a VM's system CPU per byte read can grow where the stage's own CPU does not), and not when any
    run lacks them (older JSON)."""
    from bench_scale import method_report

    def run(gb: float) -> dict:
        r = _run(gb, 0.0)
        for rec in r["stages"].values():
            rec["user_s"], rec["sys_s"] = 0.9 * rec["cpu_s"], 0.1 * rec["cpu_s"]
        return r

    both = {"sizes": {str(gb): method.aggregate([run(gb)]) for gb in (1, 2, 4)}}
    text = method_report(both)
    assert "User CPU alone, marginal per GB" in text and "marginal system CPU-s per GB" in text
    older = {"sizes": {str(gb): method.aggregate([_run(gb, 0.0)]) for gb in (1, 2, 4)}}
    assert "User CPU alone" not in method_report(older)


def test_sizes_run_in_an_order_reversed_every_other_round():
    """bench_scale's rounds run the sizes A B C, then C B A: no size always runs right after the same one (whose
    traces in the page cache it would inherit) nor at the same point of a drift; each run records its place, and
    the report's header says which order the JSON's runs had (older JSON: the same order every round)."""
    from bench_scale import _order, alternated

    calls: list[str] = []
    done: dict[str, dict] = {}
    points = [("1", []), ("2", []), ("4", [])]
    alternated(points, 3, lambda label, files: (calls.append(label), _run(float(label), 0.0))[1], done.__setitem__)
    assert calls == ["1", "2", "4", "4", "2", "1", "1", "2", "4"]
    assert [r["position"] for r in done["4"]["runs"]] == [2, 0, 2]
    assert [r["round"] for r in done["1"]["runs"]] == [0, 1, 2]
    assert "reversed every other round" in _order(list(done.values()))
    older = [{"runs": [{k: v for k, v in r.items() if k != "position"} for r in p["runs"]]} for p in done.values()]
    assert "the same order every round" in _order(older)


def test_the_same_shards_cost_the_same_in_a_larger_lake_or_the_table_says_so(method):
    """``shared_units``: the shards two sizes share, summed by unit in each lake; a per-shard cost that grows with
    the lake (here: 1 ms more a shard in the larger lake) shows in the ratio, apart from what the added shards
    cost; sizes without per-unit seconds (older JSON) give no row."""

    def point(gb: float, shards: int, extra: float) -> dict:
        secs = {f"part-{i:03d}": 0.010 + (0.002 if i % 2 else 0.0) + extra for i in range(shards)}
        rec = {"own_unit_seconds": secs, "own_span_s": sum(secs.values()) + shards * 3e-3}
        rec |= {"own_unit_s": sum(secs.values()), "own_units": shards}
        return {"input_bytes": gb * 1e9, "runs": [{"stages": {"preprocess": rec}}] * 3}

    flat = method.shared_units([point(1, 100, 0.0), point(2, 200, 0.0)], "preprocess")
    assert len(flat) == 1 and flat[0]["shared"] == 100 and flat[0]["added_units"] == 100
    assert flat[0]["ratio"] == pytest.approx(1.0) and flat[0]["added_per_gb"] == pytest.approx(1.1)
    assert flat[0]["between_ms"] == pytest.approx((3.0, 3.0))
    growing = method.shared_units([point(1, 100, 0.0), point(2, 200, 0.001)], "preprocess")
    assert growing[0]["ratio"] == pytest.approx(1.2 / 1.1)
    older = point(4, 400, 0.0)
    for r in older["runs"]:
        r["stages"]["preprocess"].pop("own_unit_seconds", None)  # the runs share one record
    assert method.shared_units([point(2, 200, 0.0), older], "preprocess") == []
    assert "| 1.00 -> 2.00 | preprocess | 100 |" in "\n".join(
        method.shared_units_table([point(1, 100, 0), point(2, 200, 0)], "preprocess")
    )
