"""Dedup's global phase and phase 3 on kept signatures, two trees of the code alternated on the same lakes.

    .venv/bin/python benchmarks/bench_dedup_global_ab.py --a /tmp/base --b /tmp/tree --lakes L8,L16
        [--rounds 3] [--memory-budget 134217728] [--full] [--json benchmarks/results/dedup_global_ab.json]

Each lake is a scale curve's lake (``bench_scale.py --curve dedup --keep-lakes``) whose dedup ran once: its
signatures (phase 1's checkpoints and spill files) are kept, and before every run the global phase's outputs,
phase 3's checkpoints and the dedup attrs are removed, so each run does the global phase and phase 3 again
from the same spill (``--full``: the signatures are removed too, and every phase runs again). A run is
``curation dedup`` in a fresh process with the tree's code first on the path (``--workers 1``, the curve's
memory budget); its user and system CPU seconds, wall seconds and peak RSS come from ``wait4``. Trees
alternate in rotating order within a round, lakes in turn; the page cache is left as it is (the spill was just
written in a real run). Every run is kept; each lake's clusters must be the same in every run (a digest of
``cluster_id`` and ``is_duplicate`` in manifest order).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from airflow_curation.core.layout import Lake  # noqa: E402
from airflow_curation.core.manifest import Manifest  # noqa: E402

DATASET = "scale"


def clear(lake: Lake, full: bool = False) -> None:
    """The global phase's outputs (every run-key folder with a ``_SUCCESS.json``), phase 3's checkpoints, the
    dedup attrs: the signatures (their checkpoints, the spill) stay. ``full``: the signatures too (every phase
    runs again)."""
    if full:
        for parts in (("dedup",), ("_checkpoints", "dedup_signatures")):
            shutil.rmtree(lake.path(*parts), ignore_errors=True)
    for done in Path(lake.path("dedup")).glob("*/_SUCCESS.json"):
        shutil.rmtree(done.parent)
    for parts in (("attrs", "dedup"), ("_checkpoints", "dedup")):
        shutil.rmtree(lake.path(*parts), ignore_errors=True)


def digest(manifest: Manifest) -> str:
    import pyarrow.parquet as pq

    h = hashlib.blake2b(digest_size=8)
    for s in manifest.shards:
        t = pq.read_table(s.attrs["dedup"], columns=["cluster_id", "is_duplicate"])
        h.update(str(t.column("cluster_id").to_pylist()).encode())
        h.update(str(t.column("is_duplicate").to_pylist()).encode())
    return h.hexdigest()


def run(tree: Path, lake: Lake, budget: int) -> dict:
    rid = f"ab-{time.time_ns()}"
    args = ["dedup", "--lake", lake.root, "--dataset", DATASET, "--workers", "1", "--run-id", rid]
    args += ["--input-manifest", _upstream(lake), "--memory-budget", str(budget)]
    code = f"import sys; sys.path.insert(0, {str(tree)!r}); from airflow_curation.cli import main; sys.exit(main())"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    load = os.getloadavg()[0]
    t = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-P", "-c", code, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    out = proc.stdout.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    if status:
        raise SystemExit(f"{tree}: curation dedup failed:\n{out[-3000:]}")
    manifest = Manifest.read(lake.manifest_uri(rid, "dedup"))
    packed = [line for line in out.splitlines() if "packed into" in line]
    return {
        "user_s": usage.ru_utime,
        "sys_s": usage.ru_stime,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "wall_s": wall,
        "peak_rss_mib": usage.ru_maxrss / 1024,
        "load_before": load,
        "clusters": digest(manifest),
        "packed": packed[-1].split("dedup: ", 1)[-1] if packed else None,
    }


def _upstream(lake: Lake) -> str:
    """The preprocess manifest the lake's curve runs read (the one run id under _manifests that has it)."""
    (found,) = Path(lake.path("_manifests")).glob("*/preprocess.json")
    return lake.manifest_uri(found.parent.name, "preprocess")


def table(doc: dict) -> str:
    lines = [
        "| lake | tree | CPU s, every run | median | user / system, median | wall s, median | peak RSS MiB |",
        "| --- | --- | --- | ---: | --- | ---: | ---: |",
    ]
    for lake, trees in doc["runs"].items():
        for name, runs in trees.items():
            cpu = [r["cpu_s"] for r in runs]
            lines.append(
                f"| {Path(lake).name} | {name} | {', '.join(f'{c:.1f}' for c in cpu)} | {statistics.median(cpu):.1f} | "
                f"{statistics.median(r['user_s'] for r in runs):.1f} / {statistics.median(r['sys_s'] for r in runs):.1f} | "
                f"{statistics.median(r['wall_s'] for r in runs):.1f} | {max(r['peak_rss_mib'] for r in runs):.0f} |"
            )
        a, b = (statistics.median(r["cpu_s"] for r in trees[t]) for t in ("a", "b"))
        lines.append(f"| {Path(lake).name} | a / b | | **{a / b:.2f}x** | | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", type=Path, help="tree A (e.g. a git archive of main)")
    ap.add_argument("--b", type=Path, help="tree B")
    ap.add_argument("--lakes", help="lake folders, comma-separated")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--memory-budget", type=int, default=128 << 20)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--full", action="store_true", help="phase 1 too: the signatures are removed before every run")
    ap.add_argument("--report", type=Path, help="print the table of a JSON written before")
    args = ap.parse_args(argv)
    if args.report:
        print(table(json.loads(args.report.read_text())))
        return 0
    lakes = [Lake(p, DATASET) for p in args.lakes.split(",")]
    doc = {
        "params": {
            "a": str(args.a),
            "b": str(args.b),
            "rounds": args.rounds,
            "budget": args.memory_budget,
            "full": args.full,
        }
    }
    doc["runs"] = {lake.root: {"a": [], "b": []} for lake in lakes}
    for r in range(args.rounds):
        for lake in lakes:
            for name in ("a", "b") if r % 2 == 0 else ("b", "a"):
                clear(lake, args.full)
                rec = run(getattr(args, name), lake, args.memory_budget)
                doc["runs"][lake.root][name].append(rec)
                print(
                    f"round {r + 1} {Path(lake.root).name} {name}: {rec['cpu_s']:.1f} CPU s {rec['packed'] or ''}",
                    flush=True,
                )
                if args.json:
                    args.json.write_text(json.dumps(doc, indent=1) + "\n")
    clusters = {lake: {x["clusters"] for t in trees.values() for x in t} for lake, trees in doc["runs"].items()}
    doc["clusters_identical"] = all(len(c) == 1 for c in clusters.values())
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    print(table(doc))
    if not doc["clusters_identical"]:
        raise SystemExit(f"the clusters differ between runs: {clusters}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
