"""The Slurm commands over a real SSH connection (sshd on loopback as the login node): submit, status,
logs, cancel; hostile values stay literal through the remote shell."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from airflow_curation.backends.base import JobState
from airflow_curation.core.manifest import Manifest
from airflow_curation.jobs import progress

from .conftest import relaunch, spec_for, wait_for

pytestmark = pytest.mark.slurm


def test_submit_status_logs_over_ssh(make_backend, lake, ssh_conn_id, tmp_path):
    canary = tmp_path / "pwned"
    evil = f'x\' "$(touch {canary})" `touch {canary}`; touch {canary} #'
    backend = make_backend(
        slurm_conn_id=ssh_conn_id, env={"CURATION_TEST_ECHO": evil}, sbatch_options=[f"--comment={evil}"]
    )
    assert backend.commands.max_array_size() >= 1  # scontrol show config, over SSH
    handle = backend.submit(spec_for(lake, units=2))
    st = wait_for(backend, handle)
    assert st.state == JobState.SUCCEEDED, st
    records_echo = Manifest.read(handle["manifest_uri"])
    assert records_echo.status == "complete"
    comment = subprocess.run(["scontrol", "show", "job", "-o", handle["job_id"]], capture_output=True, text=True).stdout
    assert f"Comment={evil} " in comment  # the option reached sbatch as one literal argument
    assert not canary.exists()
    # Logs read where the job ran (as when the work folder is not mounted on the Airflow worker).
    local = Path(handle["log"]).read_bytes()
    assert backend.commands.read(handle["log"]) == local
    assert backend.commands.read(handle["log"], 10) == local[10:]
    assert backend.commands.read(handle["log"] + ".missing") == b""


def test_cancel_over_ssh(make_backend, lake, ssh_conn_id):
    backend = make_backend(slurm_conn_id=ssh_conn_id)
    handle = backend.submit(spec_for(lake, units=1, sleep_s=60))
    wait_for(backend, handle, until=lambda st: st.state == JobState.RUNNING)
    backend.cancel(handle)
    assert wait_for(backend, handle).state == JobState.CANCELLED


def test_work_folder_only_on_the_login_side(make_backend, lake, ssh_conn_id, tmp_path):
    """remote_work_dir: every job file (spec, scripts, results, log, markers) is written and read over
    SSH; a failed shard is resubmitted through it too."""
    flag = tmp_path / "broken"
    flag.touch()
    work = tmp_path / "remote jobs $(x)"
    backend = make_backend(slurm_conn_id=ssh_conn_id, work_dir=str(work), remote_work_dir=True, shard_groups=2)
    # u003: the block of group 1 of 2 (units 2 and 3)
    handle = backend.submit(spec_for(lake, units=4, fail_units=["u003"], fail_flag=str(flag), max_attempts=1))
    assert handle["job_dir"].startswith(str(work)) and (Path(handle["job_dir"]) / "group.sh").exists()
    st = wait_for(backend, handle)
    assert st.state == JobState.FAILED and "u003" in st.message
    assert progress.unfinished_groups(handle["manifest_uri"], handle["groups"]) == [1]
    flag.unlink()
    new = relaunch(backend, handle)
    assert new["array"] == "1"
    with pytest.raises(RuntimeError, match="still"):  # never two attempts at once
        relaunch(backend, handle)
    st = wait_for(backend, handle)
    assert st.state == JobState.SUCCEEDED, st
    text, offset = backend.logs(handle)
    assert "attempt 2 resubmitted groups 1" in text and offset == len(Path(handle["log"]).read_bytes())
    backend.cancel(handle)
    assert (Path(handle["job_dir"]) / "cancelled").exists()


@pytest.mark.airflow
def test_the_airflow_ssh_connection_runs_the_slurm_commands(slurm_cluster, ssh_conn_id, lake, tmp_path, monkeypatch):
    """``slurm_conn_id`` naming an ``ssh`` connection: the factory gives the backend a transport over
    Airflow's SSHHook (paramiko; no ssh binary). Job files are written through stdin over it (remote
    work folder), hostile values stay literal, and a backend rebuilt from the handle's options (as in
    the triggerer) resolves the connection again and follows and cancels the job."""
    import json
    import sys

    from airflow_curation.hooks.factory import backend_for, handle_options
    from airflow_curation.hooks.ssh_transport import SSHTransport

    from .conftest import JOB_PYTHONPATH

    monkeypatch.setenv("PATH", "/nonexistent")  # nothing may run here: not ssh, not sbatch
    canary = tmp_path / "pwned"
    evil = f'x\' "$(touch {canary})" `touch {canary}`; touch {canary} #'
    work = tmp_path / "remote jobs $(x)"
    options = {
        "slurm_conn_id": ssh_conn_id,
        "python": sys.executable,
        "work_dir": str(work),
        "remote_work_dir": True,
        "sbatch_options": [f"--comment={evil}"],
        "env": {"PYTHONPATH": JOB_PYTHONPATH, "CURATION_TEST_ECHO": evil},
    }
    backend = backend_for("slurm", options)
    assert isinstance(backend.transport, SSHTransport) and backend.remote
    handle = backend.submit(spec_for(lake, units=2))
    assert (Path(handle["job_dir"]) / "spec.json").exists()  # written over the SSH channel's stdin
    st = wait_for(backend, handle)
    assert st.state == JobState.SUCCEEDED, st
    assert Manifest.read(handle["manifest_uri"]).status == "complete"
    assert not canary.exists()
    _, offset = backend.logs(handle)
    assert offset == len(Path(handle["log"]).read_bytes()) > 0

    kept = handle_options(backend, options)
    assert kept["slurm_conn_id"] == ssh_conn_id and "env" not in kept and "transport" not in kept
    again = backend_for("slurm", json.loads(json.dumps(kept)))  # what a trigger rebuilds
    assert again.transport is not backend.transport and again.status(handle).state == JobState.SUCCEEDED
    running = backend.submit(spec_for(lake, run_id="run2", units=1, sleep_s=60))
    wait_for(again, running, until=lambda s: s.state == JobState.RUNNING)
    again.cancel(running)
    assert wait_for(again, running).state == JobState.CANCELLED


@pytest.mark.airflow
def test_a_slurm_connection_names_its_login_node(slurm_cluster, ssh_conn_id, lake, monkeypatch):
    """A ``slurm`` connection holds the site defaults and names the ``ssh`` connection of the login node."""
    import json
    import sys

    from airflow_curation.hooks.slurm import SlurmHook

    from .conftest import JOB_PYTHONPATH

    monkeypatch.setenv(
        "AIRFLOW_CONN_SLURM_SITE",
        json.dumps(
            {
                "conn_type": "slurm",
                "extra": {"ssh_conn_id": ssh_conn_id, "partition": "debug", "python": sys.executable},
            }
        ),
    )
    hook = SlurmHook("slurm_site", env={"PYTHONPATH": JOB_PYTHONPATH})
    ok, message = hook.test_connection()
    assert ok and "debug" in message, message
    backend = hook.get_backend()
    assert backend.sbatch.partition == "debug" and backend.transport.host == "127.0.0.1"
    assert wait_for(backend, backend.submit(spec_for(lake, units=1))).state == JobState.SUCCEEDED


def test_an_unreachable_login_node_is_not_a_verdict(slurm_cluster, monkeypatch):
    """SSH that cannot connect: status says unknown (as with an unreachable controller), never failed."""
    import socket

    from airflow.providers.ssh.hooks.ssh import SSHHook

    from airflow_curation.backends.slurm import SlurmBackend
    from airflow_curation.hooks.ssh_transport import SSHTransport

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there
    hook = SSHHook(remote_host="127.0.0.1", port=port, username="nobody", conn_timeout=2, conn_retry_attempts=1)
    backend = SlurmBackend(transport=SSHTransport(hook))
    handle = {
        "job_id": "1",
        "job_dir": "/nonexistent",
        "result": "/nonexistent/result-1.json",
        "attempt": 1,
        "log": "/nonexistent/job.log",
    }
    st = backend.status(handle)
    assert st.state == JobState.UNKNOWN and "ssh 127.0.0.1" in st.message, st
