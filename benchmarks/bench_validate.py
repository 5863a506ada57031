"""The same validation query over a generated curated view in DuckDB, Daft and pandas, side by side.

    .venv/bin/python benchmarks/bench_validate.py --gb 1.0 [--workdir /tmp/bench_validate] [--runs 2]
    .venv/bin/python benchmarks/bench_validate.py --scaling --rows 1e6,4e6,10e6 [--before DIR] [--repeats 3]

The view is shards (id, text, source, meta) joined by ``id`` with ``attrs/preprocess`` (word_count,
alpha_ratio, keep, drop_reason) and ``attrs/dedup`` (cluster_id, is_duplicate), as the stages write
them. The query: rows, text bytes, null texts, distinct ids, rows and bytes that survive quality and
dedup, word_count statistics of the curated rows, and rows dropped per reason. Every engine must give
the same answers (checked) before its time counts. GB/s is text bytes of the view / wall seconds.
Also times the whole validate stage (all metrics, histograms, checks, report) with each engine.

``--scaling``: CPU seconds per million rows of the DuckDB engine's distinct-id and cluster-size counts, and
of all its metrics, at several row counts of tiny documents, each measurement in a fresh process; with
``--before DIR`` (a copy of the package from another commit, e.g. ``git archive <rev> airflow_curation |
tar -x -C DIR``) that code and this one alternate, and the report numbers of the two must be equal.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import pyarrow as pa

# BENCH_VALIDATE_CODE: the package to measure (--scaling's children), default this checkout's.
sys.path.insert(0, os.environ.get("BENCH_VALIDATE_CODE") or os.path.join(os.path.dirname(__file__), ".."))

from results import RESULTS, replace_block  # noqa: E402  (benchmarks/ is this script's folder)

from airflow_curation.core.layout import Lake  # noqa: E402
from airflow_curation.core.manifest import Manifest, ShardEntry, UnitEntry  # noqa: E402
from airflow_curation.core.schema import SHARD_SCHEMA  # noqa: E402
from airflow_curation.core.shards import write_parquet  # noqa: E402

DOC_BYTES = 2000
ROWS_PER_SHARD = 50_000


def generate(
    workdir: str, gb: float, seed: int = 0, rows: int | None = None, doc_bytes: int = DOC_BYTES
) -> tuple[str, int]:
    """Write the lake once (reused when present); returns (manifest URI, text bytes). ``rows`` documents of
    about ``doc_bytes`` bytes each, or ``gb`` of text in documents of ``DOC_BYTES``."""
    lake = Lake(workdir, "bench")
    uri = lake.manifest_uri("bench", "dedup")
    marker = os.path.join(workdir, f"done-{gb}" if rows is None else f"done-{rows}x{doc_bytes}")
    if os.path.exists(marker):
        return uri, int(open(marker).read())
    rng = np.random.default_rng(seed)
    vocab = np.array(
        ["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), rng.integers(2, 10))) for _ in range(20_000)]
    )
    pool = " ".join(vocab[rng.integers(0, len(vocab), 4_000_000)])  # ~24 MB of words to cut documents from
    total_rows = int(gb * 1e9 / doc_bytes) if rows is None else rows
    shards, text_bytes, k = [], 0, 0
    while k * ROWS_PER_SHARD < total_rows:
        n = min(ROWS_PER_SHARD, total_rows - k * ROWS_PER_SHARD)
        sid = f"part-{k:05d}"
        lengths = rng.integers(doc_bytes // 4, doc_bytes * 7 // 4, n)
        starts = rng.integers(0, len(pool) - doc_bytes * 2, n)
        texts = [pool[s : s + ln] for s, ln in zip(starts, lengths)]
        ids = [f"{sid}-{i}" for i in range(n)]
        text_bytes += int(lengths.sum())
        table = pa.table({"id": ids, "text": texts, "source": ["gen"] * n, "meta": ["{}"] * n}, schema=SHARD_SCHEMA)
        nbytes, checksum = write_parquet(lake.shard_uri(sid), table, row_group_rows=4096)
        wc = (lengths // 6).astype(np.int64)
        keep = wc >= doc_bytes * 3 // 40  # 150 words at DOC_BYTES
        pre = pa.table(
            {
                "id": ids,
                "word_count": wc,
                "alpha_ratio": rng.uniform(0.5, 0.95, n),
                "keep": keep,
                "drop_reason": pa.array(np.where(keep, None, "too_short").tolist(), pa.string()),
            }
        )
        write_parquet(lake.attrs_uri("preprocess", sid), pre, row_group_rows=4096)
        cluster = rng.integers(0, int(n * 0.8), n)
        _, first = np.unique(cluster, return_index=True)
        dup = np.ones(n, dtype=bool)
        dup[first] = False
        dd = pa.table({"id": ids, "cluster_id": [f"{sid}-c{c}" for c in cluster], "is_duplicate": dup})
        write_parquet(lake.attrs_uri("dedup", sid), dd, row_group_rows=4096)
        shards.append(
            ShardEntry(
                shard_id=sid,
                uri=lake.shard_uri(sid),
                rows=n,
                bytes=nbytes,
                checksum=checksum,
                unit_id=sid,
                attrs={"preprocess": lake.attrs_uri("preprocess", sid), "dedup": lake.attrs_uri("dedup", sid)},
            )
        )
        k += 1
    m = Manifest(
        dataset="bench",
        stage="dedup",
        run_id="bench",
        fingerprint="bench",
        lake=lake.to_dict(),
        units=[UnitEntry(unit_id=s.shard_id, inputs=[s.uri], input_checksum=s.checksum, status="done") for s in shards],
        shards=shards,
        status="complete",
    )
    m.write(uri)
    with open(marker, "w") as f:
        f.write(str(text_bytes))
    return uri, text_bytes


def files(manifest: Manifest) -> tuple[list[str], list[str], list[str]]:
    return (
        [s.uri for s in manifest.shards],
        [s.attrs["preprocess"] for s in manifest.shards],
        [s.attrs["dedup"] for s in manifest.shards],
    )


def q_duckdb(shards, pre, dd, threads: int) -> dict:
    import duckdb

    con = duckdb.connect()
    con.execute(f"SET threads = {threads}")
    lst = lambda fs: "[" + ", ".join(f"'{f}'" for f in fs) + "]"  # noqa: E731
    con.execute(f"""CREATE VIEW docs AS SELECT s.id, s.text, p.word_count, p.keep, p.drop_reason, d.is_duplicate
        FROM read_parquet({lst(shards)}) s LEFT JOIN read_parquet({lst(pre)}) p ON p.id = s.id
        LEFT JOIN read_parquet({lst(dd)}) d ON d.id = s.id""")
    row = con.execute("""SELECT count(*), sum(strlen(text)), count(*) - count(text), count(DISTINCT id),
        count(*) FILTER (WHERE keep), count(*) FILTER (WHERE keep AND NOT is_duplicate),
        sum(strlen(text)) FILTER (WHERE keep AND NOT is_duplicate),
        min(word_count) FILTER (WHERE keep AND NOT is_duplicate), max(word_count) FILTER (WHERE keep AND NOT is_duplicate),
        avg(word_count) FILTER (WHERE keep AND NOT is_duplicate) FROM docs""").fetchone()
    reasons = dict(
        con.execute("SELECT drop_reason, count(*) FROM docs WHERE drop_reason IS NOT NULL GROUP BY 1").fetchall()
    )
    return _result(row, reasons)


def q_daft(shards, pre, dd) -> dict:
    import daft
    from daft import col

    s = daft.read_parquet(shards).select("id", "text")
    p = daft.read_parquet(pre).select(col("id").alias("pid"), "word_count", "keep", "drop_reason")
    d = daft.read_parquet(dd).select(col("id").alias("did"), "is_duplicate")
    df = s.join(p, left_on="id", right_on="pid", how="left").join(d, left_on="id", right_on="did", how="left")
    df = df.with_column("nbytes", col("text").length_bytes()).with_column(
        "cur", col("keep").fill_null(False) & ~col("is_duplicate").fill_null(False)
    )
    i64 = daft.DataType.int64()
    curated = df.where(col("cur"))
    agg = df.agg(
        col("nbytes").count().alias("rows"),
        col("nbytes").sum().alias("bytes"),
        col("text").is_null().cast(i64).sum().alias("nulls"),
        col("keep").fill_null(False).cast(i64).sum().alias("kept"),
        col("cur").cast(i64).sum().alias("cur"),
        (col("cur").cast(i64) * col("nbytes")).sum().alias("cur_bytes"),
    ).to_pydict()
    distinct = df.select("id").distinct().count_rows()
    wc = curated.agg(
        col("word_count").min().alias("lo"), col("word_count").max().alias("hi"), col("word_count").mean().alias("mean")
    ).to_pydict()
    g = df.where(col("drop_reason").not_null()).groupby("drop_reason").agg(col("id").count().alias("n")).to_pydict()
    row = (
        agg["rows"][0],
        agg["bytes"][0],
        agg["nulls"][0],
        distinct,
        agg["kept"][0],
        agg["cur"][0],
        agg["cur_bytes"][0],
        wc["lo"][0],
        wc["hi"][0],
        wc["mean"][0],
    )
    return _result(row, dict(zip(g["drop_reason"], g["n"])))


def q_pandas(shards, pre, dd) -> dict:
    import pandas as pd

    s = pd.concat([pd.read_parquet(f, columns=["id", "text"]) for f in shards], ignore_index=True)
    p = pd.concat(
        [pd.read_parquet(f, columns=["id", "word_count", "keep", "drop_reason"]) for f in pre], ignore_index=True
    )
    d = pd.concat([pd.read_parquet(f, columns=["id", "is_duplicate"]) for f in dd], ignore_index=True)
    df = s.merge(p, on="id", how="left").merge(d, on="id", how="left")
    nbytes = df["text"].str.encode("utf-8").str.len()
    cur = df["keep"].fillna(False).astype(bool) & ~df["is_duplicate"].fillna(False).astype(bool)
    wc = df.loc[cur, "word_count"]
    row = (
        len(df),
        int(nbytes.sum()),
        int(df["text"].isna().sum()),
        int(df["id"].nunique()),
        int(df["keep"].fillna(False).sum()),
        int(cur.sum()),
        int(nbytes[cur].sum()),
        wc.min(),
        wc.max(),
        wc.mean(),
    )
    return _result(row, df["drop_reason"].dropna().value_counts().to_dict())


def daft_ray_child(args) -> None:
    import daft
    import ray

    t = time.perf_counter()
    ray.init(num_cpus=os.cpu_count() or 2, include_dashboard=False)
    daft.set_runner_ray()
    startup = time.perf_counter() - t
    uri, _ = generate(args.workdir, args.gb)
    shards, pre, dd = files(Manifest.read(uri))
    best, result = float("inf"), None
    for _ in range(args.runs):
        t = time.perf_counter()
        result = q_daft(shards, pre, dd)
        best = min(best, time.perf_counter() - t)
    ray.shutdown()
    print(json.dumps({"result": result, "seconds": best, "startup": startup}))


def _result(row, reasons) -> dict:
    keys = ["rows", "bytes", "null_text", "distinct_ids", "kept", "curated", "curated_bytes", "wc_min", "wc_max"]
    out = {k: int(v) for k, v in zip(keys, row[:9])}
    out["wc_mean"] = round(float(row[9]), 6)
    out["reasons"] = {str(k): int(v) for k, v in sorted(reasons.items())}
    return out


def stage_run(uri: str, workdir: str, engine: str, run_id: str) -> float:
    import shutil

    from airflow_curation.stages.base import StageRunner
    from airflow_curation.stages.validate import ValidateStage

    lake = Lake(workdir, "bench")
    # Measure the work, not a checkpoint hit from an earlier run with the same data and checks.
    shutil.rmtree(lake.path("_checkpoints", "validate"), ignore_errors=True)
    stage = ValidateStage(lake, {"input_manifest": uri, "query_engine": engine, "max_duplicate_rate": 0.5}, run_id)
    t = time.perf_counter()
    StageRunner(stage).run()
    return time.perf_counter() - t


SCALING_DOC_BYTES = 16


def scaling_child(manifest_uri: str, threads: int) -> None:
    """One measurement, in this fresh process: the counts alone, then every metric (which counts them again)."""
    import hashlib
    import resource

    from airflow_curation.stages.validate.query_engines import DuckDBEngine
    from airflow_curation.stages.validate.view import CuratedView

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    engine = DuckDBEngine(CuratedView.from_manifest(Manifest.read(manifest_uri), related=[]), threads=threads)
    t0 = cpu()
    counts = {"distinct_ids": engine._distinct_ids(), "clusters": engine._clusters()}
    t1 = cpu()
    metrics = engine.metrics()
    t2 = cpu()
    engine.close()
    digest = hashlib.sha256(json.dumps(_stable(metrics), sort_keys=True, default=str).encode()).hexdigest()[:16]
    with open("/proc/self/status") as f:  # this process's peak (ru_maxrss keeps the parent's across exec)
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
    print(
        json.dumps(
            {
                "counts_cpu_s": t1 - t0,
                "metrics_cpu_s": t2 - t1,
                "peak_rss_mib": rss,
                "digest": digest,
                "distinct_ids": counts["distinct_ids"],
                "clusters": counts["clusters"]["clusters"],
            }
        )
    )


CURATED_SIGNALS = ["preprocess.alpha_ratio", "preprocess.word_count"]


def curated_child(manifest_uri: str, threads: int) -> None:
    """One measurement of the curated rows' statistics alone (what a curated ``bounds`` check, and so a split
    run's merge, computes: each group of shards joined with its attrs and filtered, several passes)."""
    import hashlib
    import resource

    from airflow_curation.stages.validate.query_engines import DuckDBEngine
    from airflow_curation.stages.validate.view import CuratedView

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    view = CuratedView.from_manifest(Manifest.read(manifest_uri), related=[])
    engine = DuckDBEngine(view, threads=threads)
    cols = [view.column(c) for c in CURATED_SIGNALS]
    t0 = cpu()
    stats = engine._signals(cols, groups=view.shard_groups(engine.group_rows))
    t1 = cpu()
    engine.close()
    digest = hashlib.sha256(json.dumps(stats, sort_keys=True, default=repr).encode()).hexdigest()[:16]
    with open("/proc/self/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
    print(json.dumps({"curated_cpu_s": t1 - t0, "peak_rss_mib": rss, "digest": digest, "stats": stats}, default=repr))


def _stable(x):
    """The metrics but the means to 12 digits: DuckDB's ``avg`` of doubles over several threads adds in the order
    the threads finish, so a mean's last bits differ from run to run of the same code."""
    if isinstance(x, dict):
        return {k: (f"{v:.12g}" if k == "mean" and isinstance(v, float) else _stable(v)) for k, v in x.items()}
    if isinstance(x, list):
        return [_stable(v) for v in x]
    return x


def scaling(args) -> None:
    import statistics
    import subprocess

    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    codes = {"after": here} if not args.before else {"before": os.path.abspath(args.before), "after": here}
    sizes = [int(float(r)) for r in args.rows.split(",")]
    uris = {
        rows: generate(os.path.join(args.workdir, f"rows-{rows}"), 0.0, rows=rows, doc_bytes=SCALING_DOC_BYTES)[0]
        for rows in sizes
    }
    runs: dict[str, dict[str, list[dict]]] = {str(rows): {name: [] for name in codes} for rows in sizes}
    for rep in range(args.repeats):  # alternated: every size and code once per round, so load drifts touch all
        for rows in sizes:
            for name, code in codes.items():
                child = "--curated-child" if args.curated else "--scaling-child"
                proc = subprocess.run(
                    [sys.executable, __file__, child, uris[rows], "--threads", str(args.threads)],
                    capture_output=True,
                    text=True,
                    env={**os.environ, "BENCH_VALIDATE_CODE": code, "PYTHONPATH": code},
                )
                if proc.returncode != 0:
                    raise RuntimeError(f"{name} at {rows} rows failed:\n{proc.stderr[-3000:]}")
                got = json.loads(proc.stdout.strip().splitlines()[-1])
                runs[str(rows)][name].append(got)
                print(f"{rows:>11,} rows  {name:6s} run {rep + 1}: {json.dumps(got)}", flush=True)
    for rows in sizes:
        digests = {r["digest"] for name in codes for r in runs[str(rows)][name]}
        assert len(digests) == 1, f"the metrics differ at {rows} rows: {digests}"
    table = []
    cpus = ("curated_cpu_s",) if args.curated else ("counts_cpu_s", "metrics_cpu_s")
    for rows in sizes:
        for name in codes:
            rs = runs[str(rows)][name]
            med = {k: statistics.median(r[k] for r in rs) for k in (*cpus, "peak_rss_mib")}
            spread = {k: (min(r[k] for r in rs), max(r[k] for r in rs)) for k in (*cpus, "peak_rss_mib")}
            table.append({"rows": rows, "code": name, "median": med, "range": spread})
            if args.curated:
                print(f"{rows:>11,} rows  {name:6s} {json.dumps(med)}", flush=True)
                continue
            print(
                f"{rows:>11,} rows  {name:6s} counts {med['counts_cpu_s'] / rows * 1e6:6.3f} CPU-s/M rows, "
                f"metrics {med['metrics_cpu_s'] / rows * 1e6:6.3f} CPU-s/M rows, peak RSS {med['peak_rss_mib']:.0f} MiB",
                flush=True,
            )
    out = {
        "command": " ".join(sys.argv),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_average": os.getloadavg(),
        "doc_bytes": SCALING_DOC_BYTES,
        "threads": args.threads,
        "table": table,
        "runs": runs,
    }
    path = _scaling_json(args.name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {path}")
    if args.results:
        (write_curated_results if args.curated else write_scaling_results)(out, args.name)


def _scaling_json(name: str) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", f"{name}.json")


# --name: each comparison's RESULTS.md block and JSON, and what its *before* and *after* codes are
SCALING_SECTIONS = {
    "bench_validate_scaling": (
        "Validate: linear in rows (`benchmarks/bench_validate.py --scaling`)",
        "*before* (one filtered scan per 1 M ids) and *after* (one scan routed into spilled hash partitions)",
    ),
    "bench_validate_select": (
        "Validate: quantiles by selection in Arrow/numpy (`benchmarks/bench_validate.py --scaling --name "
        "bench_validate_select`)",
        "*before* (main: DuckDB `quantile_cont` in batches of columns of at most 8 M values, one scan of every "
        "attrs file per batch) and *after* (`quantile_cont` only where every column fits one query, else selection "
        "passes read in Arrow and counted in numpy: `stages/validate/arrow_scan.py`)",
    ),
    "bench_validate_curated": (
        "Validate: the curated rows' statistics in Arrow/numpy (`benchmarks/bench_validate.py --scaling --curated "
        "--name bench_validate_curated`)",
        "*before* (main: the histogram and selection passes as DuckDB's filtered `histogram()`/`list()` aggregates, "
        "one query per part and pass) and *after* (each part's rows streamed from DuckDB as Arrow record batches, "
        "binned in numpy by `stages/validate/arrow_scan.py`, the first pass spilling the signals to a local Parquet "
        "file that the later passes read instead of joining again)",
    ),
}


def _cells(t: dict, key: str, fmt: str = ".2f") -> str:
    """``median (min-max)`` of one measure of a table row."""
    m, (lo, hi) = t["median"][key], t["range"][key]
    return f"{m:{fmt}} ({lo:{fmt}}-{hi:{fmt}})"


def _write_section(out: dict, name: str, what: str, columns: list[str], row, after: str) -> None:
    """The ``name`` block of RESULTS.md: title, ``what`` (the method), the machine, and a table of ``columns``
    with ``row(t)`` for each row of ``out["table"]``."""
    title, _ = SCALING_SECTIONS[name]
    load = ", ".join(f"{x:.1f}" for x in out["load_average"])
    lines = [
        f"## {title}",
        "",
        what,
        f"**Machine: 2 cores shared with other helpers' work (load average {load} at the end).**",
        *([f"Note: {out['note']}"] if out.get("note") else []),
        "",
        "| " + " | ".join(columns) + " |",
        "| " + " | ".join("---" for _ in columns) + " |",
        *(row(t) for t in out["table"]),
    ]
    replace_block(RESULTS, name, "\n".join(lines), after=after)
    print(f"wrote the {name} section of {RESULTS}")


def _method(out: dict, name: str) -> str:
    """What both sections' method says first: the command, the JSON, the lakes."""
    return (
        f"Command: `.venv/bin/python {out['command']}` (run {out['when']}; JSON: `benchmarks/results/{name}.json`). "
        f"Lakes of tiny documents ({out['doc_bytes']} bytes of text, shards of {ROWS_PER_SHARD:,} rows, "
        "attrs/preprocess and attrs/dedup); "
    )


def write_scaling_results(out: dict, name: str = "bench_validate_scaling") -> None:
    """The ``name`` block of RESULTS.md, from the JSON ``scaling`` writes."""
    codes = SCALING_SECTIONS[name][1]
    what = _method(out, name) + (
        f"each run a fresh process; {codes} alternated (each round runs every size with each code), median of "
        f"{len(next(iter(out['runs'].values()))['after'])} rounds (min-max); DuckDB threads={out['threads']}, "
        "default `ids_per_pass` (1 M). *counts*: the distinct ids and "
        "cluster sizes alone; *metrics*: every metric of the report (which counts them again). Both codes gave "
        "the same metrics at every size (a digest of the whole block, means to 12 digits: DuckDB's parallel `avg` "
        "moves their last bits from run to run of the same code)."
    )
    columns = ["rows", "code", "counts CPU-s", "counts CPU-s per M rows", "metrics CPU-s", "metrics CPU-s per M rows"]

    def row(t: dict) -> str:
        m, mrows = t["median"], t["rows"] / 1e6
        return (
            f"| {t['rows']:,} | {t['code']} | {_cells(t, 'counts_cpu_s')} | {m['counts_cpu_s'] / mrows:.2f} | "
            f"{_cells(t, 'metrics_cpu_s')} | {m['metrics_cpu_s'] / mrows:.2f} | {m['peak_rss_mib']:.0f} |"
        )

    _write_section(out, name, what, [*columns, "peak RSS MiB"], row, after="bench_validate")


def write_curated_results(out: dict, name: str) -> None:
    """The ``name`` block of RESULTS.md for ``--curated`` (the curated rows' statistics alone)."""
    codes = SCALING_SECTIONS[name][1]
    what = _method(out, name) + (
        "the statistics of `alpha_ratio` and `word_count` over the curated rows "
        "(`DuckDBEngine._signals(groups=...)`: what a curated `bounds` check, and so a split run's merge, computes; "
        "default `group_rows`, 100,000 rows per part); each run a fresh process; "
        f"{codes} alternated, median of {len(next(iter(out['runs'].values()))['after'])} runs (min-max); DuckDB "
        f"threads={out['threads']}. Both codes gave the same statistics, bit for bit (a digest of them)."
    )

    def row(t: dict) -> str:
        mrows = t["rows"] / 1e6
        return (
            f"| {t['rows']:,} | {t['code']} | {_cells(t, 'curated_cpu_s')} | "
            f"{t['median']['curated_cpu_s'] / mrows:.2f} | {_cells(t, 'peak_rss_mib', '.0f')} |"
        )

    columns = ["rows", "code", "CPU-s", "CPU-s per M rows", "peak RSS MiB"]
    _write_section(out, name, what, columns, row, after="bench_validate_select")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=1.0, help="text bytes of the view, in GB (default 1)")
    ap.add_argument("--workdir", default="/tmp/bench_validate")
    ap.add_argument("--runs", type=int, default=2, help="best of N per engine")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--skip-pandas", action="store_true")
    ap.add_argument("--no-results", dest="results", action="store_false", help="do not update RESULTS.md")
    ap.add_argument("--no-ray", dest="ray", action="store_false", help="skip Daft on a local Ray")
    ap.add_argument("--daft-ray-only", action="store_true", help=argparse.SUPPRESS)  # the Ray child process
    ap.add_argument("--scaling", action="store_true", help="CPU-s per M rows of the counts at --rows")
    ap.add_argument("--rows", default="1e6,4e6,10e6", help="--scaling: row counts, comma-separated")
    ap.add_argument("--repeats", type=int, default=3, help="--scaling: runs per row count and code (median)")
    ap.add_argument("--before", help="--scaling: a copy of the package to compare with (alternated)")
    ap.add_argument(
        "--name",
        default="bench_validate_scaling",
        choices=sorted(SCALING_SECTIONS),
        help="--scaling: the RESULTS.md block and results/NAME.json",
    )
    ap.add_argument("--render", action="store_true", help="--scaling: rewrite the NAME block from its JSON only")
    ap.add_argument("--curated", action="store_true", help="--scaling: the curated rows' statistics alone")
    ap.add_argument("--curated-child", help=argparse.SUPPRESS)  # one --curated measurement: the manifest
    ap.add_argument("--scaling-child", help=argparse.SUPPRESS)  # one --scaling measurement: the manifest
    args = ap.parse_args()
    if args.daft_ray_only:
        return daft_ray_child(args)
    if args.curated_child:
        return curated_child(args.curated_child, args.threads)
    if args.scaling_child:
        return scaling_child(args.scaling_child, args.threads)
    if args.scaling and args.render:
        with open(_scaling_json(args.name)) as f:
            return (write_curated_results if args.curated else write_scaling_results)(json.load(f), args.name)
    if args.scaling:
        return scaling(args)

    t = time.perf_counter()
    uri, text_bytes = generate(args.workdir, args.gb)
    print(f"view: {text_bytes / 1e9:.2f} GB of text, generated/reused in {time.perf_counter() - t:.1f} s", flush=True)
    shards, pre, dd = files(Manifest.read(uri))
    engines = {"duckdb": lambda: q_duckdb(shards, pre, dd, args.threads), "daft": lambda: q_daft(shards, pre, dd)}
    if not args.skip_pandas:
        engines["pandas"] = lambda: q_pandas(shards, pre, dd)
    results, times = {}, {}
    if args.ray:
        # Daft's runner is chosen once per process: Daft on Ray runs in a child (Ray start-up not timed).
        import subprocess

        proc = subprocess.run(
            [
                sys.executable,
                __file__,
                "--daft-ray-only",
                "--gb",
                str(args.gb),
                "--workdir",
                args.workdir,
                "--runs",
                str(args.runs),
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "RAY_AUTH_MODE": "disabled"},
        )
        if proc.returncode != 0:
            raise RuntimeError(f"daft-ray child failed:\n{proc.stderr[-3000:]}")
        child = json.loads(proc.stdout.strip().splitlines()[-1])
        results["daft-ray"], times["daft-ray"] = child["result"], child["seconds"]
        print(
            f"{'daft-ray':8s} {times['daft-ray']:7.2f} s  {text_bytes / 1e9 / times['daft-ray']:6.3f} GB/s "
            f"(Ray start-up {child['startup']:.1f} s, not counted)",
            flush=True,
        )
    for name, fn in engines.items():
        best = float("inf")
        for _ in range(args.runs if name != "pandas" else 1):
            t = time.perf_counter()
            results[name] = fn()
            best = min(best, time.perf_counter() - t)
        times[name] = best
        print(f"{name:8s} {best:7.2f} s  {text_bytes / 1e9 / best:6.3f} GB/s", flush=True)
    order = [k for k in ("duckdb", "daft", "daft-ray", "pandas") if k in times]
    times = {k: times[k] for k in order}
    ref = results["duckdb"]
    for name, r in results.items():
        for k in ref:
            if k == "wc_mean":
                assert abs(r[k] - ref[k]) < 1e-6 * max(1.0, abs(ref[k])), (name, k, r[k], ref[k])
            else:
                assert r[k] == ref[k], (name, k, r[k], ref[k])
    print("all engines agree:", json.dumps(ref))
    for name in times:
        print(f"{name} time / duckdb time: {times[name] / times['duckdb']:.2f}x")
    stage_times = {}
    for engine in ("duckdb", "daft"):
        secs = stage_times[engine] = stage_run(uri, args.workdir, engine, f"stage-{engine}-{int(time.time())}")
        print(
            f"validate stage ({engine}, all metrics + histograms + checks + report): {secs:.2f} s "
            f"{text_bytes / 1e9 / secs:.3f} GB/s",
            flush=True,
        )
    if args.results:
        write_results(args, text_bytes, ref, times, stage_times)


def write_results(args, text_bytes: int, ref: dict, times: dict, stage_times: dict) -> None:
    gb = text_bytes / 1e9
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [
        "## Validate: the same validation query in DuckDB, Daft and pandas (`benchmarks/bench_validate.py`)",
        "",
        f"Command: `.venv/bin/python benchmarks/bench_validate.py --gb {args.gb} --runs {args.runs}` "
        f"(run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}).",
        f"Data: a generated curated view, {gb:.2f} GB of text in {ref['rows']:,} documents (zstd shards of "
        f"{ROWS_PER_SHARD:,} rows) joined by `id` with attrs/preprocess and attrs/dedup. Query: rows, text bytes, "
        "null texts, distinct ids, rows/bytes surviving quality and dedup, word_count min/max/mean of the curated "
        "rows, drops per reason; every engine's answer is checked equal to DuckDB's before its time counts. "
        f"Best of {args.runs} (pandas: 1). DuckDB threads={args.threads}; Daft native runner, and Daft on a local "
        "Ray (all cores; Ray start-up not counted); pandas reads with pyarrow and merges in memory.",
        f"**Machine: 2 cores shared with other engineers' test suites (load average {load} at the end of the "
        "run), so absolute figures are noisy; the ratios come from the same run.**",
        "",
        "| engine | seconds | GB/s of text | time vs DuckDB |",
        "| --- | --- | --- | --- |",
    ]
    for name, t in times.items():
        lines.append(f"| {name} | {t:.2f} | {gb / t:.3f} | {t / times['duckdb']:.2f} |")
    lines += [
        "",
        "The whole validate stage (all metrics, one-scan histograms of the signals, cluster sizes, checks, "
        "JSON + HTML report) on the same view:",
        "",
        "| engine | seconds | GB/s of text |",
        "| --- | --- | --- |",
    ]
    for name, t in stage_times.items():
        lines.append(f"| validate stage, {name} | {t:.2f} | {gb / t:.3f} |")
    replace_block(RESULTS, "bench_validate", "\n".join(lines))
    print(f"wrote the bench_validate section of {RESULTS}")


if __name__ == "__main__":
    main()
