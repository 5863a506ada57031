"""Real stages on the real cluster: ingest in-process, then preprocess on Slurm as an array over shard
groups, and again as one allocation running a Dask cluster."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from airflow_curation.backends.base import JobState
from airflow_curation.core import storage
from airflow_curation.core.manifest import Manifest
from airflow_curation.jobs import run_spec
from airflow_curation.jobs.spec import JobSpec

from .conftest import checkpoint_records as _records
from .conftest import spec_for, wait_for

pytestmark = pytest.mark.slurm

WORDS = "the quick brown fox jumps over the lazy dog while curators read every line of the corpus".split()


@pytest.fixture
def ingested(tmp_path) -> tuple[dict, str]:
    inputs = tmp_path / "in"
    inputs.mkdir()
    for f in range(4):
        with open(inputs / f"part-{f}.jsonl", "w") as out:
            for i in range(30):
                text = " ".join(WORDS[(i + j) % len(WORDS)] for j in range(60 + i)) + "."
                out.write(json.dumps({"text": text}) + "\n")
    lake = {"root": str(tmp_path / "lake"), "dataset": "web", "snapshot": None}
    result = run_spec(
        JobSpec("ingest", lake, "r1", {"inputs": [str(inputs)], "target_shard_bytes": 12000, "unit_bytes": 1})
    )
    assert result["rows"] == 120
    return lake, result["manifest_uri"]


def test_one_allocation_running_a_dask_cluster(make_backend, lake):
    # (Here rather than in test_slurm_backend.py: it needs both CPU slots, which that module's
    # one-minute-limit job holds for a while.)
    backend = make_backend(launch_kind="dask", ntasks=2, cpus_per_task=1)
    handle = backend.submit(spec_for(lake, units=4, sleep_s=0.5))
    st = wait_for(backend, handle)
    assert st.state == JobState.SUCCEEDED, (st, backend.logs(handle)[0][-3000:])
    text = backend.logs(handle)[0]
    assert "airflow-curation: Dask cluster at tcp://" in text and "dask: 4 units on the cluster at" in text
    records = _records(lake, Manifest.read(handle["manifest_uri"]))
    # The units ran in the Dask workers of the srun step (step 0), not in the batch script's process.
    assert {r["extra"]["slurm_step"] for r in records.values()} == {"0"}
    assert {r["extra"]["slurm_job"] for r in records.values()} == {handle["job_id"]}
    assert not list(Path(handle["job_dir"]).glob("core*"))
    out = subprocess.run(["scontrol", "show", "job", "-o", handle["job_id"]], capture_output=True, text=True)
    assert "NumTasks=2" in out.stdout


def test_preprocess_as_an_array_then_on_a_dask_allocation(make_backend, ingested):
    lake, ingest_manifest = ingested
    shards = len(Manifest.read(ingest_manifest).shards)
    assert shards >= 2

    array = make_backend(shard_groups=2)
    handle = array.submit(JobSpec("preprocess", lake, "r1", {"input_manifest": ingest_manifest, "mapper": "local"}))
    st = wait_for(array, handle, timeout=600)
    assert st.state == JobState.SUCCEEDED, (st, array.logs(handle)[0][-3000:])
    manifest = Manifest.read(handle["manifest_uri"])
    assert manifest.status == "complete" and len(manifest.shards) == shards
    assert manifest.accounting["read"] == 120
    assert all(storage.exists(s.attrs["preprocess"]) for s in manifest.shards)
    groups = [json.loads(Path(handle["job_dir"], f"result-1-group-{g}.json").read_text()) for g in (0, 1)]
    assert sum(g["shards"] for g in groups) == shards

    dask = make_backend(launch_kind="dask", ntasks=2, cpus_per_task=1)
    handle = dask.submit(
        JobSpec("preprocess", lake, "r2", {"input_manifest": ingest_manifest, "preset": "c4"})
    )  # new fingerprint: recomputed
    st = wait_for(dask, handle, timeout=600)
    assert st.state == JobState.SUCCEEDED, (st, dask.logs(handle)[0][-3000:])
    text = dask.logs(handle)[0]
    assert f"dask: {shards} units on the cluster at tcp://" in text
    manifest = Manifest.read(handle["manifest_uri"])
    assert manifest.status == "complete" and manifest.accounting["read"] == 120
    assert all(u.status == "done" for u in manifest.units)


def test_validate_as_an_array_of_parts_and_a_merge(make_backend, ingested):
    lake, ingest_manifest = ingested
    shards = len(Manifest.read(ingest_manifest).shards)
    array = make_backend(shard_groups=2)
    config = {"input_manifest": ingest_manifest, "part_rows": 1, "min_rows": 100}  # a part per shard
    handle = array.submit(JobSpec("validate", lake, "v1", config))
    st = wait_for(array, handle, timeout=600)
    assert st.state == JobState.SUCCEEDED, (st, array.logs(handle)[0][-3000:])
    manifest = Manifest.read(handle["manifest_uri"])
    assert manifest.status == "complete" and len(manifest.units) == shards and manifest.config["validation"] == "passed"
    groups = [json.loads(Path(handle["job_dir"], f"result-1-group-{g}.json").read_text()) for g in (0, 1)]
    assert [g["shards"] for g in groups] == [len(range(g, shards, 2)) for g in (0, 1)]  # each task its parts
    report = storage.read_json(manifest.config["report_json"])  # written by the collect job, the merge
    assert report["metrics"]["rows"] == report["metrics"]["distinct_ids"] == 120


def test_a_setting_the_stage_refuses_fails_the_task_before_anything_is_submitted(slurm_cluster, ingested):
    """A rule on a signal no setting computes: the submitting Airflow task fails at once, naming it. Before, the
    operator submitted the array and deferred; each of its tasks failed on it after the queue, and the Airflow
    task only when they all had."""
    import sys

    from airflow_curation.operators.preprocess import PreprocessOperator

    from .conftest import JOB_PYTHONPATH

    lake, ingest_manifest = ingested
    before = sorted(p.relative_to(lake["root"]) for p in Path(lake["root"]).rglob("*"))
    queued = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, check=True).stdout
    op = PreprocessOperator(
        task_id="prep",
        dataset=lake["dataset"],
        lake=lake["root"],
        input_manifest=ingest_manifest,
        run_id="typo",
        rules=[{"name": "too_short", "signal": "word_count", "min": 50}],
        backend="slurm",
        backend_options={"python": sys.executable, "env": {"PYTHONPATH": JOB_PYTHONPATH}, "shard_groups": 2},
    )
    with pytest.raises(ValueError, match=r"prep \(preprocess\): rule 'too_short' reads signal 'word_count'"):
        op.execute({"run_id": "typo", "ti": None})
    assert sorted(p.relative_to(lake["root"]) for p in Path(lake["root"]).rglob("*")) == before  # no job folder
    assert subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout == queued
