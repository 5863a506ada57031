"""Preprocess A/B at stage level on a lake of the scale corpus: two code trees, fresh processes, alternated.

The lake is ingested once (``curation ingest --workers 1``, 1.5 MB shards of 1,024-row groups, as
``bench_scale.py``'s ``run_size`` does) from JSONL files of ``scale_corpus.py``; every run then removes the
preprocess stage's state (attrs, checkpoints, tallies, manifest) and runs ``curation preprocess --workers 1
--mapper local`` on the ingest manifest, pinned to one CPU (``--mapper default``: no ``--mapper`` nor
``--workers``, what a user's task on one core runs). Per run: CPU s (user + system of the child,
``wait4``), wall, peak RSS, load, and the SHA-256 of every attrs table written (Arrow IPC bytes of each
table, in shard order), so that the trees are compared on what they wrote, not on Parquet's metadata.

    PYTHONPATH=$PWD python benchmarks/bench_preprocess_lake.py --a /work/main --b $PWD --rounds 5 --cpu 1 \\
        --lake /tmp/lake --jsonl <dir>/input-00{0..9}.jsonl --out benchmarks/results/preprocess_lake_ab.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_ingest import CURATION, _measure  # noqa: E402

from airflow_curation.core.layout import Lake  # noqa: E402
from airflow_curation.core.manifest import Manifest  # noqa: E402

DATASET = "scale"
INGEST_RUN = "ingest"
# -P: the code on PYTHONPATH, never a checkout in the working directory
CMD = [CURATION[0], "-P", *CURATION[1:]]


def ingest(lake: Path, jsonl: list[str], tree: str) -> None:
    if (lake / DATASET / "_manifests" / INGEST_RUN / "ingest.json").exists():
        return
    args = ["ingest", *jsonl, "--lake", str(lake), "--dataset", DATASET, "--workers", "1", "--run-id", INGEST_RUN]
    args += ["--target-shard-size", str(1_500_000), "--row-group-rows", "1024"]
    _measure([*CMD, *args], {**os.environ, "PYTHONPATH": tree})


def outputs_sha256(manifest: Manifest) -> str:
    h = hashlib.sha256()
    for shard in manifest.shards:
        table = pq.read_table(shard.attrs["preprocess"]).combine_chunks()
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        h.update(shard.shard_id.encode() + b"\0" + sink.getvalue().to_pybytes())
    return h.hexdigest()


def one_run(lake: Path, tree: str, run_id: str, mapper: str = "local") -> dict:
    root = lake / DATASET
    for sub in ("attrs/preprocess", "_checkpoints/preprocess", f"_manifests/{run_id}"):
        shutil.rmtree(root / sub, ignore_errors=True)
    (root / "_locks" / "preprocess.lease").unlink(missing_ok=True)
    ingest_manifest = str(root / "_manifests" / INGEST_RUN / "ingest.json")
    args = ["preprocess", "--lake", str(lake), "--dataset", DATASET, "--run-id", run_id]
    args += ["--input-manifest", ingest_manifest]
    if mapper != "default":
        args += ["--workers", "1", "--mapper", mapper]
    load = os.getloadavg()[0]
    wall, cpu, rss, _ = _measure([*CMD, *args], {**os.environ, "PYTHONPATH": tree})
    manifest = Manifest.read(Lake(str(lake), DATASET).manifest_uri(run_id, "preprocess"))
    if manifest.status != "complete":
        raise RuntimeError(f"preprocess: manifest status {manifest.status}")
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_rss": rss,
        "rows": manifest.rows,
        "load": [load, os.getloadavg()[0]],
        "outputs_sha256": outputs_sha256(manifest),
    }


def summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="tree A (the baseline)")
    ap.add_argument("--b", required=True, help="tree B (the change)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cpu", type=int, default=1, help="the CPU every run is pinned to")
    ap.add_argument("--lake", required=True, help="where the lake is (ingested once from --jsonl if missing)")
    ap.add_argument("--jsonl", nargs="+", required=True, help="the scale corpus's JSONL files")
    ap.add_argument("--out", required=True, help="the JSON record")
    ap.add_argument("--mapper", default="local", choices=("local", "dask", "default"), help="default: the stage's own")
    args = ap.parse_args()
    os.sched_setaffinity(0, {args.cpu})  # the children inherit it
    lake = Path(args.lake)
    trees = {"A": os.path.abspath(args.a), "B": os.path.abspath(args.b)}
    ingest(lake, args.jsonl, trees["B"])
    jsonl_mb = sum(os.path.getsize(f) for f in args.jsonl) / 1e6
    record = {"jsonl_mb": jsonl_mb, "files": args.jsonl, "trees": trees, "cpu": args.cpu, "mapper": args.mapper}
    record["runs"] = []
    for who, tree in trees.items():  # numba's on-disk cache of each tree, and the page cache: not measured
        one_run(lake, tree, f"warm-{who}", args.mapper)
    for r in range(args.rounds):
        for who in ("A", "B") if r % 2 == 0 else ("B", "A"):
            run = {"round": r, "who": who, **one_run(lake, trees[who], f"r{r}-{who}", args.mapper)}
            run["mb_per_cpu_s"] = jsonl_mb / run["cpu_s"]
            record["runs"].append(run)
            print(json.dumps({k: v for k, v in run.items() if k != "outputs_sha256"}), flush=True)
        cpu = {x["who"]: x["cpu_s"] for x in record["runs"] if x["round"] == r}
        record["runs"][-1]["a_over_b"] = cpu["A"] / cpu["B"]
    for who in trees:
        mine = [x for x in record["runs"] if x["who"] == who]
        record[who] = {k: summary([x[k] for x in mine]) for k in ("cpu_s", "mb_per_cpu_s", "wall_s", "peak_rss")}
    record["a_over_b_cpu"] = summary([x["a_over_b"] for x in record["runs"] if "a_over_b" in x])
    record["a_over_b_cpu"]["per_round"] = [x["a_over_b"] for x in record["runs"] if "a_over_b" in x]
    record["outputs_identical"] = len({x["outputs_sha256"] for x in record["runs"]}) == 1
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    for who in trees:
        s = record[who]
        print(
            f"{who}: CPU s {s['cpu_s']['median']:.2f} ({s['cpu_s']['min']:.2f}-{s['cpu_s']['max']:.2f}), "
            f"{s['mb_per_cpu_s']['median']:.1f} MB/s of JSONL per core"
        )
    s = record["a_over_b_cpu"]
    print(
        f"A/B CPU per round: median {s['median']:.3f} ({s['min']:.3f}-{s['max']:.3f}); "
        f"outputs identical: {record['outputs_identical']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
