"""Validate's means: the exact sums (``stages/validate/bounded.exact_sums_sql``) against DuckDB's ``fsum``, side by
side on the same columns, in one DuckDB connection of one thread.

``--rows`` rows of ``--columns`` float64 columns (uniform values times a power of ten from 1e-3 to 1e3 a column);
each round runs both queries, the order alternated, every run kept (CPU time of the query). Reported: the median
CPU a value of each, and whether the means agree (the exact one against Python's ``Fraction`` of the same values;
``fsum`` over the count is rounded twice). The exact sums are what make a mean the same bit for bit over one part
or several, in DuckDB or Daft (``tests/validate/test_bounded_memory.py``); this is their cost.

    .venv/bin/python benchmarks/bench_exact_mean.py [--rows 2000000 --columns 8 --runs 5] [--render]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from airflow_curation.stages.validate import bounded  # noqa: E402
from benchmarks.results import measure_or_render  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "exact_mean.json"


def _exact_mean(values: np.ndarray) -> float:
    """The values' sum as an integer count of 2**-1074, over their count, rounded once (Python's ints)."""
    total = 0
    for x in values.tolist():
        p, q = x.as_integer_ratio()  # q is a power of two
        total += p << (1074 - (q.bit_length() - 1))
    return float(Fraction(total, len(values) << 1074))


def measure(args) -> dict:
    import duckdb
    import pyarrow as pa

    rng = np.random.default_rng(0)
    cols = [f"s{i}" for i in range(args.columns)]
    table = pa.table({c: rng.random(args.rows) * 10.0 ** rng.integers(-3, 4) for c in cols})
    con = duckdb.connect()
    con.execute("SET threads = 1")
    con.register("t", table)
    queries = {
        "fsum": "SELECT " + ", ".join(f"fsum({c}::DOUBLE)" for c in cols) + " FROM t",
        "exact sums": bounded.exact_sums_sql("t", cols),
    }
    runs: list[dict] = []
    for r in range(args.runs):
        for name in list(queries) if r % 2 == 0 else list(queries)[::-1]:
            load = os.getloadavg()[0]
            t0 = time.process_time()
            got = con.execute(queries[name]).fetchall()
            runs.append({"query": name, "round": r, "cpu_s": time.process_time() - t0, "load": load})
            if name == "fsum":
                means = [v / args.rows for v in got[0]]
            else:
                sums: list[list] = [[] for _ in cols]
                for k, e, hi, lo in got:
                    sums[int(k[1:])].append((e, hi, lo))
                means = [bounded.exact_mean(s, args.rows) for s in sums]
            runs[-1]["means"] = [repr(m) for m in means]
    exact = [repr(_exact_mean(table.column(c).to_numpy())) for c in cols]
    return {
        "command": "python " + " ".join(sys.argv),
        "rows": args.rows,
        "columns": args.columns,
        "cores": os.cpu_count(),
        "runs": runs,
        "exact": exact,
    }


def render(results: dict) -> str:
    values = results["rows"] * results["columns"]
    lines = [
        "## Validate's means: exact sums against `fsum` (`bench_exact_mean.py`)",
        "",
        f"{results['rows']:,} rows x {results['columns']} float64 columns in one DuckDB connection of one thread; "
        "each round runs both queries, the order alternated, every run kept (CPU time of the query). The exact sums "
        "(`bounded.exact_sums_sql`: each value an integer times a power of two, the integers added per exponent) make "
        "a mean the same bit for bit over one part or several and in DuckDB or Daft; `fsum` over the count rounds "
        "twice, and the sum of several parts' `fsum` three times.",
        "",
        "| query | runs | CPU s median (min-max) | ns a value | means equal to the exact rational's |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name in ("fsum", "exact sums"):
        rs = [r for r in results["runs"] if r["query"] == name]
        cpu = [r["cpu_s"] for r in rs]
        equal = sum(m == x for m, x in zip(rs[0]["means"], results["exact"]))
        lines.append(
            f"| {name} | {len(rs)} | {statistics.median(cpu):.3f} ({min(cpu):.3f}-{max(cpu):.3f}) | "
            f"{statistics.median(cpu) / values * 1e9:.1f} | {equal} of {results['columns']} |"
        )
    loads = [r["load"] for r in results["runs"]]
    lines += [
        "",
        f"Load (1-minute average before each run): {min(loads):.1f}-{max(loads):.1f} on {results['cores']} cores. "
        f"JSON: `benchmarks/results/exact_mean.json`. Command: `{results['command']}` (`--render` rebuilds this "
        "block from the JSON).",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--columns", type=int, default=8)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--render", action="store_true")
    args = ap.parse_args()
    measure_or_render(OUT, "bench_exact_mean", lambda: measure(args), render, args.render)


if __name__ == "__main__":
    main()
