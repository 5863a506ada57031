"""Object-store requests of an ingest array's task plans (issue 20, items 2 and 5: the plan's request counts,
measured instead of reasoned).

A real S3 API on loopback (``moto_server``, its access log counts every HTTP request) holds F tiny JSONL input
files in folders of 1,000 and the lake. For an array of N tasks (``min_units`` = N, as an array launch sets it):

- ``listing``: one whole listing and grouping of the inputs (``IngestStage._listed_plan``): what every task of
  an array made before the plan was shared, and what the collect step still makes once per run;
- ``first``: the plan of the first task to take the plan lease (group 0, nothing planned yet): the listing plus
  the lease and the plan's pages written;
- ``later``: the plan of a later task (group ``N // 2``): the run's pointer, the plan's head and its block's
  pages, no listing.

Requests are counted by kind (LIST, HEAD, GET, PUT, DELETE, POST) and by where they go (the inputs or the lake).
Counts, not timings: they do not depend on the machine's load, so one run per size is the figure.

    .venv/bin/python benchmarks/bench_ingest_plan_requests.py --files 2000,20000 --groups 64 --write-results
    .venv/bin/python benchmarks/bench_ingest_plan_requests.py --render   # RESULTS.md section from the JSON
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "ingest_plan_requests.json"
RESULTS_MD = REPO / "benchmarks" / "RESULTS.md"
BEGIN, END = "<!-- bench_ingest_plan_requests:begin -->", "<!-- bench_ingest_plan_requests:end -->"
KEY = SECRET = "testing"
FILES_PER_FOLDER = 1000
_LINE = re.compile(r'"(GET|HEAD|PUT|POST|DELETE) (\S+) HTTP')
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")  # the server colours some lines (404s, partial GETs)


def _start_moto(log: Path) -> tuple[subprocess.Popen, str]:
    """The tests' moto server (``tests/s3/conftest.py``), its access log in ``log``."""
    sys.path.insert(0, str(REPO / "tests"))
    from s3.conftest import start_moto

    return start_moto(log)


def _requests(log: Path, start: int, bucket: str) -> dict[str, dict[str, int]]:
    """The requests logged after byte ``start``, by where (inputs / lake) and kind."""
    with open(log, "rb") as f:
        f.seek(start)
        lines = f.read().decode(errors="replace").splitlines()
    counts: dict[str, Counter] = {"inputs": Counter(), "lake": Counter()}
    for line in lines:
        m = _LINE.search(_COLOUR.sub("", line))
        if not m or not m.group(2).startswith(f"/{bucket}"):
            continue
        method, path = m.groups()
        where = "inputs" if path.startswith(f"/{bucket}/raw") or "prefix=raw" in path else "lake"
        kind = "LIST" if method == "GET" and ("list-type=" in path or path.rstrip("/") == f"/{bucket}") else method
        counts[where][kind] += 1
    return {w: dict(sorted(c.items())) for w, c in counts.items()}


def _upload(endpoint: str, bucket: str, files: int) -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=KEY, aws_secret_access_key=SECRET)
    s3.create_bucket(Bucket=bucket)

    def put(i: int) -> None:
        key = f"raw/{i // FILES_PER_FOLDER:04d}/{i:06d}.jsonl"
        s3.put_object(Bucket=bucket, Key=key, Body=(json.dumps({"text": f"document {i}"}) + "\n").encode())

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, range(files)))


