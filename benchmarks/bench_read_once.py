"""Bytes fetched and requests sent per unit on S3: one verified read against main's hash-then-parse (issue 20,
item 5: the read bandwidth each row of the 50 TB plan assumes).

A real S3 API on loopback (the tests' ``moto_server``) holds a lake of one ingested shard (synthetic prose,
``--mb`` MB of text) and its preprocess attrs. Two units are measured, each in a fresh process
(``python -P``, ``PYTHONPATH`` = the tree) pinned to one CPU:

- ``preprocess``: one unit of preprocess over the shard (``AttrsStage.process_unit``);
- ``dedup``: one unit of dedup's signature phase over the shard and its preprocess attrs
  (``DedupSignaturesStage.process_unit``).

In the child, every s3fs call the unit makes is counted (``get_object`` requests, their ``ContentLength`` and
which object; ``head_object`` and the rest by name), with the unit's CPU seconds (``time.process_time``) and
wall seconds. The two trees alternate (ABBA...) for ``--runs`` rounds; the JSON keeps every run, the load
before each, the per-tree medians and spread, in ``benchmarks/results/read_once.json``.

    taskset -c 1 .venv/bin/python benchmarks/bench_read_once.py --baseline-tree /work/main --runs 5 --cpu 1
    .venv/bin/python benchmarks/bench_read_once.py --render   # RESULTS.md section from the JSON
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from results import replace_block  # benchmarks/ is this script's folder

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "read_once.json"
BLOCK = "bench_read_once"
KEY = SECRET = "testing"
UNITS = ("preprocess", "dedup")

# One unit in the tree on PYTHONPATH; s3fs's calls counted around process_unit only (not the plan's reads).
CHILD = r"""
import json, sys, time
from collections import Counter
import s3fs
from airflow_curation.core import storage
from airflow_curation.core.layout import Lake
from airflow_curation.core.storage_map import StorageMap

kind, endpoint, bucket, run_id = sys.argv[1:5]
calls, got = Counter(), Counter()
real = s3fs.S3FileSystem._call_s3

async def counting(self, method, *args, **kwargs):
    out = await real(self, method, *args, **kwargs)
    calls[method] += 1
    if method == "get_object":
        got[kwargs["Key"]] += int(out.get("ContentLength") or 0)
    return out

s3fs.S3FileSystem._call_s3 = counting
opts = {"s3": {"key": "testing", "secret": "testing", "endpoint_url": endpoint}}
with storage.using(StorageMap(opts)):
    lake = Lake(f"s3://{bucket}/lake", "web")
    if kind == "preprocess":
        from airflow_curation.stages.preprocess.stage import PreprocessStage
        stage = PreprocessStage(lake, {"input_manifest": lake.manifest_uri("r1", "ingest"), "mapper": "local"}, run_id)
        unit = stage.plan()[0]
    else:
        from airflow_curation.stages.dedup.stage import DedupStage
        d = DedupStage(lake, {"input_manifest": lake.manifest_uri("r1", "preprocess")}, run_id)
        entries = list(d.entries().values())
        shards = [d._shard(e, i)[0] for i, e in enumerate(entries)]
        stage = d._sig_stage(sum(e.rows for e in entries), shards)[0]
        unit = stage.plan()[0]
    inputs = [storage.size(u) for u in unit.inputs]
    calls.clear(); got.clear()
    w, t = time.perf_counter(), time.process_time()
    stage.process_unit(unit)
    cpu, wall = time.process_time() - t, time.perf_counter() - w
