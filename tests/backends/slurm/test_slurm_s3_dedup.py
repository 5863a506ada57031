"""Dedup as a Slurm array (two groups, then the collect job) on an S3 lake (the moto server of tests/s3):
the tasks share the signatures and wait on one global phase instead of failing with ``LeaseBusy``; the
labels are a whole local run's, and slurmctld's saved job environments hold no storage credential."""

from __future__ import annotations

import json

import pytest
from s3.conftest import s3_bucket, s3_endpoint, storage_options  # noqa: F401 - the moto S3 fixtures
from s3.test_s3_dedup_array import INGEST, _inputs, _labels

from airflow_curation.backends.base import JobState
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest
from airflow_curation.jobs.spec import JobSpec
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.dedup.stage import DedupStage
from airflow_curation.stages.ingest.stage import IngestStage

from .conftest import wait_for
from .test_slurm_secrets import _saved_environments

pytestmark = [pytest.mark.slurm, pytest.mark.s3]


def test_dedup_as_a_slurm_array_on_an_s3_lake(make_backend, s3_bucket, s3_endpoint, tmp_path):  # noqa: F811
    inputs = _inputs(tmp_path / "in")
    local = Lake(str(tmp_path / "local"), "web")
    StageRunner(IngestStage(local, {"inputs": [str(inputs)], **INGEST}, "r1")).run()
    want = _labels(StageRunner(DedupStage(local, {"input_manifest": local.manifest_uri("r1", "ingest")}, "r1")).run())

    lake = Lake(f"s3://{s3_bucket}/lake", "web")
    StageRunner(IngestStage(lake, {"inputs": [str(inputs)], **INGEST}, "r1")).run()
    options = json.dumps(storage_options(s3_endpoint))
    backend = make_backend(
        shard_groups=2, work_dir=str(tmp_path / "jobs"), env={"CURATION_STORAGE_OPTIONS_S3": options}
    )
    spec = JobSpec("dedup", lake.to_dict(), "d1", {"input_manifest": lake.manifest_uri("r1", "ingest")})
    handle = backend.submit(spec)
    st = wait_for(backend, handle, timeout=900)
    text = backend.logs(handle)[0]
    assert st.state == JobState.SUCCEEDED, (st, text[-4000:])
    assert "LeaseBusy" not in text
    m = Manifest.read(lake.manifest_uri("d1", "dedup"))
    assert m.status == "complete" and _labels(m) == want
    for env in _saved_environments(handle["array_job_id"], handle["job_id"]).values():
        assert options not in "\n".join(env.values())
        assert not [k for k in env if k.startswith(("CURATION_STORAGE_OPTIONS_", "AIRFLOW_CONN_"))]
