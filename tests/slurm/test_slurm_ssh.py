"""The Slurm commands over a real SSH connection (sshd on loopback as the login node): submit, status,
logs, cancel; hostile values stay literal through the remote shell."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from airflow_curation.backends.base import JobState
from airflow_curation.core.manifest import Manifest
from airflow_curation.jobs import progress

from .conftest import spec_for, wait_for

pytestmark = pytest.mark.slurm


def test_submit_status_logs_over_ssh(make_backend, lake, ssh_login, tmp_path):
    canary = tmp_path / "pwned"
    evil = f"x' \"$(touch {canary})\" `touch {canary}`; touch {canary} #"
    backend = make_backend(command_prefix=ssh_login, env={"CURATION_TEST_ECHO": evil},
                           sbatch_options=[f"--comment={evil}"])
    assert backend.max_array_size() >= 1  # scontrol show config, over SSH
    handle = backend.submit(spec_for(lake, units=2))
    st = wait_for(backend, handle)
    assert st.state == JobState.SUCCEEDED, st
    records_echo = Manifest.read(handle["manifest_uri"])
    assert records_echo.status == "complete"
    comment = subprocess.run(["scontrol", "show", "job", "-o", handle["job_id"]], capture_output=True,
                             text=True).stdout
    assert f"Comment={evil} " in comment  # the option reached sbatch as one literal argument
    assert not canary.exists()
    # Logs read where the job ran (as when the work folder is not mounted on the Airflow worker).
    local = Path(handle["log"]).read_bytes()
    assert backend.read_remote(handle["log"]) == local
    assert backend.read_remote(handle["log"], 10) == local[10:]
    assert backend.read_remote(handle["log"] + ".missing") == b""


def test_cancel_over_ssh(make_backend, lake, ssh_login):
    backend = make_backend(command_prefix=ssh_login)
    handle = backend.submit(spec_for(lake, units=1, sleep_s=60))
    wait_for(backend, handle, until=lambda st: st.state == JobState.RUNNING)
    backend.cancel(handle)
    assert wait_for(backend, handle).state == JobState.CANCELLED


def test_work_folder_only_on_the_login_side(make_backend, lake, ssh_login, tmp_path):
    """remote_work_dir: every job file (spec, scripts, results, log, markers) is written and read over
    SSH; a failed shard is resubmitted through it too."""
    flag = tmp_path / "broken"
    flag.touch()
    work = tmp_path / "remote jobs $(x)"
    backend = make_backend(command_prefix=ssh_login, work_dir=str(work), remote_work_dir=True, shard_groups=2)
    handle = backend.submit(spec_for(lake, units=4, fail_units=["u001"], fail_flag=str(flag), max_attempts=1))
    assert handle["job_dir"].startswith(str(work)) and (Path(handle["job_dir"]) / "group.sh").exists()
    st = wait_for(backend, handle)
    assert st.state == JobState.FAILED and "u001" in st.message
    assert progress.unfinished_groups(handle["manifest_uri"], handle["groups"]) == [1]
    flag.unlink()
    new = backend.relaunch(handle)
    assert new["array"] == "1"
    with pytest.raises(RuntimeError, match="still"):  # never two attempts at once
        backend.relaunch(handle)
    st = wait_for(backend, handle)
    assert st.state == JobState.SUCCEEDED, st
    text, offset = backend.logs(handle)
    assert "attempt 2 resubmitted groups 1" in text and offset == len(Path(handle["log"]).read_bytes())
    backend.cancel(handle)
    assert (Path(handle["job_dir"]) / "cancelled").exists()
