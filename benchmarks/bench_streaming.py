"""Per-shard streaming between ingest and preprocess: the overlap the validate report's timeline measures.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_streaming.py [--mb 24] [--files 8]

Real text (Debian handbook + Python docs pages, as bench_minhash) as ``--files`` JSONL files; ingest runs as a
job (``python -m airflow_curation.jobs run``, one unit per file), preprocess's job is started as soon as
ingest has written its planned manifest (what the DAG's ``ingest_first_shards`` gate does), then dedup and
validate. Printed: the report's timeline (first start, last end per stage, from the checkpoint records) and
the overlap seconds, with streaming on and, for the peer, off (``stream=False``: preprocess waits for the
complete ingest manifest, as before). Wall time: the point is the overlap, not CPU cost.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_minhash import corpus  # noqa: E402

from airflow_curation.core.layout import Lake  # noqa: E402
from airflow_curation.core.manifest import Manifest  # noqa: E402
from airflow_curation.jobs.spec import JobSpec  # noqa: E402


def job(work: Path, lake: Lake, stage: str, config: dict) -> subprocess.Popen:
    spec = JobSpec(stage, lake.to_dict(), "bench", config)
    path = work / f"{lake.dataset}-{stage}.json"
    path.write_text(spec.to_json())
    log = open(work / f"{lake.dataset}-{stage}.log", "w")
    return subprocess.Popen([sys.executable, "-m", "airflow_curation.jobs", "run", str(path)], stdout=log, stderr=log)


def pipeline(work: Path, inputs: Path, stream: bool) -> dict:
    lake = Lake(str(work / "lake"), "stream" if stream else "wait", "2026-12-01")
    t0 = time.time()
    ingest = job(work, lake, "ingest", {"inputs": [str(inputs)], "unit_bytes": 1})
    uri = lake.manifest_uri("bench", "ingest")
    while not os.path.exists(uri):  # the planned manifest: the earliest a gate can open
        time.sleep(0.05)
    pre = job(work, lake, "preprocess", {"input_manifest": uri, "stream": stream, "stream_poll_s": 0.2})
    for p in (ingest, pre):
        if p.wait() != 0:
            raise SystemExit(f"a job failed: see {work}")
    for stage, upstream in (("dedup", "preprocess"), ("validate", "dedup")):
        p = job(work, lake, stage, {"input_manifest": lake.manifest_uri("bench", upstream)})
        if p.wait() != 0:
            raise SystemExit(f"{stage} failed: see {work}")
    wall = time.time() - t0
    report = json.loads(open(Manifest.read(lake.manifest_uri("bench", "validate")).config["report_json"]).read())
    return {"wall": wall, "timeline": report["timeline"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=24.0)
    ap.add_argument("--files", type=int, default=8)
    args = ap.parse_args()
    docs = corpus(args.mb)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        inputs = work / "in"
        inputs.mkdir()
        for k in range(args.files):
            with open(inputs / f"part-{k:02d}.jsonl", "w") as f:
                for i, text in enumerate(docs[k :: args.files]):
                    f.write(json.dumps({"id": f"{k}-{i}", "text": text}) + "\n")
        print(f"{len(docs)} documents, {args.mb:g} MB in {args.files} files (one ingest unit each)")
        print(
            "| preprocess | ingest span s | preprocess span s | preprocess started after ingest's start s | "
            "overlap s | preprocess started before ingest ended | wall s (ingest to validate) |"
        )
        print("| --- | ---: | ---: | ---: | ---: | --- | ---: |")
        for stream in (True, False):
            r = pipeline(work, inputs, stream)
            st = r["timeline"]["stages"]
            ing, pre = st["ingest"], st["preprocess"]
            o = next(x for x in r["timeline"]["overlaps"] if (x["upstream"], x["stage"]) == ("ingest", "preprocess"))
            print(
                f"| {'streaming' if stream else 'waits for ingest'} | {ing['end'] - ing['start']:.2f} | "
                f"{pre['end'] - pre['start']:.2f} | {pre['start'] - ing['start']:.2f} | {o['overlap_s']:.2f} | "
                f"{'yes' if o['started_before_upstream_ended'] else 'no'} | {r['wall']:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
