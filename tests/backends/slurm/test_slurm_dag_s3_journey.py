"""The deployment as a data engineer runs it: the shipped pipeline DAG in ``dag.test()`` on the one-node
Slurm, input and lake on S3 (moto on loopback), the credentials only in the ``curation_default``
connection (its password is the S3 secret). Every stage that runs (ingest, preprocess, dedup, pii,
validate) is an array of two groups plus its collect job; ingest's array tasks are held at their first unit
(``CURATION_HOLD``, set through the DAG's per-stage ``backend_options`` param) and group 1 is ``scancel``-ed
there, as an admin or a preemption would. The checkpoint gate relaunches that group within the same run, while
preprocess, started on ingest's first shards (the default ``stream_quorum``), waits for it: the cancelled
attempt's manifest says a relaunch is pending.

Asserted: the run succeeds; the relaunch is said in the ingest job's log (which the gate streams into its
task log) and in its run record (``current.json``: attempt 2, group 1 only); the curated output (every row
with every stage's attrs, by id) equals that of the same DAG on the local backend; the connection's
password is in no job environment slurmctld saved, in no ``scontrol show job -d``, in no file of the job
folders and in no object of the lake.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest
from reliability.pipeline import curated_view, view_differences
from s3.conftest import REGION, s3_client, s3_endpoint  # noqa: F401 - the moto S3 fixtures

from airflow_curation.core import storage
from airflow_curation.core.layout import Lake, curation_run_id
from airflow_curation.core.manifest import Manifest
from airflow_curation.core.storage_map import StorageMap

from .conftest import JOB_PYTHONPATH

pytestmark = [pytest.mark.airflow, pytest.mark.slurm, pytest.mark.s3]
REPO = Path(__file__).resolve().parents[3]
CANCELLED_STAGE, CANCELLED_GROUP = "ingest", 1
WORDS = (
    "curation keeps the documents that teach a model something and drops the noise the web is full of "
    "while it counts every row it reads writes or sets aside on a lake of shards"
).split()


def _corpus() -> dict[str, str]:
    """Four JSONL files: prose the gopher and structure filters keep, exact copies across files, and junk."""
    import random

    rng = random.Random(25)
    docs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(60, 120))) + "." for _ in range(24)]
    files = {}
    for f in range(4):
        part = docs[f * 6 : (f + 1) * 6] + [docs[(f * 5 + 7) % 24], "buy now"]
        files[f"raw/part-{f}.jsonl"] = "".join(json.dumps({"text": t}) + "\n" for t in part)
    return files


@pytest.fixture
def pipeline(airflow_db, slurm_cluster, monkeypatch):
    monkeypatch.setenv("CURATION_POLL_INTERVAL", "0.5")
    # Only the connection may give S3 credentials: none in this process's environment.
    for name in ("CURATION_STORAGE_OPTIONS_S3", "CURATION_STORAGE_OPTIONS_PREFIXES", "AWS_ACCESS_KEY_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    spec = importlib.util.spec_from_file_location(
        "curation_pipeline_s3_journey", REPO / "dags" / "curation_pipeline.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def _connection(lake: str, backend: str, password: str, endpoint: str, backend_options: dict) -> str:
    s3 = {"endpoint_url": endpoint, "client_kwargs": {"region_name": REGION}}
    conn = {"conn_type": "curation", "extra": {"lake": lake, "backend": backend, "backend_options": backend_options}}
    if storage.is_local(lake):  # login/password are the key/secret of the lake's protocol only
        s3.update(key="journey", secret=password)
    else:  # the S3 secret of every bucket, in the connection's encrypted field
        conn.update(login="journey", password=password)
    conn["extra"]["storage_options"] = {"s3": s3}
    return json.dumps(conn)


def _queue() -> list[tuple[str, str, str]]:
    """(job id, state, working folder) of every job and array task Slurm lists."""
    out = subprocess.run(["squeue", "-h", "-r", "-o", "%i|%T|%Z"], capture_output=True, text=True).stdout
    return [tuple(line.split("|", 2)) for line in out.splitlines() if line.count("|") == 2]


def _cancel_when_running(work_dir: Path, go: Path, said: dict, stop: threading.Event) -> None:
    """Wait for the held stage's array task of CANCELLED_GROUP to run, ``scancel`` it, then let every other
    task go on (``go``). The tasks cannot finish before ``go`` exists, so the cancel is mid-run."""
    try:
        where = f"{work_dir}/"
        while not stop.is_set():
            for job_id, state, folder in _queue():
                task = f"_{CANCELLED_GROUP}"
                if folder.startswith(where) and f"/{CANCELLED_STAGE}/" in folder and job_id.endswith(task):
                    if state == "RUNNING":
                        subprocess.run(["scancel", job_id], check=True)
                        said["cancelled"] = job_id
                        return
            time.sleep(0.3)
    except Exception as e:  # noqa: BLE001 - reported by the test, never left to hang the run
        said["error"] = repr(e)
    finally:
        go.touch()


def _xcoms(dag_run) -> dict:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.scalars(XComModel.get_many(run_id=dag_run.run_id, dag_ids=dag_run.dag_id)).all()
        return {(r.task_id, r.key): XComModel.deserialize_value(r) for r in rows}


def _saved_environment_files() -> dict[str, bytes]:
    """Every job environment slurmctld keeps (``StateSaveLocation/hash.*/job.<id>/environment``), by job id."""
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, check=True).stdout
    state = Path(re.search(r"^StateSaveLocation\s*=\s*(\S+)", config, re.M).group(1))
    return {p.parent.name.removeprefix("job."): p.read_bytes() for p in state.glob("hash.*/job.*/environment")}


def _files_holding(root: Path, needle: str) -> list[str]:
    return sorted(str(p) for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes())


def test_pipeline_dag_on_slurm_arrays_with_an_s3_lake_and_a_cancelled_group(
    pipeline,
    s3_endpoint,  # noqa: F811
    s3_client,  # noqa: F811
    tmp_path,
    monkeypatch,
    capfd,
):
    bucket = f"journey-{uuid.uuid4().hex[:10]}"
    s3_client.create_bucket(Bucket=bucket)
    for key, text in _corpus().items():
        s3_client.put_object(Bucket=bucket, Key=key, Body=text.encode())
    password = f"journey-pw-{uuid.uuid4().hex}"
    endpoint = s3_endpoint["endpoint_url"]
    logical_date = datetime(2026, 12, 1, tzinfo=timezone.utc)
    params = {
        "input": f"s3://{bucket}/raw",
        "dataset": "web",
        "backend": "connection",
        # A unit (and shard) per input file on both backends: dedup's cluster ids are row positions in the
        # shards, so the same layout makes them comparable (a Slurm array would else split the input into as
        # many units as it has tasks, min_units, and the local run keep it one).
        "ingest_unit_size": "1",
        "dedup_threshold": 0.7,
        "max_duplicate_rate": 0.9,
    }

    # The reference: the same DAG, data and settings on the local backend, lake in a local folder.
    local_root = tmp_path / "local-lake"
    monkeypatch.setenv("AIRFLOW_CONN_CURATION_DEFAULT", _connection(str(local_root), "local", password, endpoint, {}))
    local_run = pipeline.test(logical_date=logical_date, run_conf=params)
    assert local_run.state == "success", local_run.state
    capfd.readouterr()  # the reference run's log: not the one read below
    # Read now: dag.test() of the same logical date below replaces this run in the DB.
    local_rows = _xcoms(local_run)[("validate", "return_value")]["rows"]

    # The deployment: Slurm arrays of two groups for every stage, the lake on S3.
    jobs, go = tmp_path / "slurm-jobs", tmp_path / "go"
    job_env = {"PYTHONPATH": JOB_PYTHONPATH}
    options = {"shard_groups": 2, "min_group_bytes": 1, "work_dir": str(jobs), "python": sys.executable, "env": job_env}
    lake_root = f"s3://{bucket}/lake"
    monkeypatch.setenv("AIRFLOW_CONN_CURATION_DEFAULT", _connection(lake_root, "slurm", password, endpoint, options))
    # Per stage (the DAG's backend_options param, merged over the connection's): ingest's tasks stop at their
    # first unit until `go` exists, so that one of them is cancelled mid-run.
    hold = {"env": {**job_env, "CURATION_HOLD": f"{CANCELLED_STAGE}.before_unit={go}"}}
    # Preprocess streams ingest's first shards: its tasks hold their CPUs while ingest's relaunch, submitted after
    # them, queues. On this 2-CPU node one preprocess task at a time leaves a CPU for it (docs/backends/slurm.md).
    stages = {CANCELLED_STAGE: hold, "preprocess": {"array_parallelism": 1}}
    said: dict = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_cancel_when_running, args=(jobs, go, said, stop), daemon=True)
    watcher.start()
    try:
        run = pipeline.test(logical_date=logical_date, run_conf={**params, "backend_options": stages})
    finally:
        stop.set()
        go.touch()
        watcher.join(timeout=30)
    assert "error" not in said, said
    assert said.get("cancelled"), "the held array task was never seen running"
    assert run.state == "success", run.state

    task_log = capfd.readouterr().out  # dag.test() writes the task logs here
    xcoms = _xcoms(run)
    run_id = curation_run_id(run.run_id, "2026-12-01")
    lake = Lake(lake_root, "web", "2026-12-01")
    s3 = StorageMap({"s3": {"key": "journey", "secret": password, "endpoint_url": endpoint}})
    # Every stage ran as an array of two groups plus its collect job (validate waits on its job itself: its
    # XCom is the report's summary, so its job folder tells).
    handles = {
        stage: xcoms[(f"{stage}.launch", "return_value")]["job"] for stage in ("ingest", "preprocess", "dedup", "pii")
    }
    for stage, handle in handles.items():
        assert handle["backend"] == "slurm" and handle["groups"] == 2 and handle["array_job_id"], (stage, handle)
    (validate_dir,) = (jobs / run_id / "validate").iterdir()
    assert (validate_dir / "group.sh").exists() and (validate_dir / "collect.sh").exists()
    assert xcoms[("validate", "return_value")]["rows"] == local_rows
    with storage.using(s3):
        for stage in ("ingest", "preprocess", "dedup", "pii", "validate"):
            assert Manifest.read(lake.manifest_uri(run_id, stage)).status == "complete", stage

        # The relaunch: ingest's group 1 alone, attempt 2, in the run record, the job log and the gate's task log.
        held = Path(handles[CANCELLED_STAGE]["job_dir"])
        assert said["cancelled"] == f"{handles[CANCELLED_STAGE]['array_job_id']}_{CANCELLED_GROUP}"
        current = json.loads((held / "current.json").read_text())
        assert current["attempt"] == 2 and current["array"] == str(CANCELLED_GROUP), current
        log = (held / "job.log").read_text()
        assert f"attempt 2 resubmitted groups {CANCELLED_GROUP} as job {current['job_id']}" in log, log[-3000:]
        said_in_log = f"group {CANCELLED_GROUP}/2 was cancelled (CANCELLED)"
        assert said_in_log in task_log and "relaunched, attempt 2 of 3" in task_log

        # Preprocess started on ingest's first shards (stream_quorum's default) and went on through the relaunch;
        # each of its units ran once, by the task whose block holds it (group 0 streams its own block only).
        pre_log = (Path(handles["preprocess"]["job_dir"]) / "job.log").read_text()
        assert "preprocess: streaming: unit" in pre_log, pre_log[-3000:]
        ran = re.findall(r"preprocess: (?:streaming: )?unit (\S+) done", pre_log)
        assert ran and len(ran) == len(set(ran)), ran

        # Row for row what the local backend curated (every row of pii's manifest, the attrs of every stage).
        got = curated_view(lake.manifest_uri(run_id, "pii"))
    want = curated_view(
        Lake(str(local_root), "web", "2026-12-01").manifest_uri(curation_run_id(local_run.run_id, "2026-12-01"), "pii")
    )
    assert got and not view_differences(got, want), view_differences(got, want)

    # No credential in what Slurm saved of any job, in the job folders or in the lake.
    saved = _saved_environment_files()
    ours = {h[k] for h in [*handles.values(), current] for k in ("array_job_id", "job_id") if h.get(k)}
    assert ours <= set(saved), sorted(ours - set(saved))  # the check below reads this run's jobs
    assert not [job for job, env in saved.items() if password.encode() in env]
    for job_id in ours:
        shown = subprocess.run(["scontrol", "show", "job", "-d", job_id], capture_output=True, text=True).stdout
        assert password not in shown and "AIRFLOW_CONN_" not in shown, job_id
    assert not _files_holding(jobs, password)
    assert not list(jobs.rglob("secrets.env"))  # gone once each stage's run is over
    leaked = []
    for page in s3_client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):
            if password.encode() in s3_client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read():
                leaked.append(obj["Key"])
    assert not leaked
