"""Each stage with numpy's transparent huge pages and without (``core.allocator.use_small_pages``), alternated.

numpy asks the kernel for huge pages on every array of 4 MB or more; the stages now turn that off in their
processes unless ``NUMPY_MADVISE_HUGEPAGE`` is set. This runs the same code both ways, the variable set to 1
(huge pages, numpy's default) or 0, so the difference is the setting alone: ``curation ingest`` of JSONL into a
fresh lake, ``curation preprocess`` and ``curation dedup`` of plain Parquet into a fresh folder, each a fresh
process pinned to one CPU (``--cpu``), user and system CPU seconds and peak RSS from ``wait4``. Every run is
kept; outputs are compared by row count (ingest) and by a digest of the written tables (the others).

    python benchmarks/bench_hugepages.py --jsonl <files> --parquet <files> --rounds 3 --cpu 1
    python benchmarks/bench_hugepages.py --parquet <one large file> --stages preprocess,dedup --name hugepages_one_file
    python benchmarks/bench_hugepages.py --render [--name ...]
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks.results import measure_or_render  # noqa: E402

CURATION = [sys.executable, "-P", "-c", "import sys; from airflow_curation.cli import main; sys.exit(main())"]
SETTINGS = {"huge pages": "1", "small pages": "0"}


def _command(stage: str, args, out: str) -> list[str]:
    if stage == "ingest":
        return [*CURATION, "ingest", *args.jsonl, "--lake", out, "--dataset", "d", "--workers", "1"]
    return [*CURATION, stage, *args.parquet, "--output", out, "--workers", "1", "--mapper", "local"]


def _digest(stage: str, out: str) -> str:
    """What the run wrote: every output table's rows in file order (ingest: the rows its shards hold)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pattern = "**/shards/**/*.parquet" if stage == "ingest" else "*.parquet"
    h = hashlib.sha256()
    for path in sorted(glob.glob(os.path.join(out, pattern), recursive=True)):
        table = pq.read_table(path)
        if stage == "ingest":  # shard names and ids carry the run's own names: its rows are what must agree
            h.update(str(table.num_rows).encode())
            continue
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table.combine_chunks())
        h.update(sink.getvalue().to_pybytes())
    return h.hexdigest()


def _run(cmd: list[str], env: dict, cpu: int) -> dict:
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    os.sched_setaffinity(proc.pid, {cpu})
    _, status, usage = os.wait4(proc.pid, 0)
    if status:
        raise RuntimeError(f"{cmd[3:5]} failed: {proc.stderr.read()[-2000:]}")
    return {"user_s": usage.ru_utime, "sys_s": usage.ru_stime, "peak_rss": usage.ru_maxrss * 1024}


def measure(args) -> dict:
    stages = args.stages.split(",")
    results = {
        "command": "python " + " ".join(sys.argv),
        "name": args.name,
        "cpus": os.cpu_count(),
        "inputs": {"jsonl": args.jsonl, "parquet": args.parquet},
        "runs": {s: {k: [] for k in SETTINGS} for s in stages},
    }
    for r in range(args.rounds):
        for stage in stages:
            for name in SETTINGS if r % 2 == 0 else reversed(SETTINGS):
                env = {**os.environ, "PYTHONPATH": str(REPO), "NUMPY_MADVISE_HUGEPAGE": SETTINGS[name]}
                with tempfile.TemporaryDirectory() as out:
                    got = _run(_command(stage, args, out), env, args.cpu)
                    got["outputs"] = _digest(stage, out)
                got["load_1min"] = round(os.getloadavg()[0], 2)
                results["runs"][stage][name].append(got)
                print(stage, name, got, flush=True)
    return results


def render(results: dict) -> str:
    runs = results["runs"]
    loads = [r["load_1min"] for by in runs.values() for v in by.values() for r in v]
    same = all(len({r["outputs"] for v in by.values() for r in v}) == 1 for by in runs.values())
    title = {"hugepages": "each stage with and without", "hugepages_one_file": "one large input file"}
    lines = [
        f"## numpy's huge pages: {title.get(results['name'], results['name'])} (`benchmarks/bench_hugepages.py`)",
        "",
        f"Command: `{results['command']}` ({results['cpus']} cores, load {min(loads):.1f}-{max(loads):.1f}). The same "
        "code run with `NUMPY_MADVISE_HUGEPAGE=1` (numpy's default) and `=0` (the stages' setting now), alternated, "
        f"a fresh process pinned to one CPU, every run in `benchmarks/results/{results['name']}.json`. The same outputs in "
        f"every run of a stage: {same}.",
        "",
        "| stage | pages | user CPU s, median | system CPU s, median (min-max) | total, median | huge / small |",
        "|---|---|---:|---|---:|---:|",
    ]
    for stage, by in runs.items():
        total = {k: statistics.median(r["user_s"] + r["sys_s"] for r in v) for k, v in by.items()}
        for name, v in by.items():
            sys_s = [r["sys_s"] for r in v]
            ratio = f"**{total['huge pages'] / total['small pages']:.2f}x**" if name == "small pages" else ""
            lines.append(
                f"| {stage} | {name} | {statistics.median(r['user_s'] for r in v):.2f} | "
                f"{statistics.median(sys_s):.2f} ({min(sys_s):.2f}-{max(sys_s):.2f}) | {total[name]:.2f} | {ratio} |"
            )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jsonl", nargs="*", default=[], help="ingest's input files")
    p.add_argument("--parquet", nargs="*", default=[], help="preprocess's and dedup's input (id, text)")
    p.add_argument("--stages", default="ingest,preprocess,dedup")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cpu", type=int, default=1)
    p.add_argument("--name", default="hugepages", help="the JSON in benchmarks/results/ and the RESULTS.md block")
    p.add_argument("--render", action="store_true")
    args = p.parse_args()
    out = REPO / "benchmarks" / "results" / f"{args.name}.json"
    measure_or_render(out, args.name, lambda: measure(args), render, args.render, after="spill_write")


if __name__ == "__main__":
    main()
