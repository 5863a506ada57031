"""The run record: typed, and the same flat dict as the job handles stored before it (XCom, the task state
store, trigger kwargs), so a task deferred by an earlier version resumes; the relaunch bookkeeping that
every follower reads (newest attempt, attempt locks) lies beside the first attempt's result."""

from __future__ import annotations

import threading

import pytest

from airflow_curation.backends import get_backend
from airflow_curation.jobs import attempts
from airflow_curation.jobs.run import LakeFiles, RunRecord

# Handles as the earlier operator stored them (its XCom ``job`` and its trigger's ``handle``), one per backend.
OLD_HANDLES = {
    "local": {
        "backend": "local",
        "job_id": "ingest-20261125T000000-ab12cd34",
        "pid": 4242,
        "start_time": "123456",
        "job_dir": "/lake/_jobs/r1/ingest/ingest-1",
        "log": "/lake/_jobs/r1/ingest/ingest-1/job.log",
        "result": "/lake/_jobs/r1/ingest/ingest-1/result.json",
        "spec": "/lake/_jobs/r1/ingest/ingest-1/spec.json",
        "manifest_uri": "/lake/d/_manifests/r1/ingest.json",
        "attempt": 1,
        "backend_options": {"work_dir": "/lake/_jobs/r1/ingest"},
        "curation_conn_id": None,
        "lake_root": "/lake",
        "submitted_at": 1795000000.5,
    },
    "slurm": {
        "backend": "slurm",
        "job_dir": "/jobs/r1/dedup/k",
        "spec": "/jobs/r1/dedup/k/spec.json",
        "log": "/jobs/r1/dedup/k/job.log",
        "manifest_uri": "s3://b/lake/d/_manifests/r1/dedup.json",
        "stage": "dedup",
        "run_id": "r1",
        "lake": {"root": "s3://b/lake", "dataset": "d", "snapshot": None},
        "groups": 4,
        "attempt": 2,
        "result": "/jobs/r1/dedup/k/result-2.json",
        "array_job_id": None,
        "array": None,
        "submitted": "2026-11-25T00:00:00",
        "job_id": "1234",
        "current": "/jobs/r1/dedup/k/current.json",
        "backend_options": {"slurm_conn_id": "hpc", "max_resubmits": 2},
        "curation_conn_id": "lake",
        "lake_root": "s3://b/lake",
        "submitted_at": 1795000000.0,
    },
}


@pytest.mark.parametrize("name", list(OLD_HANDLES))
def test_an_old_handle_reads_as_a_record_and_writes_back_unchanged(name):
    old = OLD_HANDLES[name]
    record = RunRecord.from_dict(old)
    assert record.backend == name and record.job_id == old["job_id"] and record.attempt == old["attempt"]
    assert record.manifest_uri == old["manifest_uri"] and record.backend_options == old["backend_options"]
    assert record.to_dict() == {k: v for k, v in old.items() if k != "curation_conn_id" or v is not None}
    assert RunRecord.from_dict(record.to_dict()) == record


def test_the_run_folder_is_the_first_results_or_the_one_current_names():
    local = RunRecord.from_dict(OLD_HANDLES["local"])
    assert local.current_uri == "/lake/_jobs/r1/ingest/ingest-1/current.json"
    assert attempts.lock_uri(local, 2) == "/lake/_jobs/r1/ingest/ingest-1/attempt-2.lock"
    assert RunRecord.from_dict(OLD_HANDLES["slurm"]).run_dir == "/jobs/r1/dedup/k"
    bare = RunRecord.from_dict({"backend": "flaky", "job_id": "j1"})  # a backend that writes no result
    assert bare.current_uri is None and attempts.bookkeeping(bare, 3) == []


def test_not_a_record_is_refused_clearly():
    with pytest.raises(ValueError, match="no job_id"):
        RunRecord.from_dict({"backend": "local", "pid": 1})


def test_a_later_attempt_keeps_what_the_launching_side_knew():
    first = RunRecord.from_dict(OLD_HANDLES["local"])
    second = first.next({"backend": "local", "job_id": "ingest-2", "attempt": 2, "log": "/elsewhere/job.log"})
    assert second.attempt == 2 and second.log == "/elsewhere/job.log"
    assert (second.backend_options, second.submitted_at, second.lake_root) == (
        first.backend_options,
        first.submitted_at,
        first.lake_root,
    )


def test_the_attempt_lock_is_taken_once(tmp_path):
    files, uri = LakeFiles(), str(tmp_path / "run" / "attempt-2.lock")
    won = []
    threads = [threading.Thread(target=lambda: won.append(files.create_exclusive(uri))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(won) == [False] * 7 + [True]


def test_a_holder_of_the_first_attempt_follows_the_newest(tmp_path):
    backend = get_backend("local", work_dir=str(tmp_path))
    first = RunRecord.from_dict({**OLD_HANDLES["local"], "result": str(tmp_path / "a1" / "result.json")})
    assert attempts.latest(backend, first) == first  # no relaunch yet
    newest = {"backend": "local", "job_id": "ingest-2", "attempt": 2, "log": str(tmp_path / "a2" / "job.log")}
    LakeFiles().write_json(first.current_uri, newest)
    got = attempts.latest(backend, first)
    assert got.attempt == 2 and got.job_id == "ingest-2" and got.submitted_at == first.submitted_at
    third = first.next({**first.to_dict(), "attempt": 3})
    assert attempts.latest(backend, third) == third  # an older attempt's record is never followed back
