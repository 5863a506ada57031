"""Ingest's memory on a unit whose every record is bad: a quarantine writer that held every entry to the unit's
end (before) against one that spills them in row groups (after, ``core/quarantine.py``).

One JSONL file of ``--lines`` short lines that are not JSON (``{bad 123``), ingested as one unit in a child
process of each code (``git archive`` of ``--base`` against this tree), alternated, ``--runs`` rounds; each child
reports its peak RSS (VmHWM) and CPU seconds, and the quarantine's rows are checked against the lines. Two sizes
give the marginal bytes a bad record.

Usage: ``python benchmarks/bench_quarantine_memory.py [--lines 500000,2000000] [--runs 3] [--base main]
[--write-results]``; ``--render`` rewrites the RESULTS.md section from the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULT_JSON = HERE / "results" / "quarantine_memory.json"

CHILD = """
import json, sys
sys.path.insert(0, {bench!r})
from proc_stats import cpu, hwm
from airflow_curation.core.layout import Lake
import pyarrow.parquet as pq
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.ingest.stage import IngestStage
base_rss = hwm()
lake = Lake({lake!r}, "junk")
stage = IngestStage(lake, {{"inputs": [{raw!r}]}}, "r1")
m = StageRunner(stage).run()
peak, spent = hwm(), cpu()  # the run's, before anything reads the quarantine
q = pq.ParquetFile(lake.quarantine_uri("ingest", m.units[0].unit_id)).metadata.num_rows
print(json.dumps({{"hwm": peak, "import_hwm": base_rss, "cpu": spent, "quarantined": q, "accounting": m.accounting}}))
"""


def _child(code: Path, root: Path, raw: Path) -> dict:
    lake = root / f"lake-{time.monotonic_ns()}"
    script = CHILD.format(bench=str(HERE), lake=str(lake), raw=str(raw))
    env = {**os.environ, "PYTHONPATH": str(code)}
    out = subprocess.run([sys.executable, "-P", "-c", script], env=env, capture_output=True, text=True, check=True)
    shutil.rmtree(lake, ignore_errors=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _table(data: dict) -> list[str]:
    load = data["load"]
    lines = [
        f"Before: {data['base']}; after: {data['head']}. {data['runs']} rounds, before and after alternated; load "
        f"average {min(load):.1f}-{max(load):.1f} (2 cores). Every run kept.",
        "",
        "| bad lines | file MB | before peak RSS MB, median (min-max) | after peak RSS MB, median (min-max) | "
        "before / after CPU s (medians) |",
        "| ---: | ---: | --- | --- | --- |",
    ]
    mb = 1 << 20
    for n, per in data["sizes"].items():
        cells = []
        for label in ("before", "after"):
            v = [r["hwm"] / mb for r in per[label]]
            cells.append(f"{statistics.median(v):.0f} ({min(v):.0f}-{max(v):.0f})")
        c = [statistics.median(r["cpu"] for r in per[label]) for label in ("before", "after")]
        lines.append(
            f"| {int(n):,} | {per['file_bytes'] / mb:.1f} | {cells[0]} | {cells[1]} | {c[0]:.1f} / {c[1]:.1f} |"
        )
    sizes = list(data["sizes"])
    if len(sizes) >= 2:
        lo, hi = sizes[0], sizes[-1]
        lines.append("")
        for label in ("before", "after"):
            med = {n: statistics.median(r["hwm"] for r in data["sizes"][n][label]) for n in (lo, hi)}
            per_line = (med[hi] - med[lo]) / (int(hi) - int(lo))
            lines.append(f"- {label}: marginal peak RSS {per_line:.0f} bytes a bad line ({int(lo):,} -> {int(hi):,})")
    return lines


def _render(data: dict) -> None:
    sys.path.insert(0, str(HERE))
    from results import RESULTS, replace_block

    parts = [
        "## Ingest's quarantine on a unit of bad records (`benchmarks/bench_quarantine_memory.py`)",
        "",
        f"Command: `.venv/bin/python benchmarks/bench_quarantine_memory.py {data['command']} --write-results` "
        f"(run {data['started']} UTC). JSON: `benchmarks/results/quarantine_memory.json`; `--render` rewrites "
        "this section from it.",
        "",
        *_table(data),
        "",
        "Before: a unit's quarantine entries (each bad record's first 64 KB and its Python objects) were held to the "
        "unit's end: ~815 bytes a bad line, so a 512 MB file of 12-byte junk lines (~45 M) would hold ~36 GB. After: the "
        "writer spills them as row groups of a local file past 16 MB or 50,000 entries (`core/quarantine.py`); "
        "the peak is flat in the bad lines. Every row of the input is still quarantined and counted (checked in "
        "each run: quarantined rows = lines = rows read).",
    ]
    replace_block(RESULTS, "bench_quarantine_memory", "\n".join(parts))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", default="500000,2000000")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--base", default="main")
    ap.add_argument("--write-results", action="store_true")
    ap.add_argument("--render", action="store_true")
    args = ap.parse_args()
    if args.render:
        _render(json.loads(RESULT_JSON.read_text()))
        return
    rev = lambda r: subprocess.run(  # noqa: E731
        ["git", "-C", str(REPO), "rev-parse", "--short", r], capture_output=True, text=True, check=True
    ).stdout.strip()
    data = {
        "command": f"--lines {args.lines} --runs {args.runs} --base {args.base}",
        "base": rev(args.base),
        "head": rev("HEAD"),
        "started": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "runs": args.runs,
        "load": [os.getloadavg()[0]],
        "sizes": {},
    }
    from bench_manifest_scale import _base_tree  # the same git archive of the base's package

    base = _base_tree(args.base)
    root = Path(tempfile.mkdtemp(prefix="bench-quarantine-"))
    try:
        for n in (int(x) for x in args.lines.split(",")):
            raw = root / f"junk-{n}.jsonl"
            with open(raw, "w") as f:
                f.writelines(f"{{bad {i}\n" for i in range(n))
            per = data["sizes"].setdefault(str(n), {"file_bytes": raw.stat().st_size, "before": [], "after": []})
            for r in range(args.runs):
                order = (("before", base), ("after", REPO)) if r % 2 == 0 else (("after", REPO), ("before", base))
                for label, code in order:
                    got = _child(code, root, raw)
                    assert got["quarantined"] == n and got["accounting"]["read"] == n, got
                    per[label].append(got)
                    data["load"].append(os.getloadavg()[0])
                    print(f"{n} {label}: {got['hwm'] >> 20} MB, {got['cpu']:.1f} s", file=sys.stderr)
            raw.unlink()
    finally:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
    print("\n".join(_table(data)))
    if args.write_results:
        RESULT_JSON.write_text(json.dumps(data, indent=1) + "\n")
        _render(data)


if __name__ == "__main__":
    main()
