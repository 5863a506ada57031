"""Boilerplate's global step, one partition: the memory and CPU of summing it, the code before (a tree given by
``--baseline-tree``: the pairs sorted by an index, ``argsort`` then gathered) against this tree's (sorted and
summed in the arrays they were read into, ``core.boilerplate.sum_counts_in_place``).

A partition's memory sets the partition count (``PARTITION_EXPANSION``: its pairs' bytes times this, within
``memory_budget``), so what is reported is the marginal peak RSS a pair between two partition sizes (fixed
costs cancel), beside the total. Synthetic count spills in the stage's layout (``core.lsh.write_partitioned``:
uint64 line key, uint64 document count), one partition: ``--shards`` files, 2% of each file's keys shared by
every file (a snapshot's frequent lines: few of its distinct lines, as in real pages), the others each in one.
Each run is a fresh process (``python -P``, the tree on ``PYTHONPATH``) that first sums a tiny partition
(imports and kernels loaded), then the measured one with ``stages.boilerplate.stage.merge_partitions``; peak RSS
growth from /proc's VmHWM. The two trees alternated, every run kept.

``--stage dedup`` measures dedup's global phase the same way (its partitions are read by the same
``core.lsh.read_partitions``): one partition of band spills (``bucket``, ``node``) bucketed into candidate edges
by ``stages.dedup.phases.bucket_partitions``, against the 4x its partitions are sized at; ``--stage exact`` one
partition of its exact-key spills (``hi``, ``lo``, ``node``: 24 bytes a row) bucketed into exact-duplicate edges;
``--stage unit`` both, as a unit reads them (9 band rows and an exact key a document: the 168 bytes a document the
stage sizes its partitions by).

    python benchmarks/bench_boilerplate_sum.py --baseline-tree /tmp/bp-base --pairs 2000000,8000000 --runs 3
    python benchmarks/bench_boilerplate_sum.py --stage dedup --baseline-tree /tmp/bp-base --runs 3
    python benchmarks/bench_boilerplate_sum.py --stage exact --baseline-tree /tmp/bp-base --runs 3
    python benchmarks/bench_boilerplate_sum.py --render  (and --stage dedup|exact --render)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks.proc_stats import run_in_tree  # noqa: E402
from benchmarks.results import measure_or_render  # noqa: E402

_BOILERPLATE_CHILD = """
import json, sys
from benchmarks.proc_stats import cpu, hwm
from airflow_curation.stages.boilerplate.stage import merge_partitions

out, warm, spills = sys.argv[1], sys.argv[2], sys.argv[3:]
merge_partitions(0, 1, warm.split(","), 10, out)
base, c0 = hwm(), cpu()
stats = merge_partitions(0, 1, spills, 10, out)
print(json.dumps({"rss_growth": hwm() - base, "cpu_s": cpu() - c0, "frequent": stats["frequent_lines"],
                  "distinct": stats["distinct_lines"]}))
"""

_DEDUP_CHILD = """
import json, sys
from benchmarks.proc_stats import cpu, hwm
from airflow_curation.stages.dedup.phases import DedupParams, bucket_partitions

out, warm, spills = sys.argv[1], sys.argv[2].split(","), sys.argv[3:]
def go(uris):
    bands = [u for u in uris if u.endswith(".bands.arrow")]
    exact = [u for u in uris if u.endswith(".exact.arrow")]
    params = DedupParams(near=bool(bands), exact=bool(exact))
    return bucket_partitions(0, 1, bands, exact, [], params, 1, 1, out, out + ".exact")
go(warm)
base, c0 = hwm(), cpu()
stats = go(spills)
print(json.dumps({"rss_growth": hwm() - base, "cpu_s": cpu() - c0,
                  "result": [stats["candidates"], stats["exact_edges"]]}))