mine = {k: v for k, v in got.items() if any(u.endswith("/" + k) for u in unit.inputs)}
print(json.dumps({
    "cpu_s": cpu, "wall_s": wall, "calls": dict(calls), "input_files": len(unit.inputs),
    "input_bytes": sum(inputs), "get_bytes": sum(got.values()), "get_bytes_inputs": sum(mine.values()),
}))
"""


def _prose(mb: float, seed: int = 20) -> list[str]:
    """Documents of English-like prose (common words, sentences, paragraphs) adding up to ``mb`` MB, a tenth
    of them exact copies of others (work for dedup)."""
    words = (
        "the of and to in is was for on that with as by at from his her it an were are which this be or had not "
        "but one all their there been has more when who will would so no if out up about into than them can only "
        "other new some could time these two may then do first any my now such like our over man me even most "
        "made after also did many before must through back years where much your way well down should because "
        "each just those people how too little state good very make world still own see men work long get here"
    ).split()
    rng = random.Random(seed)
    docs: list[str] = []
    size = 0
    while size < mb * 1e6:
        if docs and rng.random() < 0.1:
            doc = rng.choice(docs)
        else:
            paras = []
            for _ in range(rng.randint(2, 6)):
                sents = [" ".join(rng.choices(words, k=rng.randint(8, 20))).capitalize() + "." for _ in range(5)]
                paras.append(" ".join(sents))
            doc = "\n\n".join(paras)
        docs.append(doc)
        size += len(doc)
    return docs


def _start_moto(log: Path) -> tuple[subprocess.Popen, str]:
    """The tests' moto server (``tests/s3/conftest.py``)."""
    sys.path.insert(0, str(REPO / "tests"))
    from s3.conftest import start_moto

    return start_moto(log)


def _lake(endpoint: str, bucket: str, raw: Path) -> dict:
    """Ingest (one shard) and preprocess into ``s3://bucket/lake`` with this tree; what the lake holds."""
    import boto3

    from airflow_curation.core import storage
    from airflow_curation.core.layout import Lake
    from airflow_curation.core.storage_map import StorageMap
    from airflow_curation.stages.base import StageRunner
    from airflow_curation.stages.ingest.stage import IngestStage
    from airflow_curation.stages.preprocess.stage import PreprocessStage

    boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=KEY, aws_secret_access_key=SECRET).create_bucket(
        Bucket=bucket
    )
    with storage.using(StorageMap({"s3": {"key": KEY, "secret": SECRET, "endpoint_url": endpoint}})):
        lake = Lake(f"s3://{bucket}/lake", "web")
        ingest = IngestStage(lake, {"inputs": [str(raw)], "target_shard_bytes": 1 << 30}, "r1")
        m = StageRunner(ingest).run()
        pre = StageRunner(PreprocessStage(lake, {"input_manifest": ingest.manifest_uri, "mapper": "local"}, "r1")).run()
    assert len(m.shards) == 1, len(m.shards)
    s = pre.shards[0]
    return {"rows": m.rows, "shard_bytes": s.bytes, "kept": pre.accounting.get("kept")}


def run(tree: str, kind: str, endpoint: str, bucket: str, run_id: str) -> dict:
    env = {**os.environ, "PYTHONPATH": tree}
    # -P: not the working directory first on sys.path (that checkout would win over PYTHONPATH)
    cmd = [sys.executable, "-P", "-c", CHILD, kind, endpoint, bucket, run_id]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"{kind} in {tree} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.splitlines()[-1])


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def summarise(record: dict) -> dict:
    out: dict = {}
    for kind in UNITS:
        for who in record["trees"]:
            runs = [r for r in record["runs"] if r["who"] == who and r["unit"] == kind]
            cpu = [r["cpu_s"] for r in runs]
            gets = [r["calls"].get("get_object", 0) for r in runs]
            heads = [r["calls"].get("head_object", 0) for r in runs]
            out[f"{kind}/{who}"] = {
                "runs": len(runs),
                "cpu_s_median": _median(cpu),
                "cpu_s_min": min(cpu),
                "cpu_s_max": max(cpu),
                "wall_s_median": _median([r["wall_s"] for r in runs]),
                "gets_median": _median(gets),
                "heads_median": _median(heads),
                "get_bytes_median": _median([r["get_bytes"] for r in runs]),
                "get_bytes_inputs_median": _median([r["get_bytes_inputs"] for r in runs]),
                "input_bytes": runs[0]["input_bytes"],
                "input_files": runs[0]["input_files"],
            }
    return out