def _plan_requests(log: Path, bucket: str, groups: int) -> dict:
    """The requests of one listing, the first task's plan and a later task's plan (the storage map in effect)."""
    from airflow_curation.core.layout import Lake
    from airflow_curation.core.manifest import group_range
    from airflow_curation.stages.ingest.stage import IngestStage

    lake = Lake(f"s3://{bucket}/lake", "web", "2026-12-03")
    config = {"inputs": [f"s3://{bucket}/raw"], "min_units": groups}
    out: dict = {}

    def counted(name: str, fn):
        time.sleep(0.5)  # the server flushes its log line by line: let the last request's line land
        start = log.stat().st_size
        result = fn()
        time.sleep(0.5)
        out[name] = _requests(log, start, bucket)
        return result

    units = counted("listing", lambda: IngestStage(lake, config, "listing")._listed_plan())

    def first() -> list:
        stage = IngestStage(lake, config, "r1")
        stage.shard_group = (0, groups)
        return stage.plan()

    planned = counted("first", first)
    index = groups // 2
    mine = counted("later", lambda: IngestStage(lake, config, "r1").plan_group(index, groups))
    assert len(units) == len(planned) >= groups, (len(units), len(planned), groups)
    block = group_range(len(planned), index, groups)
    assert [u.input_checksum for u in mine] == [planned[k].input_checksum for k in block]
    out["units"], out["block_units"] = len(planned), len(mine)
    out["block_files"] = sum(len(u.inputs) for u in mine)
    return out


def measure(files: int, groups: int) -> dict:
    """Requests of one listing, the first task's plan and a later task's plan over ``files`` inputs."""
    tmp = Path(tempfile.mkdtemp(prefix="plan-requests-"))
    log = tmp / "moto.log"
    proc, endpoint = _start_moto(log)
    try:
        bucket = f"plans-{files}"
        _upload(endpoint, bucket, files)
        from airflow_curation.core import storage
        from airflow_curation.core.storage_map import StorageMap

        with storage.using(StorageMap({"s3": {"key": KEY, "secret": SECRET, "endpoint_url": endpoint}})):
            return {"files": files, "groups": groups, **_plan_requests(log, bucket, groups)}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


def _total(counts: dict[str, dict[str, int]], where: str | None = None) -> int:
    return sum(n for w, kinds in counts.items() if where in (None, w) for n in kinds.values())


def _kinds(counts: dict[str, dict[str, int]]) -> str:
    merged: Counter = Counter()
    for kinds in counts.values():
        merged.update(kinds)
    return ", ".join(f"{k} {v:,}" for k, v in sorted(merged.items()))


def render(data: dict) -> str:
    rows = ["| input files | N | what | requests (inputs / lake) | by kind |", "| --- | --- | --- | --- | --- |"]
    for run in data["runs"]:
        for name, label in (
            ("listing", "one listing (each task before; the collect step once)"),
            ("first", "first task's plan"),
            ("later", f"later task's plan ({run['block_files']:,} files of its block)"),
        ):
            c = run[name]
            rows.append(
                f"| {run['files']:,} | {run['groups']} | {label} | {_total(c):,} "
                f"({_total(c, 'inputs'):,} / {_total(c, 'lake'):,}) | {_kinds(c)} |"
            )
    return "\n".join(rows)


def _write_section(table: str, command: str) -> None:
    text = RESULTS_MD.read_text()
    section = f"{BEGIN}\n{table}\n\nCommand: `{command}`; JSON: `benchmarks/results/ingest_plan_requests.json`.\n{END}"
    if BEGIN in text:
        text = text[: text.index(BEGIN)] + section + text[text.index(END) + len(END) :]
    else:
        text = text.rstrip("\n") + "\n\n## Ingest plan: object-store requests\n\n" + section + "\n"
    RESULTS_MD.write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", default="2000,20000", help="input file counts, comma-separated")
    ap.add_argument("--groups", type=int, default=64, help="tasks in the array (N)")
    ap.add_argument("--write-results", action="store_true", help="write the JSON and the RESULTS.md section")
    ap.add_argument("--render", action="store_true", help="rewrite the RESULTS.md section from the JSON")
    args = ap.parse_args()
    command = ".venv/bin/python benchmarks/bench_ingest_plan_requests.py " + " ".join(sys.argv[1:])
    if args.render:
        data = json.loads(RESULTS.read_text())
        _write_section(render(data), data["command"])
        return
    runs = [measure(int(f), args.groups) for f in args.files.split(",")]
    data = {"command": command, "runs": runs}
    print(render(data))
    if args.write_results:
        RESULTS.write_text(json.dumps(data, indent=1) + "\n")
        _write_section(render(data), command)


if __name__ == "__main__":
    main()
