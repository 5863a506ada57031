"""No shell injection from any parameter: render the job script and the (SSH-style) command line with
hostile values, parse them with ``bash -n``, run them with a recorder in place of the real program and
check that every value arrives as one literal argument."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_curation.backends.slurm import ATTEMPT, ENV_FILE, TASK, SlurmBackend, check_job_dir

# Any text but NUL (argv cannot carry it; the backend refuses it) and lone surrogates (not encodable).
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=24)
SHELLISH = st.sampled_from(
    [
        "'",
        '"',
        "$(touch PWNED)",
        "`touch PWNED`",
        "${HOME}",
        "$HOME",
        "\n",
        "\\",
        ";",
        "|",
        "&",
        "*",
        "?",
        "~",
        "{a,b}",
        "#",
        " ",
        "\t",
        "!",
        "-",
        "--x",
        "%j",
    ]
)
VALUE = st.lists(st.one_of(SHELLISH, TEXT), max_size=5).map("".join)
NAME = VALUE.map(lambda v: v.replace("/", "_")[:60]).filter(lambda v: v not in ("", ".", ".."))

RECORDER = """#!/bin/sh
printf '%s\\0' "$@" > "$REC_OUT"
printf '%s' "$CURATION_TEST_ECHO" > "$REC_OUT.env"
printf '%s' "$PWD" > "$REC_OUT.pwd"
"""


def _recorded(path: Path) -> list[str]:
    return path.read_bytes().decode().split("\0")[:-1]


def _make_recorder(base: Path, dirname: str) -> str:
    where = base / dirname
    where.mkdir(parents=True, exist_ok=True)
    rec = where / "rec"
    rec.write_text(RECORDER)
    rec.chmod(0o755)
    return str(rec)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(python_dir=NAME, job_name=NAME, spec_name=NAME, echo=VALUE, task=st.integers(0, 999), attempt=st.integers(1, 99))
def test_job_script_keeps_every_value_literal(python_dir, job_name, spec_name, echo, task, attempt):
    base = Path(tempfile.mkdtemp(prefix="d1fuzz-"))
    try:
        backend = SlurmBackend(python=_make_recorder(base, python_dir), env={"CURATION_TEST_ECHO": echo})
        job_dir = base / "jobs" / job_name
        job_dir.mkdir(parents=True)
        spec = str(job_dir / spec_name)
        args = [
            "run",
            spec,
            "--result",
            (str(job_dir / "result-"), ATTEMPT, "-", TASK, ".json"),
            "--shard-group",
            (TASK, "/1000"),
        ]
        script = job_dir / "job.sh"
        script.write_text(backend.script.render(str(job_dir), args))
        assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
        dask_script = job_dir / "dask.sh"  # the variant that starts a Dask cluster in the allocation
        dask_script.write_text(backend.script.render(str(job_dir), args, dask_cluster=True))
        assert subprocess.run(["bash", "-n", str(dask_script)], capture_output=True).returncode == 0
        assert "CURATION_TEST_ECHO" not in script.read_text()  # the environment is in its own file
        env_file = job_dir / ENV_FILE
        env_file.write_bytes(backend.script.render_env())
        out = base / "argv"
        proc = subprocess.run(
            ["bash", str(script), str(attempt)],
            capture_output=True,
            cwd=base,
            env={"PATH": os.environ["PATH"], "REC_OUT": str(out), "SLURM_ARRAY_TASK_ID": str(task)},
        )
        assert proc.returncode == 0, proc.stderr
        assert _recorded(out) == [
            "-m",
            "airflow_curation.jobs",
            "run",
            spec,
            "--result",
            f"{job_dir}/result-{attempt}-{task}.json",
            "--shard-group",
            f"{task}/1000",
        ]
        assert Path(f"{out}.env").read_bytes().decode() == echo
        assert not env_file.exists()  # the last consumer of the attempt deleted it
        assert Path(f"{out}.pwd").read_bytes().decode() == str(job_dir)
        assert not list(base.rglob("PWNED")) and not Path("PWNED").exists()
    finally:
        shutil.rmtree(base, ignore_errors=True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    partition=VALUE,
    account=VALUE,
    qos=VALUE,
    time_limit=VALUE,
    mem=VALUE,
    extra=st.lists(VALUE.map(lambda v: "--" + v), max_size=3),
    job_dir=VALUE.map(lambda v: "/x/" + v),
)
def test_remote_command_line_keeps_every_value_literal(partition, account, qos, time_limit, mem, extra, job_dir):
    """Over SSH the remote shell parses one command string; ``bash -c`` does exactly that here."""
    extra = [e for e in extra if e.split("=", 1)[0] not in ("--wrap", "--array", "--dependency", "--parsable")]
    base = Path(tempfile.mkdtemp(prefix="d1fuzz-"))
    try:
        rec = _make_recorder(base, "bin")
        backend = SlurmBackend(
            partition=partition or None,
            account=account or None,
            qos=qos or None,
            time_limit=time_limit or None,
            mem=mem or None,
            sbatch_options=extra,
        )
        try:
            check_job_dir(job_dir)
        except ValueError:
            assert any(c in job_dir for c in "%\\\n\r")
        argv = backend.sbatch.argv(
            f"{job_dir}/job.sh",
            "curation-x",
            f"{job_dir}/job.log",
            job_dir,
            array="0-3%2",
            dependency="afterany:12",
            script_args=["3"],
        )
        assert argv[-2:] == [f"{job_dir}/job.sh", "3"]
        # What the SSH transport hands the login node's shell: one command line, shlex.join(argv).
        full = ["bash", "-c", shlex.join([rec, *argv[1:]])]
        out = base / "argv"
        proc = subprocess.run(
            full, capture_output=True, cwd=base, env={"PATH": os.environ["PATH"], "REC_OUT": str(out)}
        )
        assert proc.returncode == 0, proc.stderr
        assert _recorded(out) == argv[1:]
        for flag, value in (
            ("--partition", partition),
            ("--account", account),
            ("--qos", qos),
            ("--time", time_limit),
            ("--mem", mem),
        ):
            assert (f"{flag}={value}" in argv) == bool(value)
        assert not list(base.rglob("PWNED"))
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("bad", ["/lake/100%/x", "/lake/a\\b", "/lake/a\nb"])
def test_job_folders_slurm_would_rewrite_are_refused(bad):
    with pytest.raises(ValueError, match="would interpret"):
        check_job_dir(bad)