def measure(baseline: str, runs: int, mb: float) -> dict:
    trees = {"ours": str(REPO), "baseline": os.path.abspath(baseline)}
    tmp = Path(tempfile.mkdtemp(prefix="read-once-"))
    proc, endpoint = _start_moto(tmp / "moto.log")
    try:
        raw = tmp / "raw"
        raw.mkdir()
        with open(raw / "docs.jsonl", "w") as f:
            for t in _prose(mb):
                f.write(json.dumps({"text": t}) + "\n")
        bucket = "read-once"
        record: dict = {"trees": trees, "text_mb": mb, "load_before": os.getloadavg(), "runs": []}
        record["lake"] = _lake(endpoint, bucket, raw)
        for r in range(runs):
            order = list(trees) if r % 2 == 0 else list(reversed(trees))  # ABBA: neither tree always first
            for kind in UNITS:
                for who in order:
                    load = os.getloadavg()[0]
                    res = run(trees[who], kind, endpoint, bucket, f"bench-{r}-{who}")
                    record["runs"].append({"round": r, "who": who, "unit": kind, "load": load, **res})
                    print(json.dumps(record["runs"][-1]), flush=True)
        record["load_after"] = os.getloadavg()
        record["summary"] = summarise(record)
        return record
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


def render(record: dict) -> str:
    s, lake = record["summary"], record["lake"]
    lines = [
        "## One verified read per unit input (issue 20, item 5: read bandwidth)",
        "",
        f"One unit on a moto S3 lake: one shard of {lake['rows']:,} rows ({record['text_mb']:g} MB of text, "
        f"{lake['shard_bytes'] / 1e6:.1f} MB compressed) and its preprocess attrs. `ours` fetches each checked "
        "input once (one GET), hashes and parses those bytes; `baseline` (main) hashes the file in one "
        "streaming read, then pyarrow reads it again through the fsspec file (HEAD, ranged GETs). "
        f"{len(record['runs'])} runs, trees alternated ABBA, {s['preprocess/ours']['runs']} per tree and unit; "
        f"load (1-min) {record['load_before'][0]:.2f} before, {record['load_after'][0]:.2f} after (2 shared cores). "
        "GETs and HEADs: every such request the unit sent (its output's included), medians; CPU s: the unit's "
        "process time, the S3 client's threads included. "
        "Regenerate: `python benchmarks/bench_read_once.py --render` (data: `benchmarks/results/read_once.json`).",
        "",
        "| unit | tree | input files | input MB | GETs | HEADs | MB fetched (inputs) | fetched / input size "
        "| CPU s median (min-max) | wall s median |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for kind in UNITS:
        for who in ("baseline", "ours"):
            x = s[f"{kind}/{who}"]
            lines.append(
                f"| {kind} | {who} | {x['input_files']} | {x['input_bytes'] / 1e6:.2f} | {x['gets_median']:g} "
                f"| {x['heads_median']:g} | {x['get_bytes_inputs_median'] / 1e6:.2f} "
                f"| {x['get_bytes_inputs_median'] / x['input_bytes']:.2f}x "
                f"| {x['cpu_s_median']:.2f} ({x['cpu_s_min']:.2f}-{x['cpu_s_max']:.2f}) | {x['wall_s_median']:.2f} |"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline-tree", help="the checkout to compare with (main)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--mb", type=float, default=40.0, help="MB of text in the shard")
    ap.add_argument("--cpu", type=int, default=None, help="pin this process and its children to this CPU")
    ap.add_argument("--render", action="store_true", help="only rewrite the RESULTS.md section from the JSON")
    args = ap.parse_args()
    if not args.render:
        if not args.baseline_tree:
            ap.error("--baseline-tree is required to measure")
        if args.cpu is not None:
            os.sched_setaffinity(0, {args.cpu})
        record = measure(args.baseline_tree, args.runs, args.mb)
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(record, indent=1) + "\n")
    record = json.loads(RESULTS.read_text())
    replace_block(REPO / "benchmarks" / "RESULTS.md", BLOCK, render(record))
    print(render(record))


if __name__ == "__main__":
    main()
