"""Validate in bounded memory: the metrics read a group of shards at a time, the distinct ids and cluster
sizes in hash partitions, the quantiles by selection; the answers are those of one pass over the whole."""

from __future__ import annotations

import json
import math
import os
import random
from fractions import Fraction

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.validate import ValidateStage, bounded

from .synth import build_run, record_checksums

CURATED_BOUNDS = [
    {"type": "bounds", "column": "preprocess.alpha_ratio", "stat": s, "min": 0.0, "max": 1.0, "scope": "curated"}
    for s in ("mean", "p05", "p50", "p99")
]


def _values(n: int, seed: int) -> list[float | None]:
    rng = random.Random(seed)
    out: list[float | None] = []
    for _ in range(n):
        r = rng.random()
        if r < 0.05:
            out.append(None)
        elif r < 0.35:
            out.append(float(rng.randint(0, 5)))  # many ties
        else:
            out.append(rng.gauss(0.0, 1e3))
    return out


def _exact_mean(values: list[float]) -> float:
    """The sum of ``values`` as a rational, over their count, rounded once (IEEE's where one is not finite)."""
    finite = [v for v in values if math.isfinite(v)]
    if len(finite) < len(values):
        return sum(values) / len(values)  # NaN, or an infinity
    return float(sum((Fraction(v) for v in finite), Fraction(0)) / len(values))


@pytest.mark.parametrize("special", [False, True])
def test_selection_equals_duckdb_quantile_cont_and_aggregates(special):
    con = duckdb.connect()
    vals = _values(5000, seed=1)
    if special:
        vals[:7] = [math.nan, math.inf, -math.inf, math.nan, math.inf, 0.0, -0.0]
    other = [v * 3 if v is not None else None for v in _values(5000, seed=2)]
    con.register("t", pa.table({"a": pa.array(vals, pa.float64()), "b": pa.array(other, pa.float64())}))
    qs = "[" + ", ".join(str(q) for q in bounded.QUANTILES) + "]"
    want = {}
    for c in ("a", "b"):
        n, lo, hi, mean, quant = con.execute(
            f"SELECT count({c}), min({c}), max({c}), avg({c}), quantile_cont({c}, {qs}) FROM t"
        ).fetchone()
        present = [v for v in (vals if c == "a" else other) if v is not None]
        want[c] = {"count": n, "min": lo, "max": hi, "mean": _exact_mean(present), "q": quant}
    run = lambda sql: con.execute(sql).fetchall()  # noqa: E731
    # One part, then three (row ranges), with tiny bins and fetches so that selection refines several times.
    con.execute("CREATE VIEW t1 AS SELECT *, row_number() OVER () AS r FROM t")
    thirds = [f"(SELECT a, b FROM t1 WHERE r % 3 = {k})" for k in range(3)]
    # one part by DuckDB's quantile_cont, one part by selection (no value fits the budget), three parts
    for parts, budget in ((["t"], bounded.VALUES_PER_QUERY), (["t"], 0), (thirds, bounded.VALUES_PER_QUERY)):
        got = bounded.column_stats(run, parts, [("a", "a"), ("b", "b")], bins=4, fetch_max=20, values_per_query=budget)
        for c in ("a", "b"):
            g, w = got[c], want[c]
            assert g["count"] == w["count"]
            for stat in ("min", "max"):
                assert g[stat] == w[stat] or (math.isnan(g[stat]) and math.isnan(w[stat]))
            quant = [g[f"p{int(round(q * 100)):02d}"] for q in bounded.QUANTILES]
            assert [repr(x) for x in quant] == [repr(x) for x in w["q"]], c  # bit for bit (NaN too)
            if not special:  # every value in one bin, the 5% nulls in none
                assert sum(g["hist"]["counts"]) == w["count"] < len(vals)
            assert repr(g["mean"]) == repr(w["mean"]), (c, len(parts))  # one part or three: bit for bit


