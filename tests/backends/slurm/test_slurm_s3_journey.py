"""The deployment a data engineer runs: every stage (ingest, preprocess, dedup, validate) as a Slurm array
of two groups plus its collect job, on a lake on S3 (moto on loopback), the credentials only in the
backend's ``env`` (as the curation connection hands them on). Each stage completes from the one before;
the books close across the chain; slurmctld's saved job environments hold no credential."""

from __future__ import annotations

import json

import pytest
from s3.conftest import s3_bucket, s3_endpoint, storage_options  # noqa: F401 - the moto S3 fixtures
from s3.test_s3_dedup_array import _inputs

from airflow_curation.backends.base import JobState
from airflow_curation.core import storage
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest
from airflow_curation.jobs.spec import JobSpec

from .conftest import wait_for
from .test_slurm_secrets import _saved_environments

pytestmark = [pytest.mark.slurm, pytest.mark.s3]

STAGES = [
    ("ingest", None, {"target_shard_bytes": 1_500, "row_group_rows": 16, "unit_bytes": 1}),
    ("preprocess", "ingest", {}),
    ("dedup", "preprocess", {"only_kept": False}),
    ("validate", "dedup", {"min_rows": 0, "max_duplicate_rate": 0.9}),
]


def test_every_stage_as_a_slurm_array_on_an_s3_lake(make_backend, s3_bucket, s3_endpoint, tmp_path):  # noqa: F811
    inputs = _inputs(tmp_path / "in")
    lake = Lake(f"s3://{s3_bucket}/lake", "web", "2026-12-01")
    options = json.dumps(storage_options(s3_endpoint))
    backend = make_backend(
        shard_groups=2, work_dir=str(tmp_path / "jobs"), env={"CURATION_STORAGE_OPTIONS_S3": options}
    )
    manifests: dict[str, Manifest] = {}
    for stage, upstream, config in STAGES:
        source = {"input_manifest": lake.manifest_uri("j1", upstream)} if upstream else {"inputs": [str(inputs)]}
        handle = backend.submit(JobSpec(stage, lake.to_dict(), "j1", {**source, **config}))
        st = wait_for(backend, handle, timeout=900)
        assert st.state == JobState.SUCCEEDED, (stage, st, backend.logs(handle)[0][-4000:])
        assert handle["groups"] == 2 and handle["array_job_id"], stage  # an array, then its collect job
        manifests[stage] = m = Manifest.read(lake.manifest_uri("j1", stage))
        assert m.status == "complete", stage
        for env in _saved_environments(handle["array_job_id"], handle["job_id"]).values():
            assert options not in "\n".join(env.values()), stage
            assert not [k for k in env if k.startswith(("CURATION_STORAGE_OPTIONS_", "AIRFLOW_CONN_"))], stage
        assert not list((tmp_path / "jobs").rglob("secrets.env"))  # gone once each run is over
    rows = manifests["ingest"].rows
    assert rows == 4 * 14 and manifests["preprocess"].accounting["read"] == rows
    assert manifests["dedup"].accounting["read"] == rows
    report = json.loads(storage.read_bytes(lake.path("_manifests", "j1", "report.json")))
    assert report["status"] == "passed", report["summary"]
