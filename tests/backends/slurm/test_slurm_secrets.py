"""Secrets on disk: the job's environment (the lake's storage options) reaches every job of a real
Slurm run, yet no script, spec, result, log, checkpoint or manifest holds it, nor any command line over
SSH; the only copy is a ``0600`` file that is gone once the run is over (or cancelled)."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import stat
import time
import uuid
from pathlib import Path

import pytest

from airflow_curation.backends import get_backend
from airflow_curation.backends.base import JobState
from airflow_curation.backends.slurm import ENV_FILE, SlurmError
from airflow_curation.core.manifest import Manifest

from .conftest import LOGIN_NODE_CREDENTIALS, checkpoint_records, follow, relaunch, settle, spec_for, wait_for

pytestmark = pytest.mark.slurm


def _secret_env() -> tuple[str, dict[str, str]]:
    """A fake secret in storage options, as the Airflow layer hands them to a backend."""
    from airflow_curation.core.storage_map import StorageMap

    secret = f"s3cr3t-{uuid.uuid4().hex}"
    return secret, StorageMap({"s3": {"key": "AKIA-FAKE", "secret": secret}}).to_env()


def _files_holding(root: Path, needle: str) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes())


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _received(lake: dict, handle: dict, env: dict[str, str]) -> set[str | None]:
    """The digests of the storage options that the units' jobs saw (the test stage records them)."""
    records = checkpoint_records(lake, Manifest.read(handle["manifest_uri"]))
    assert records
    want = hashlib.sha256(env["CURATION_STORAGE_OPTIONS_S3"].encode()).hexdigest()
    return {r["extra"]["storage_options_sha256"] == want for r in records.values()}


def test_single_job_secret_only_in_a_0600_file_while_it_runs(make_backend, lake, tmp_path):
    secret, env = _secret_env()
    backend = make_backend(env=env)
    handle = backend.submit(spec_for(lake, units=2, sleep_s=2))
    env_file = Path(handle["job_dir"], ENV_FILE)
    assert _files_holding(tmp_path, secret) == [env_file]  # not job.sh, not spec.json
    assert _mode(env_file) == 0o600
    wait_for(backend, handle, until=lambda st: st.state != JobState.PENDING)
    if env_file.exists():  # still running: still the only copy, still private
        assert _files_holding(tmp_path, secret) in ([env_file], [])
        assert _mode(env_file) == 0o600
    st = wait_for(backend, handle)
    assert st.state == JobState.SUCCEEDED, st
    assert _received(lake, handle, env) == {True}
    assert not env_file.exists()
    assert _files_holding(tmp_path, secret) == []  # job folder, log, results, lake
    assert secret not in backend.logs(handle)[0] and secret not in json.dumps(handle)


def test_array_tasks_and_collect_share_the_file_and_the_collect_job_deletes_it(make_backend, lake, tmp_path):
    secret, env = _secret_env()
    backend = make_backend(env=env, shard_groups=2)
    handle = backend.submit(spec_for(lake, units=4))
    env_file = Path(handle["job_dir"], ENV_FILE)
    assert _files_holding(tmp_path, secret) == [env_file] and _mode(env_file) == 0o600
    result = Path(handle["result"])
    deadline = time.time() + 180
    while not result.exists():  # the collect job's result, without polling status (which also deletes)
        assert time.time() < deadline, backend.logs(handle)[0]
        time.sleep(0.5)
    st = wait_for(backend, handle)
    assert st.state == JobState.SUCCEEDED, st  # the collect job found the stage: it had the environment
    assert _received(lake, handle, env) == {True}
    assert not env_file.exists()
    assert _files_holding(tmp_path, secret) == []


def test_cancel_deletes_the_file_at_once(make_backend, lake, tmp_path):
    secret, env = _secret_env()
    backend = make_backend(env=env, shard_groups=2, array_parallelism=1)
    handle = backend.submit(spec_for(lake, units=4, sleep_s=30))
    wait_for(backend, handle, until=lambda st: st.state == JobState.RUNNING)
    backend.cancel(handle)
    assert not Path(handle["job_dir"], ENV_FILE).exists()
    assert wait_for(backend, handle).state == JobState.CANCELLED
    assert _files_holding(tmp_path, secret) == []


def test_resubmissions_reuse_the_file_until_the_run_is_over(make_backend, lake, tmp_path):
    """A poller without the job's secrets (the triggerer) resubmits with the file the run kept; after
    the last attempt the file is gone, and a resubmission by hand needs the environment again."""
    secret, env = _secret_env()
    flag = tmp_path / "broken"
    flag.touch()
    backend = make_backend(env=env, shard_groups=2, max_resubmits=1, resubmit_on=["FAILED"])
    poller = get_backend("slurm", **{k: v for k, v in backend.options().items() if k != "env"})
    handle = backend.submit(spec_for(lake, units=4, fail_units=["u001"], fail_flag=str(flag), max_attempts=1))
    env_file = Path(handle["job_dir"], ENV_FILE)
    result_1 = Path(handle["result"])
    deadline = time.time() + 180
    while not result_1.exists():
        assert time.time() < deadline, backend.logs(handle)[0]
        time.sleep(0.5)
    st = wait_for(poller, handle)
    assert st.state == JobState.FAILED and st.retryable, st  # polling alone relaunches nothing
    assert env_file.exists() and _mode(env_file) == 0o600  # attempt 1 failed: kept for attempt 2
    second = settle(poller, handle, st)  # the follower's decision, without the secrets
    assert second["attempt"] == 2 and env_file.exists()
    st, last = follow(poller, second)
    assert st.state == JobState.FAILED and last["attempt"] == 2, st  # still broken; no relaunch left
    assert not env_file.exists()  # released: the run is over

    flag.unlink()
    with pytest.raises(SlurmError, match="env"):
        relaunch(poller, handle)
    new = relaunch(backend, handle)  # the Airflow side has the environment: it writes the file again
    assert new["attempt"] == 3 and _mode(env_file) == 0o600
    st = wait_for(backend, handle)
    assert st.state == JobState.SUCCEEDED, st
    assert _received(lake, handle, env) == {True}
    assert not env_file.exists()
    assert _files_holding(tmp_path, secret) == []