@pytest.mark.parametrize("special", [False, True])
def test_daft_quantiles_equal_duckdb_quantile_cont_bit_for_bit(special):
    """Daft computes the same exact quantiles as DuckDB (its approx_percentiles was up to 14% off)."""
    import daft

    from airflow_curation.stages.validate.daft_stats import signal_stats

    con = duckdb.connect()
    vals = _values(5000, seed=3)
    if special:
        vals[:7] = [math.nan, math.inf, -math.inf, math.nan, math.inf, 0.0, -0.0]
    table = pa.table({"a": pa.array(vals, pa.float64()), "b": pa.array([7.0] * 4000 + [None] * 1000, pa.float64())})
    con.register("t", table)
    qs = "[" + ", ".join(str(q) for q in bounded.QUANTILES) + "]"
    frame = daft.from_arrow(table)
    # tiny bins and fetches: selection refines several times; then the defaults (one fetch)
    for bins, fetch_max in ((4, 20), (bounded.SELECT_BINS, bounded.FETCH_MAX)):
        got = signal_stats(daft, frame, ["a", "b"], bins=bins, fetch_max=fetch_max)
        for c in ("a", "b"):
            n, lo, hi, quant = con.execute(
                f"SELECT count({c}), min({c}), max({c}), quantile_cont({c}, {qs}) FROM t"
            ).fetchone()
            g = got[c]
            assert g["count"] == n
            assert repr(g["min"]) == repr(lo) and repr(g["max"]) == repr(hi)
            mine = [g[f"p{int(round(q * 100)):02d}"] for q in bounded.QUANTILES]
            assert [repr(x) for x in mine] == [repr(x) for x in quant], (c, bins)
            # the mean too: the exact sum over the count, as DuckDB's engine gives it (Daft's mean was 1e-12 off)
            duck = bounded.column_stats(lambda sql: con.execute(sql).fetchall(), ["t"], [(c, c)], quantiles=())  # noqa: B023
            present = [v for v in table.column(c).to_pylist() if v is not None]
            assert repr(g["mean"]) == repr(duck[c]["mean"]) == repr(_exact_mean(present)), c


def _duplicate_id_across_shards(uris: dict[str, str]) -> str:
    """Give the last shard's first row the first shard's first id, in the shard and in every attrs file."""
    m = Manifest.read(uris["dedup"])
    first, last = m.shards[0], m.shards[-1]
    dup = pq.read_table(first.uri, columns=["id"]).column(0)[0].as_py()
    for uri in [last.uri, *last.attrs.values()]:
        t = pq.read_table(uri)
        ids = t.column("id").to_pylist()
        ids[0] = dup
        pq.write_table(t.set_column(t.schema.get_field_index("id"), "id", pa.array(ids, pa.string())), uri)
    record_checksums(uris)
    return dup


def _run(root: str, uri: str, run_id: str, **config) -> dict:
    stage = ValidateStage(
        Lake(root, "demo"), {"input_manifest": uri, "fail_on_error": False, "checks": CURATED_BOUNDS, **config}, run_id
    )
    StageRunner(stage).run()
    with open(os.path.join(root, "demo", "_manifests", run_id, "report.json")) as f:
        return json.load(f)


def test_duplicate_id_across_shards_is_found_in_partitions_with_the_single_pass_verdicts(tmp_path):
    root = str(tmp_path)
    uris = build_run(root, shards=5, rows=80, stages=("preprocess", "dedup"))
    _duplicate_id_across_shards(uris)
    # one shard per group, 4 hash partitions of the ids (and of the cluster ids)
    parted = _run(root, uris["dedup"], "parted", group_rows=80, ids_per_pass=100)
    whole = _run(root, uris["dedup"], "whole", group_rows=0, ids_per_pass=0)
    verdicts = {c["name"]: (c["status"], c["observed"]) for c in parted["checks"]}
    assert verdicts == {c["name"]: (c["status"], c["observed"]) for c in whole["checks"]}
    assert verdicts["unique_ids"] == ("fail", 1)  # shard 0 and shard 4 share an id
    assert verdicts["accounting"] == ("pass", 0)  # each row still joins its own shard's attrs only
    assert parted["status"] == whole["status"] == "failed"
    a, b = parted["metrics"], whole["metrics"]
    assert a["rows"] == 400 and a["distinct_ids"] == 399
    for key in ("rows", "text_bytes", "distinct_ids", "null_counts", "missing_attrs", "attrs_rows", "funnel"):
        assert a[key] == b[key], key
    for key in ("duplicates", "clusters", "drop_reasons"):
        assert a[key] == b[key], key
    assert a["signals"] == b["signals"]  # read from the attrs files, one part: the same to the bit
    for col, stats in b["curated_signals"].items():
        for stat, v in stats.items():
            if stat == "mean":
                assert a["curated_signals"][col][stat] == pytest.approx(v, rel=1e-12)
            else:
                assert a["curated_signals"][col][stat] == v, (col, stat)


