"""What a Slurm submission carries, without a cluster: a recorder in place of ``sbatch`` keeps the
environment and argv it was run with (sbatch hands Slurm the variables its ``--export`` names, which Slurm
keeps in the job's record), and the job folder is read whole. A credential of the submitting process or
of ``env`` is in the ``0600`` environment file only, and the job still gets it from there.
``test_slurm_secrets.py`` reads what a real slurmctld saved."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_curation.backends.slurm import ENV_FILE, EXPORTED, SlurmBackend

from .conftest import spec_for

SBATCH = """#!/bin/sh
# Records what sbatch would be given: its environment and its argv, then prints a job id.
env > "{out}/sbatch.env"
printf '%s\\n' "$@" > "{out}/sbatch.argv"
echo 4242
"""


def test_credentials_reach_the_job_from_its_0600_file_never_sbatch_or_a_script(tmp_path, monkeypatch):
    worker_key, worker_pw, option_secret = "wJalrXUtnFEMI-worker-7e1a", "pw123", "s3cr3t-opt-51c0"
    rec = tmp_path / "rec"
    bin_dir = tmp_path / "bin"
    rec.mkdir()
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(SBATCH.format(out=rec))
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    # The Airflow worker's own environment: a cloud key and a database URI with a password.
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", worker_key)
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"postgresql://airflow:{worker_pw}@pg/airflow")
    monkeypatch.setenv("CURATION_PLAIN_SETTING", "kept")
    env = {"CURATION_STORAGE_OPTIONS_S3": json.dumps({"key": "AKIA-FAKE", "secret": option_secret})}
    backend = SlurmBackend(python=sys.executable, work_dir=str(tmp_path / "jobs"), env=env)
    lake = {"root": str(tmp_path / "lake"), "dataset": "ds", "snapshot": None}
    handle = backend.submit(spec_for(lake))
    assert handle["job_id"] == "4242"

    sbatch_env = (rec / "sbatch.env").read_text()
    assert "CURATION_PLAIN_SETTING=kept" in sbatch_env  # sbatch runs with the plain environment...
    exports = [a for a in (rec / "sbatch.argv").read_text().splitlines() if a.startswith("--export=")]
    assert exports == ["--export=" + ",".join(EXPORTED)]  # ...and hands Slurm only these names of it
    secrets = (worker_key, worker_pw, option_secret)
    for text in (sbatch_env, (rec / "sbatch.argv").read_text(), json.dumps(handle)):
        assert not [s for s in secrets if s in text]
    env_file = Path(handle["job_dir"], ENV_FILE)
    holding = {p.name for p in Path(handle["job_dir"]).rglob("*") if any(s.encode() in p.read_bytes() for s in secrets)}
    assert holding == {ENV_FILE}  # not job.sh, not spec.json
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    # The job sources the file (job.sh does, first thing) and so gets what sbatch no longer exports.
    assert '. "$env_file"' in Path(handle["job_dir"], "job.sh").read_text()
    got = subprocess.run(
        [
            "bash",
            "-c",
            f'. {env_file} && printf "%s|%s" "$AWS_SECRET_ACCESS_KEY" "$AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"',
        ],
        env={"PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert got == f"{worker_key}|postgresql://airflow:{worker_pw}@pg/airflow"


def test_a_credential_too_short_to_mask_is_named_in_a_warning(tmp_path, caplog):
    SlurmBackend(work_dir=str(tmp_path), env={"TINY_PASSWORD": "a", "HF_TOKEN": "hf_long_enough"})
    assert "slurm env: TINY_PASSWORD holds a credential shorter than 3 characters" in caplog.text
    assert "HF_TOKEN" not in caplog.text


def test_an_object_store_lake_needs_no_work_dir(tmp_path, monkeypatch):
    """Job files cannot live on S3 (sbatch reads the script, slurmd writes the log): with no work_dir the
    job folder goes under $CURATION_SLURM_JOBS_DIR (default ~/.airflow-curation/slurm-jobs); only over SSH,
    where this host's home is not the cluster's, a work_dir must be given."""
    monkeypatch.setenv("CURATION_SLURM_JOBS_DIR", str(tmp_path / "jobs"))
    spec = spec_for({"root": "s3://bucket/lake", "dataset": "web", "snapshot": None}, run_id="run1")
    job_dir = SlurmBackend().job_dir_for(spec)
    assert job_dir.startswith(str(tmp_path / "jobs" / "run1" / spec.stage) + "/")
    monkeypatch.delenv("CURATION_SLURM_JOBS_DIR")
    assert SlurmBackend().job_dir_for(spec).startswith(os.path.expanduser("~/.airflow-curation/slurm-jobs/run1/"))
    from airflow.providers.ssh.hooks.ssh import SSHHook

    from airflow_curation.hooks.ssh_transport import SSHTransport

    with pytest.raises(ValueError, match="over SSH"):  # a login node: nothing connects until a command runs
        SlurmBackend(transport=SSHTransport(SSHHook(remote_host="login1"))).job_dir_for(spec)
