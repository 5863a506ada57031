"""Validate's Daft quantiles: exact (``daft_stats.signal_stats``) against the ``approx_percentiles`` it replaced.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_daft_quantiles.py [--rows 2000000] [--columns 3]
        [--repeats 3] [--json benchmarks/results/daft_quantiles.json]

A Parquet file of ``--rows`` rows and ``--columns`` float64 columns (normal values, 30% small-integer ties,
5% nulls), read by Daft's native runner. Per mode, wall and CPU seconds of this process for count, min, max,
mean and the five quantiles of every column: ``approx`` (one agg with ``approx_percentiles``, the old
code) and ``exact`` (the new code). Modes alternated, ``--repeats`` times each; median and spread (min-max)
printed and written as JSON, with each mode's largest relative difference from DuckDB's ``quantile_cont``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def _table(rows: int, columns: int) -> pa.Table:
    rng = np.random.default_rng(0)
    cols = {}
    for c in range(columns):
        v = rng.normal(0, 1e3, rows)
        ties = rng.random(rows) < 0.3
        v[ties] = rng.integers(0, 6, ties.sum())
        cols[f"c{c}"] = pa.array(v, mask=rng.random(rows) < 0.05)
    return pa.table(cols)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--columns", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    import daft

    from airflow_curation.stages.validate import bounded
    from airflow_curation.stages.validate.daft_stats import signal_stats

    path = os.path.join(tempfile.mkdtemp(), "t.parquet")
    pq.write_table(_table(args.rows, args.columns), path)
    names = [f"c{c}" for c in range(args.columns)]
    qs = list(bounded.QUANTILES)
    want = duckdb.sql("SELECT " + ", ".join(f"quantile_cont({n}, {qs})" for n in names) + f" FROM '{path}'").fetchall()[
        0
    ]

    def approx():
        df = daft.read_parquet(path)
        g = df.agg(*[daft.col(n).approx_percentiles(qs).alias(n) for n in names]).to_pydict()
        return [g[n][0] for n in names]

    def exact():
        got = signal_stats(daft, daft.read_parquet(path), names)
        return [[got[n][f"p{int(round(q * 100)):02d}"] for q in qs] for n in names]

    modes = {"approx": approx, "exact": exact}
    times: dict[str, dict[str, list[float]]] = {m: {"wall": [], "cpu": []} for m in modes}
    error = {}
    for _ in range(args.repeats):
        for m, fn in modes.items():
            w, c = time.perf_counter(), time.process_time()
            got = fn()
            times[m]["wall"].append(time.perf_counter() - w)
            times[m]["cpu"].append(time.process_time() - c)
            error[m] = max(abs(g - x) / max(abs(x), 1e-300) for gs, xs in zip(got, want) for g, x in zip(gs, xs))
    out = {"rows": args.rows, "columns": args.columns, "repeats": args.repeats, "load": os.getloadavg()[0]}
    for m in modes:
        out[m] = {k: {"median": statistics.median(v), "min": min(v), "max": max(v)} for k, v in times[m].items()} | {
            "max_rel_error_vs_duckdb": error[m]
        }
        t = out[m]
        print(
            f"{m:7s} wall {t['wall']['median']:.2f} s ({t['wall']['min']:.2f}-{t['wall']['max']:.2f}), "
            f"cpu {t['cpu']['median']:.2f} s ({t['cpu']['min']:.2f}-{t['cpu']['max']:.2f}), "
            f"max rel. error vs DuckDB {error[m]:.2e}"
        )
    print(f"exact/approx wall: {out['exact']['wall']['median'] / out['approx']['wall']['median']:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
