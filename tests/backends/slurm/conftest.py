"""A real one-node Slurm (munged, slurmctld, slurmd) for the whole test session.

``scripts/slurm_up.sh`` installs (if needed) and starts it; it is stopped afterwards unless it was
already running when the session began (a developer's cluster is left alone).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_curation.backends.base import JobState, JobStatus
from airflow_curation.backends.slurm import SlurmBackend
from airflow_curation.jobs import attempts
from airflow_curation.jobs.follow import Follower
from airflow_curation.jobs.spec import JobSpec

REPO = Path(__file__).resolve().parents[3]
SITE = str(Path(__file__).parent / "site")
# The jobs' PYTHONPATH: the test stage, then the code under test (not whatever checkout the venv's
# editable install points at).
JOB_PYTHONPATH = os.pathsep.join([SITE, str(REPO)])
SLURM_DIR = os.environ.get("CURATION_SLURM_DIR", "/tmp/curation-slurm")


def _register_test_stage() -> None:
    """The test-only ``slurmtest`` stage, known in this process too (operators check a stage's settings
    before they launch it); job processes get it from ``site/sitecustomize.py``."""
    import importlib.util

    from airflow_curation.stages import register_stage

    name = "curation_slurm_test_stage"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(SITE) / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    register_stage("slurmtest", sys.modules[name].SleepyStage)


_register_test_stage()


def _running() -> bool:
    pid_file = Path(SLURM_DIR, "run", "slurmctld.pid")
    try:
        os.kill(int(pid_file.read_text()), 0)
        return True
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return False


def _other_users(users: Path) -> list[int]:
    """Pids of other live test sessions that use the cluster (stale entries are removed)."""
    alive = []
    for entry in users.glob("*"):
        try:
            pid = int(entry.name)
            os.kill(pid, 0)
        except (ValueError, ProcessLookupError):
            entry.unlink(missing_ok=True)
            continue
        if pid != os.getpid():
            alive.append(pid)
    return alive


@pytest.fixture(scope="session")
def slurm_cluster():
    users = Path(SLURM_DIR, "users")
    was_running = _running() and not _other_users(users) if users.exists() else _running()
    env = {**os.environ, "CURATION_SLURM_DIR": SLURM_DIR, "CURATION_SLURM_MAX_ARRAY_SIZE": "8"}
    subprocess.run(["bash", str(REPO / "scripts" / "slurm_up.sh")], check=True, env=env, timeout=600)
    users.mkdir(parents=True, exist_ok=True)
    me = users / str(os.getpid())
    me.touch()  # another session running at the same time must not stop the cluster under us
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(Path(SLURM_DIR, "slurm.conf"))
    yield os.environ["SLURM_CONF"]
    if old is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = old
    me.unlink(missing_ok=True)
    if not was_running and not _other_users(users):
        subprocess.run(["bash", str(REPO / "scripts" / "slurm_down.sh")], env=env, timeout=120)


@pytest.fixture
def make_backend(slurm_cluster, tmp_path):
    def make(**options) -> SlurmBackend:
        env = {"PYTHONPATH": JOB_PYTHONPATH, **options.pop("env", {})}
        options.setdefault("min_group_bytes", 1)  # the tests' shards are KBs: still one task per shard
        # Through the factory, as everywhere: a slurm_conn_id becomes the SSH provider's transport.
        from airflow_curation.hooks.factory import backend_for

        backend = backend_for("slurm", {"python": sys.executable, "env": env, **options})
        assert isinstance(backend, SlurmBackend)
        return backend

    return make


@pytest.fixture
def lake(tmp_path) -> dict:
    return {"root": str(tmp_path / "lake"), "dataset": "ds", "snapshot": None}


def spec_for(lake: dict, run_id: str = "run1", **config) -> JobSpec:
    return JobSpec(stage="slurmtest", lake=lake, run_id=run_id, config=config)


def wait_for(
    backend: SlurmBackend, handle: dict, timeout: float = 180.0, until=lambda st: st.state.finished
) -> JobStatus:
    """Poll status until ``until`` holds (a guard against hanging, not a timing assertion)."""
    deadline = time.time() + timeout
    follower = Follower(backend, handle, relaunch=False)  # whoever holds the handle follows the newest attempt
    follower.refresh()
    st = follower.status()
    while not until(st):
        if time.time() > deadline:
            text, _ = backend.logs(follower.handle)
            raise AssertionError(f"job did not get there in {timeout}s: {st}\nlog:\n{text[-3000:]}")
        time.sleep(0.5)
        follower.refresh()
        st = follower.status()
    return st


def follow(backend: SlurmBackend, handle: dict, timeout: float = 240.0) -> tuple[JobStatus, dict]:
    """What the operator does: poll the read-only status and, once the job has ended, settle it (a
    relaunch of a retryable failure, or the end). Returns the last status and handle."""
    deadline = time.time() + timeout
    while True:
        st = wait_for(backend, handle, timeout=max(1.0, deadline - time.time()))
        new = settle(backend, handle, st)
        if new is None:
            return st, handle
        handle = new


def settle(backend: SlurmBackend, handle: dict, st: JobStatus) -> dict | None:
    """The follower's decision (:func:`airflow_curation.jobs.attempts.settle`), as the handle dict."""
    new = attempts.settle(backend, handle, st)
    return None if new is None else new.to_dict()