def test_over_ssh_the_secret_is_on_no_command_line(make_backend, lake, ssh_conn_id, tmp_path):
    """The work folder only on the login side: the file is streamed through stdin; every command line the
    factory's SSH transport sent to the login node (what ``ps`` shows there) is recorded and free of the
    secret, and nothing runs here."""
    secret, env = _secret_env()
    work = tmp_path / "remote-jobs"
    backend = make_backend(env=env, slurm_conn_id=ssh_conn_id, work_dir=str(work), remote_work_dir=True, shard_groups=2)
    sent, run = [], backend.transport.run

    def recorded(argv, data=None, timeout=None):
        sent.append(shlex.join(argv))  # the remote command line, as SSHTransport sends it
        return run(argv, data, timeout)

    backend.transport.run = recorded
    handle = backend.submit(spec_for(lake, units=2))
    env_file = Path(handle["job_dir"], ENV_FILE)
    assert _mode(env_file) == 0o600 and _files_holding(tmp_path, secret) == [env_file]
    st = wait_for(backend, handle)
    assert st.state == JobState.SUCCEEDED, st
    assert _received(lake, handle, env) == {True}
    assert not env_file.exists()
    assert any("sbatch" in line for line in sent) and not [line for line in sent if secret in line]
    assert _files_holding(tmp_path, secret) == []
    assert os.listdir(work)  # the job folder was there, written over SSH


def _saved_environments(*job_ids: str) -> dict[str, dict[str, str]]:
    """What slurmctld saved of each job's environment (``StateSaveLocation/hash.<id % 10>/job.<id>/
    environment``: NUL-separated ``NAME=value``, after a leading count), by job id."""
    import re
    import subprocess

    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, check=True).stdout
    state = re.search(r"^StateSaveLocation\s*=\s*(\S+)", config, re.M).group(1)
    out = {}
    for job_id in job_ids:
        raw = Path(state, f"hash.{int(job_id) % 10}", f"job.{job_id}", "environment").read_bytes()
        pairs = [p.decode(errors="replace") for p in raw.split(b"\0") if b"=" in p]
        out[job_id] = dict(p.split("=", 1) for p in pairs)
    return out


@pytest.mark.parametrize("where", ["here", "login node"])
def test_slurms_saved_job_environment_holds_no_credential(make_backend, lake, tmp_path, monkeypatch, request, where):
    """The worker's environment holds a connection with its password and storage options; a login node's
    (sbatch run there over SSH, its sessions holding some) likewise. What slurmctld saves of the jobs'
    environments is only the documented ``--export`` names and Slurm's own: no credential, no other
    variable; the jobs still get the storage options (from ``secrets.env``) and succeed."""
    from airflow_curation.backends.slurm import EXPORTED

    password, secret = f"pw-{uuid.uuid4().hex}", f"s3cr3t-{uuid.uuid4().hex}"
    conn = json.dumps({"conn_type": "generic", "login": "curator", "password": password})
    options = json.dumps({"key": "AKIA-FAKE", "secret": secret})
    login = {}
    ambient = [password, secret]
    if where == "here":
        monkeypatch.setenv("AIRFLOW_CONN_CURATION_DEFAULT", conn)
        monkeypatch.setenv("CURATION_STORAGE_OPTIONS_S3", options)
        monkeypatch.setenv("CURATION_PLAIN_SETTING", "kept-out")
    else:  # sbatch runs on the login node (the factory's SSH transport), whose sessions hold credentials
        login = {"slurm_conn_id": request.getfixturevalue("ssh_conn_id")}
        ambient += list(LOGIN_NODE_CREDENTIALS.values())
    backend = make_backend(
        env={"CURATION_STORAGE_OPTIONS_S3": options},
        shard_groups=2,
        **login,
        work_dir=str(tmp_path / "jobs"),
        export_env=["CURATION_EXTRA_NAME"],
    )
    handle = backend.submit(spec_for(lake, units=2))
    st = wait_for(backend, handle)
    assert st.state == JobState.SUCCEEDED, (st, backend.logs(handle)[0][-3000:])
    assert _received(lake, handle, {"CURATION_STORAGE_OPTIONS_S3": options}) == {True}
    saved = _saved_environments(handle["array_job_id"], handle["job_id"])
    allowed = {*EXPORTED, "CURATION_EXTRA_NAME"}
    for job_id, env in saved.items():
        assert "PATH" in env, env  # the right file: sbatch's PATH is there
        assert not {k for k in env if not k.startswith("SLURM_")} - allowed, (job_id, sorted(env))
        text = json.dumps(env)
        assert not [v for v in ambient if v in text] and "AIRFLOW_CONN_" not in text
    assert not _files_holding(tmp_path, secret)  # secrets.env is gone once the run is over


def test_export_env_refuses_a_credential_name(make_backend):
    with pytest.raises(ValueError, match="AWS_SECRET_ACCESS_KEY names a credential"):
        make_backend(export_env="OMP_NUM_THREADS, AWS_SECRET_ACCESS_KEY")
    assert make_backend(export_env="OMP_NUM_THREADS,HF_HOME").sbatch.export_env == ("OMP_NUM_THREADS", "HF_HOME")