def test_partitioned_metrics_equal_the_global_views(tmp_path):
    """The groups' sums equal one query over the connection's global views (the ones sql checks read)."""
    root = str(tmp_path)
    uris = build_run(root, shards=4, rows=70, stages=("preprocess", "dedup"))
    report = _run(root, uris["dedup"], "parted", group_rows=100, ids_per_pass=64)
    m = report["metrics"]
    from airflow_curation.stages.validate.query_engines import DuckDBEngine
    from airflow_curation.stages.validate.view import CuratedView

    view = CuratedView.from_manifest(Manifest.read(uris["dedup"]))
    engine = DuckDBEngine(view, group_rows=0, ids_per_pass=0)
    try:
        rows, nbytes, distinct, kept = engine.con.execute(
            "SELECT count(*), sum(strlen(text)), count(DISTINCT id), (SELECT count(*) FROM curated) FROM docs"
        ).fetchone()
        alpha = engine.con.execute(
            "SELECT quantile_cont(alpha_ratio, [0.01, 0.05, 0.5, 0.95, 0.99]) FROM curated"
        ).fetchone()[0]
    finally:
        engine.close()
    assert (m["rows"], m["text_bytes"], m["distinct_ids"], m["funnel"][-1]["rows"]) == (rows, nbytes, distinct, kept)
    assert [m["curated_signals"]["alpha_ratio"][p] for p in ("p01", "p05", "p50", "p95", "p99")] == alpha


def test_attrs_files_read_by_position_where_their_schemas_agree_and_by_name_where_not(tmp_path):
    """A stage's attrs files agree on their schema as a rule, and the view reads them by position (no
    footer re-read per query); where one differs (its columns in another order, one more column: a
    schema change mid-run), they are still unified by name and every value lands in its column."""
    from airflow_curation.stages.validate.query_engines import DuckDBEngine
    from airflow_curation.stages.validate.view import CuratedView, same_schema

    uris = build_run(str(tmp_path), shards=4, rows=50, stages=("preprocess",))
    view = CuratedView.from_manifest(Manifest.read(uris["preprocess"]))
    files = view.attrs[0].files
    assert same_schema(files) and same_schema(view.shard_files)
    expected = sum(sum(pq.read_table(f, columns=["word_count"]).column(0).to_pylist()) for f in files)

    t = pq.read_table(files[1])
    t = t.select(list(reversed(t.column_names))).append_column("extra", pa.array([1.5] * t.num_rows))
    pq.write_table(t, files[1])
    assert not same_schema(files)

    engine = DuckDBEngine(CuratedView.from_manifest(Manifest.read(uris["preprocess"])))
    try:
        got, rows, extra = engine.con.execute(
            "SELECT sum(word_count), count(*), count(extra) FROM attrs_preprocess"
        ).fetchone()
    finally:
        engine.close()
    assert (got, rows, extra) == (expected, 200, 50)


def test_a_mean_over_several_duckdb_threads_is_the_same_every_run_and_exactly_rounded():
    """Validate's means with several DuckDB threads: ``avg`` (and ``sum``) add in the order the threads finish, so
    one report's mean differed between runs in its last bits (3 means in 6 runs here, before); the exact sums give
    the exactly rounded mean every run, whatever the split between threads."""
    import numpy as np

    x = np.random.default_rng(0).random(2_000_000) * 1e3
    table = pa.table({"x": x})
    means = set()
    for _ in range(6):
        con = duckdb.connect()
        con.execute("SET threads = 2")
        con.register("t", table)
        got = bounded.column_stats(lambda sql: con.execute(sql).fetchall(), ["t"], [("x", "x")], quantiles=())  # noqa: B023
        means.add(got["x"]["mean"])
        con.close()
    assert means == {_exact_mean(x.tolist())}


def test_a_mean_over_the_whole_double_range_is_exact_in_every_split_and_engine():
    """Values from subnormals to 1e308 with cancellations (1e16 + 1 - 1e16): their exact sum over the count, rounded
    once (Python's ``Fraction``), from one DuckDB part, from three, and from Daft."""
    import daft

    from airflow_curation.stages.validate.daft_stats import signal_stats

    rng = random.Random(1)
    vals = [1e16, 1.0, -1e16, 0.1, 0.2, 0.3, 5e-324, -5e-324, 2.2250738585072014e-308, 4.49423283715579e307, 0.0]
    vals += [-0.0] + [rng.uniform(-1, 1) * 10.0 ** rng.randint(-30, 30) for _ in range(20000)]
    vals += [2.0**k for k in range(-1074, 1000, 7)] + [-(2.0**k) * 1.5 for k in range(-1000, 1000, 13)]
    want = _exact_mean(vals)
    table = pa.table({"x": pa.array(vals, pa.float64())})
    con = duckdb.connect()
    con.register("t", table)
    con.execute("CREATE VIEW t1 AS SELECT *, row_number() OVER () AS r FROM t")
    run = lambda sql: con.execute(sql).fetchall()  # noqa: E731
    thirds = [f"(SELECT x FROM t1 WHERE r % 3 = {k})" for k in range(3)]
    for parts in (["t"], thirds):
        assert repr(bounded.column_stats(run, parts, [("x", "x")], quantiles=())["x"]["mean"]) == repr(want)
    assert repr(signal_stats(daft, daft.from_arrow(table), ["x"])["x"]["mean"]) == repr(want)
