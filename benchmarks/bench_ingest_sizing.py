"""Ingest shard sizes against the target when the same data comes as 1 file or thousands of small ones.

    .venv/bin/python benchmarks/bench_ingest_sizing.py [--mb 50] [--files 1,3733,17083]
        [--target 1572864] [--codes new=.,old=/path/to/old/checkout] [--repeat 3] [--no-results]

The data is the first ``--mb`` MB of benchmarks/bench_ingest.py's first JSONL file (generated once), cut
into N files of equal line counts. Each run is ``curation ingest`` in a fresh child process with
``--target-shard-size``; ``--codes`` names source trees to run (PYTHONPATH), so the code before and after
a change run alternated on the same files. Reported per tree and layout: units, shards, shard bytes /
target (min, median, max over the non-last shards and the last one), rows, CPU-s (median and spread).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_ingest import _measure, generate  # noqa: E402
from results import RESULTS, replace_block  # noqa: E402


def split(source: Path, mb: float, n_files: int, out: Path) -> Path:
    """The first ``mb`` MB of ``source`` (whole lines) as ``n_files`` files of equal line counts."""
    folder = out / f"{mb:g}mb-{n_files}-files"
    if (folder / ".done").exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    lines, size = [], 0
    with open(source, "rb") as f:
        for line in f:
            if size + len(line) > mb * 1e6:
                break
            lines.append(line)
            size += len(line)
    per = -(-len(lines) // n_files)
    for k in range(n_files):
        chunk = lines[k * per : (k + 1) * per]
        if chunk:
            (folder / f"part-{k:06d}.jsonl").write_bytes(b"".join(chunk))
    (folder / ".done").write_text(str(len(lines)))
    return folder


def run(code: Path, folder: Path, lake: Path, target: int) -> dict:
    shutil.rmtree(lake, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(code.resolve())}
    # -P: the working directory is not put first on sys.path, so PYTHONPATH picks the tree.
    cmd = [sys.executable, "-P", "-c", "import sys; from airflow_curation.cli import main; sys.exit(main())", "ingest"]
    cmd += [str(folder), "--lake", str(lake), "--dataset", "d", "--run-id", "r", "--target-shard-size", str(target)]
    seconds, cpu, rss, _ = _measure(cmd, env=env)
    manifest = json.loads((lake / "d" / "_manifests" / "r" / "ingest.json").read_text())
    sizes = [s["bytes"] / target for s in manifest["shards"]]
    return {
        "units": len(manifest["units"]),
        "shards": len(sizes),
        "rows": sum(s["rows"] for s in manifest["shards"]),
        "size_over_target": sizes,
        "cpu_s": cpu,
        "wall_s": seconds,
        "rss_mb": rss / 1e6,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=50)
    ap.add_argument("--files", default="1,3733,17083")
    ap.add_argument("--target", type=int, default=1536 * 1024, help="target_shard_bytes")
    ap.add_argument("--codes", default=f"new={HERE.parent}", help="name=source tree, comma-separated")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", default=str(HERE / "data" / "ingest"))
    ap.add_argument("--no-results", action="store_true")
    args = ap.parse_args(argv)
    work = Path(args.workdir)
    [source] = generate(work / "input", 1)
    layouts = {int(n): split(source, args.mb, int(n), work / "sizing") for n in args.files.split(",")}
    codes = {name: Path(path) for name, path in (c.split("=", 1) for c in args.codes.split(","))}
    runs: dict[tuple[str, int], list[dict]] = {}
    for _ in range(args.repeat):  # alternated: every tree and layout once per round
        for name, code in codes.items():
            for n, folder in layouts.items():
                runs.setdefault((name, n), []).append(run(code, folder, work / "sizing-lake", args.target))
    rows_out = []
    print(
        f"{'code':<6} {'files':>6} {'units':>6} {'shards':>6} {'min':>5} {'median':>6} {'max':>5} {'last':>5} {'rows':>7} {'CPU s':>14}"
    )
    for (name, n), rs in runs.items():
        first = rs[0]
        body = first["size_over_target"][:-1] or first["size_over_target"]
        cpus = [r["cpu_s"] for r in rs]
        line = {
            "code": name,
            "files": n,
            "units": first["units"],
            "shards": first["shards"],
            "min": min(body),
            "median": statistics.median(body),
            "max": max(first["size_over_target"]),
            "last": first["size_over_target"][-1],
            "rows": first["rows"],
            "cpu_median": statistics.median(cpus),
            "cpu_min": min(cpus),
            "cpu_max": max(cpus),
            "runs": rs,
        }
        rows_out.append(line)
        print(
            f"{name:<6} {n:>6} {line['units']:>6} {line['shards']:>6} {line['min']:>5.2f} {line['median']:>6.2f} "
            f"{line['max']:>5.2f} {line['last']:>5.2f} {line['rows']:>7} "
            f"{line['cpu_median']:>6.2f} ({line['cpu_min']:.2f}-{line['cpu_max']:.2f})",
            flush=True,
        )
    if len({r["rows"] for r in rows_out}) != 1:
        raise SystemExit("layouts disagree on rows")
    if args.no_results:
        return 0
    load = os.getloadavg()[0]
    out = HERE / "results" / "ingest_sizing.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "load_1min_end": load, "rows": rows_out}, indent=1) + "\n")
    table = "\n".join(
        f"| {r['code']} | {r['files']} | {r['units']} | {r['shards']} | {r['min']:.2f} | {r['median']:.2f} | "
        f"{r['max']:.2f} | {r['last']:.2f} | {r['rows']} | {r['cpu_median']:.2f} ({r['cpu_min']:.2f}-{r['cpu_max']:.2f}) |"
        for r in rows_out
    )
    replace_block(
        RESULTS,
        "bench_ingest_sizing",
        f"""## Ingest: shard sizes whatever the number of input files (`benchmarks/bench_ingest_sizing.py`)

Command: `.venv/bin/python benchmarks/bench_ingest_sizing.py --mb {args.mb:g} --files {args.files} \\
--target {args.target} --codes {args.codes} --repeat {args.repeat}`
(run {time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, load average {load:.1f} on 2 shared cores; JSON: `benchmarks/results/ingest_sizing.json`).
The same {args.mb:g} MB of bench_ingest's JSONL as 1 file or N files of equal line counts, `curation ingest
--target-shard-size {args.target}`. Shard size / target: min and median over the shards but the last,
max over all, and the last shard. CPU s: median (min-max) of {args.repeat} alternated runs.

| code | files | units | shards | min | median | max | last | rows | CPU s |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
{table}
""",
        after="bench_ingest",
    )
    print("wrote benchmarks/RESULTS.md and", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
