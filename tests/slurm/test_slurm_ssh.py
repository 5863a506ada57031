"""The Slurm commands over a real SSH connection (sshd on loopback as the login node): submit, status,
logs, cancel; hostile values stay literal through the remote shell."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from airflow_curation.backends.base import JobState
from airflow_curation.core.manifest import Manifest

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