"""


def write_spills(folder: str, shards: int, pairs: int, seed: int) -> list[str]:
    """``shards`` count spills of one partition, ``pairs`` (key, count) pairs in all, 2% of each file's keys
    shared by every file."""
    import numpy as np

    from airflow_curation.core.lsh import write_partitioned

    rng = np.random.default_rng(seed)
    each = pairs // shards
    shared = rng.integers(1, 2**63, each // 50, dtype=np.uint64)
    uris = []
    for s in range(shards):
        k = np.concatenate([shared, rng.integers(1, 2**63, each - len(shared), dtype=np.uint64)])
        uri = os.path.join(folder, f"p{pairs}-s{s:03d}.keys.arrow")
        write_partitioned(uri, {"key": k, "docs": rng.integers(1, 4, len(k), dtype=np.uint64)}, np.zeros(len(k)))
        uris.append(uri)
    return uris


def write_band_spills(folder: str, shards: int, rows: int, seed: int) -> list[str]:
    """``shards`` band spills of dedup (``bucket``, ``node``: a shard's node keys share their high word, as the
    stage writes them) of one partition, ``rows`` in all; 1% of each file's rows in buckets every file shares."""
    import numpy as np

    from airflow_curation.core.lsh import write_partitioned

    rng = np.random.default_rng(seed)
    each = rows // shards
    uris = []
    for s in range(shards):
        bucket = rng.integers(1, 2**63, each, dtype=np.uint64)
        bucket[: each // 100] = np.arange(each // 100, dtype=np.uint64)
        node = (np.uint64(s) << np.uint64(32)) | np.arange(each, dtype=np.uint64)
        uri = os.path.join(folder, f"b{rows}-s{s:03d}.bands.arrow")
        write_partitioned(uri, {"bucket": bucket, "node": node}, np.zeros(each))
        uris.append(uri)
    return uris


def write_exact_spills(folder: str, shards: int, rows: int, seed: int) -> list[str]:
    """``shards`` exact-key spills of dedup (``hi``, ``lo``: a document's 128-bit hash; ``node``) of one partition,
    ``rows`` in all; 1% of each file's rows are documents every file holds."""
    import numpy as np

    from airflow_curation.core.lsh import write_partitioned

    rng = np.random.default_rng(seed)
    each = rows // shards
    uris = []
    for s in range(shards):
        hi, lo = rng.integers(1, 2**63, (2, each), dtype=np.uint64)
        hi[: each // 100], lo[: each // 100] = np.arange(each // 100, dtype=np.uint64), 7
        node = (np.uint64(s) << np.uint64(32)) | np.arange(each, dtype=np.uint64)
        uri = os.path.join(folder, f"x{rows}-s{s:03d}.exact.arrow")
        write_partitioned(uri, {"hi": hi, "lo": lo, "node": node}, np.zeros(each))
        uris.append(uri)
    return uris


def write_unit_spills(folder: str, shards: int, documents: int, seed: int) -> list[str]:
    """What one unit of dedup's global phase reads for a partition: band spills of 9 rows a document and exact-key
    spills of one, as :func:`write_band_spills` and :func:`write_exact_spills` write them."""
    return write_band_spills(folder, shards, 9 * documents, seed) + write_exact_spills(folder, shards, documents, seed)


class Stage(NamedTuple):
    json: Path
    block: str
    title: str
    child: str
    spills: Callable[[str, int, int, int], list[str]]
    rows: str  # the rows, in the table and its prose
    row: str  # one of them
    step: str  # what the child runs
    found: str  # what both trees must find alike
    row_bytes: int = 16


STAGES = {
    "boilerplate": Stage(
        REPO / "benchmarks" / "results" / "boilerplate_sum.json",
        "boilerplate_sum",
        "## Boilerplate's global step: a partition summed in place",
        _BOILERPLATE_CHILD,
        write_spills,
        "pairs",
        "pair",
        "count spills, summed by `merge_partitions`",
        "distinct and frequent lines",
    ),
    "dedup": Stage(
        REPO / "benchmarks" / "results" / "dedup_partition.json",
        "dedup_partition",
        "## Dedup's global phase: a partition's memory",
        _DEDUP_CHILD,
        write_band_spills,
        "band rows",
        "row",
        "band spills (1% of rows in buckets all share), bucketed into candidate edges by `bucket_partitions`",
        "candidate edges",
    ),
    "exact": Stage(
        REPO / "benchmarks" / "results" / "dedup_exact_partition.json",
        "dedup_exact_partition",
        "## Dedup's global phase: a partition's exact keys",
        _DEDUP_CHILD,
        write_exact_spills,
        "exact-key rows",
        "row",
        "exact-key spills (1% of rows documents all share), bucketed into exact-duplicate edges by `bucket_partitions`",
        "exact-duplicate edges",
        24,
    ),
    "unit": Stage(
        REPO / "benchmarks" / "results" / "dedup_unit_partition.json",
        "dedup_unit_partition",
        "## Dedup's global phase: a unit's partition, bands and exact keys",
        _DEDUP_CHILD,
        write_unit_spills,
        "documents",
        "document",
        "band and exact-key spills (9 band rows and one exact key a document), bucketed by `bucket_partitions`",
        "candidate and exact-duplicate edges",
        16 * 9 + 24,
    ),
}


def measure(args) -> dict:
    sizes = [int(x) for x in args.pairs.split(",")]
    trees = {"before": os.path.abspath(args.baseline_tree), "after": str(REPO)}
    stage = STAGES[args.stage]
    results = {
        "command": "python " + " ".join(sys.argv),
        "stage": args.stage,
        "shards": args.shards,
        "cpus": os.cpu_count(),
        "baseline_tree": args.baseline_tree,
        "runs": {str(n): {v: [] for v in trees} for n in sizes},
    }
    with tempfile.TemporaryDirectory() as folder:
        warm = ",".join(stage.spills(folder, 1, 64, 1))
        spills = {n: stage.spills(folder, args.shards, n, 0) for n in sizes}
        out = os.path.join(folder, "frequent.arrow")
        for r in range(args.runs):
            for n in sizes:
                for v in ("before", "after") if r % 2 == 0 else ("after", "before"):
                    got = run_in_tree(stage.child, trees[v], [out, warm, *spills[n]])
                    results["runs"][str(n)][v].append(got)
                    print(n, v, got, flush=True)
    return results


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def _outcome(run: dict) -> tuple:
    return tuple(run["result"]) if "result" in run else (run["frequent"], run["distinct"])


def render(results: dict) -> str:
    stage = STAGES[results.get("stage", "boilerplate")]
    runs = results["runs"]
    sizes = sorted(int(n) for n in runs)
    loads = [r["load_1min"] for by in runs.values() for v in by.values() for r in v]
    same = all(len({_outcome(r) for v in by.values() for r in v}) == 1 for by in runs.values())
    lines = [
        stage.title,
        "",
        f"Command: `{results['command']}` ({results['cpus']} cores, load {min(loads):.1f}-{max(loads):.1f}); "
        f"before: the tree at `{results['baseline_tree']}`, after: this one. One partition of {results['shards']} "
        f"{stage.step} in a fresh process (kernels loaded first), the trees alternated, "
        f"every run in `{stage.json.relative_to(REPO)}`. Before and after found the same {stage.found} "
        f"in every run of a size: {same}.",
        "",
        f"| {stage.rows} in the partition | MB of {stage.rows} | variant | peak RSS growth (MB), median (min-max) | "
        f"bytes a {stage.row} | CPU-s, median (min-max) |",
        "|---:|---:|---|---|---:|---|",
    ]
    for n in sizes:
        for v in ("before", "after"):
            rss = [r["rss_growth"] / 1e6 for r in runs[str(n)][v]]
            cpu = [r["cpu_s"] for r in runs[str(n)][v]]
            lines.append(
                f"| {n:,} | {n * stage.row_bytes / 1e6:.0f} | {v} | {statistics.median(rss):.0f} ({min(rss):.0f}-{max(rss):.0f}) | "
                f"{statistics.median(rss) * 1e6 / n:.1f} | {statistics.median(cpu):.2f} ({min(cpu):.2f}-{max(cpu):.2f}) |"
            )
    lines.append("")
    for a, b in zip(sizes, sizes[1:]):
        for v in ("before", "after"):
            by_a, by_b = runs[str(a)][v], runs[str(b)][v]
            rss = (_median(by_b, "rss_growth") - _median(by_a, "rss_growth")) / (b - a)
            cpu = (_median(by_b, "cpu_s") - _median(by_a, "cpu_s")) / (b - a) * 1e9
            lines.append(
                f"- {v}, marginal from {a:,} to {b:,} {stage.rows}: **{rss:.1f} bytes of peak RSS a {stage.row}** "
                f"({rss / stage.row_bytes:.2f}x the {stage.row}'s {stage.row_bytes} bytes), {cpu:.0f} CPU ns a {stage.row}"
            )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stage", choices=sorted(STAGES), default="boilerplate")
    p.add_argument("--baseline-tree", help="a checkout of the code before")
    p.add_argument("--pairs", default="2000000,8000000", help="rows in the partition, comma-separated sizes")
    p.add_argument("--shards", type=int, default=16)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--render", action="store_true")
    args = p.parse_args()
    if not args.render and not args.baseline_tree:
        p.error("--baseline-tree is needed to measure")
    stage = STAGES[args.stage]
    measure_or_render(stage.json, stage.block, lambda: measure(args), render, args.render, after="boilerplate_sum")


if __name__ == "__main__":
    main()