def relaunch(backend: SlurmBackend, handle: dict) -> dict:
    """The next attempt (:func:`airflow_curation.jobs.attempts.relaunch`), as the handle dict."""
    return attempts.relaunch(backend, handle).to_dict()


def current(backend: SlurmBackend, handle: dict) -> dict:
    """The newest attempt (:func:`airflow_curation.jobs.attempts.latest`), as the handle dict."""
    return attempts.latest(backend, handle).to_dict()


def checkpoint_records(lake: dict, manifest) -> dict[str, dict]:
    """The checkpoint records of a manifest's units that have one, by unit id."""
    import json

    from airflow_curation.core.checkpoint import CheckpointStore
    from airflow_curation.core.layout import Lake

    store = CheckpointStore(Lake.from_dict(lake).checkpoint_dir(manifest.stage, manifest.fingerprint))
    out = {}
    for unit in manifest.units:
        path = Path(store.directory, f"{unit.unit_id}.json")
        if path.exists():
            out[unit.unit_id] = json.loads(path.read_text())
    return out


def finished_ok(st: JobStatus) -> bool:
    return st.state == JobState.SUCCEEDED


# In every session on the loopback login node: credentials of that machine, which sbatch run there must
# not hand to Slurm's job record (tests/backends/slurm/test_slurm_secrets.py).
LOGIN_NODE_CREDENTIALS = {
    "AIRFLOW_CONN_CURATION_DEFAULT": "generic://curator:pw-login-3f9c@db",
    "CURATION_STORAGE_OPTIONS_GCS": "login-secret-8d21",
}


@pytest.fixture(scope="session")
def ssh_login(slurm_cluster, tmp_path_factory):
    """A real sshd on 127.0.0.1 (key auth only) whose sessions see the test cluster: the "login node"
    that the backend reaches over SSH. Returns the ssh argv prefix; the daemon stops after the session."""
    import socket

    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    if not os.path.exists(sshd):
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", "openssh-server"],
            check=True,
            capture_output=True,
            timeout=600,
        )
    d = tmp_path_factory.mktemp("sshd")
    for key in ("host", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / key)], check=True)
    (d / "authorized_keys").write_text((d / "client.pub").read_text())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation directory
    (d / "sshd_config").write_text(f"""Port {port}
ListenAddress 127.0.0.1
HostKey {d}/host
AuthorizedKeysFile {d}/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
PidFile {d}/sshd.pid
SetEnv SLURM_CONF={slurm_cluster} {" ".join(f"{k}={v}" for k, v in LOGIN_NODE_CREDENTIALS.items())}
""")
    proc = subprocess.Popen(
        [sshd, "-D", "-e", "-f", str(d / "sshd_config")], stdout=subprocess.DEVNULL, stderr=open(d / "sshd.log", "wb")
    )
    # One multiplexed connection (what a site would put in ~/.ssh/config) keeps each command cheap.
    prefix = [
        "ssh",
        "-i",
        str(d / "client"),
        "-p",
        str(port),
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "LogLevel=ERROR",
        "-o",
        "ControlMaster=auto",
        "-o",
        f"ControlPath={d}/mux",
        "-o",
        "ControlPersist=120",
        f"{os.environ.get('USER', 'root')}@127.0.0.1",
    ]
    try:
        for _ in range(100):
            if subprocess.run([*prefix, "true"], capture_output=True, timeout=30).returncode == 0:
                break
            time.sleep(0.1)
        else:
            raise RuntimeError(f"sshd did not come up: {(d / 'sshd.log').read_text()[-2000:]}")
        yield prefix
    finally:
        subprocess.run([*prefix[:-1], "-O", "exit", prefix[-1]], capture_output=True, timeout=30)
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture
def ssh_conn_id(ssh_login, monkeypatch) -> str:
    """An Airflow ``ssh`` connection (the SSH provider's own type) to the loopback login node: key
    auth, and the daemon's host key pinned in the connection (strict host key checking)."""
    import json

    key = ssh_login[ssh_login.index("-i") + 1]
    port = int(ssh_login[ssh_login.index("-p") + 1])
    user, host = ssh_login[-1].split("@")
    host_key = " ".join(Path(key).with_name("host.pub").read_text().split()[:2])
    monkeypatch.setenv(
        "AIRFLOW_CONN_SLURM_LOGIN",
        json.dumps(
            {
                "conn_type": "ssh",
                "host": host,
                "port": port,
                "login": user,
                "extra": {"key_file": key, "host_key": host_key, "look_for_keys": "false"},
            }
        ),
    )
    return "slurm_login"
