"""The contract every backend keeps, and one harness per backend to run it on.

A harness builds the backend (its jobs run the test stage of ``tests/backends/slurm/site``: N units that sleep,
fail while a flag file exists...), plays whatever the test machine lacks (the Kubernetes kubelet, the Ray
cluster) and snapshots the state outside the lake that ``status`` must never change (the API server's
objects, Slurm's view of the job, the Ray job table). The lake's folder has a non-ASCII name, so every
job log holds non-ASCII text (the manifest's path).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from airflow_curation.backends import Backend, JobHandle, JobState, JobStatus, get_backend
from airflow_curation.hooks.factory import backend_for
from airflow_curation.jobs import attempts
from airflow_curation.jobs.follow import Follower, Look
from airflow_curation.jobs.groups import with_min_units
from airflow_curation.jobs.run import RunRecord
from airflow_curation.jobs.spec import JobSpec

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
SITE = str(TESTS / "backends" / "slurm" / "site")
JOB_PYTHONPATH = os.pathsep.join([SITE, str(REPO)])
LAKE_NAME = "lac-été-湖"


def load_module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tree(root: Path) -> dict[str, tuple[int, str]]:
    """Every file under ``root`` with its mtime and content hash."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            out[str(p.relative_to(root))] = (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


class Harness:
    """One backend under the contract. ``root`` holds the lake (and job folders); ``drive`` lets the
    jobs launched so far run where nothing runs them by itself; ``external`` is the state outside
    ``root`` that status must leave alone."""

    name = "base"

    def __init__(self, root: Path) -> None:
        self.root = root
        self.lake = {"root": str(root / LAKE_NAME), "dataset": "ds", "snapshot": None}
        self.backend: Backend = self.make()

    def make(self, **options: Any) -> Backend:
        raise NotImplementedError

    def spec(self, run_id: str = "r1", **config: Any) -> JobSpec:
        return JobSpec(stage="slurmtest", lake=self.lake, run_id=run_id, config=config)

    def drive(self) -> None:
        """Run what was launched, where no scheduler does it by itself."""

    def external(self, handle: JobHandle) -> Any:
        return None

    def wait(self, handle: JobHandle, timeout: float = 180.0) -> JobStatus:
        deadline = time.time() + timeout
        while True:
            self.drive()
            st = self.backend.status(handle)
            if st.state.finished:
                return st
            if time.time() > deadline:
                raise AssertionError(f"{self.name}: no end in {timeout}s: {st}\n{self.backend.logs(handle)[0][-3000:]}")
            time.sleep(0.3)

    def close(self) -> None:
        pass


class LocalHarness(Harness):
    name = "local"

    def make(self, **options: Any) -> Backend:
        options = {"work_dir": str(self.root / "jobs"), "env": {"PYTHONPATH": JOB_PYTHONPATH}, **options}
        return backend_for("local", options)


class SlurmHarness(Harness):
    name = "slurm"

    def make(self, **options: Any) -> Backend:
        return backend_for("slurm", {"python": sys.executable, "env": {"PYTHONPATH": JOB_PYTHONPATH}, **options})

    def external(self, handle: JobHandle) -> Any:
        handle = attempts.latest(self.backend, handle).to_dict()
        ids = [j for j in (handle["job_id"], handle.get("array_job_id")) if j]
        out = subprocess.run(["scontrol", "show", "job", "-o", *ids], capture_output=True, text=True).stdout
        # Slurm's own record of the attempt's jobs (times that only advance while they run excluded).
        return sorted(
            " ".join(
                w
                for w in line.split()
                if w.split("=")[0] in ("JobId", "ArrayTaskId", "JobState", "ExitCode", "Restarts", "Dependency")
            )
            for line in out.splitlines()
        )


class KubernetesHarness(Harness):
    """The loopback API server and a kubelet stand-in that runs the Jobs' pods as local processes."""

    name = "kubernetes"

    def __init__(self, root: Path) -> None:
        from k8s_fake_apiserver import FakeKubernetes
        from k8s_fake_kubelet import FakeKubelet

        self.fake = FakeKubernetes().__enter__()
        self.kubelet = FakeKubelet(self.fake, root / "kubelet")
        self.ran: set[str] = set()
        super().__init__(root)

    def make(self, **options: Any) -> Backend:
        # The factory's client: the cncf-kubernetes provider's hook on a kubeconfig for the loopback server.
        return backend_for(
            "kubernetes",
            {
                "host": self.fake.url,
                "namespace": "default",
                "launch_kinds": {"slurmtest": "indexed"},
                "shard_groups": 2,
                "pod": {"env": {"PYTHONPATH": JOB_PYTHONPATH}},  # the pods' test stage (site/sitecustomize.py)
                **options,
            },
        )

    def drive(self) -> None:
        for name in self.fake.names("jobs"):  # group Jobs sort before their collect Job
            if name not in self.ran:
                self.ran.add(name)
                self.kubelet.run_job(name)

    def external(self, handle: JobHandle) -> Any:
        writes = [r for r in self.fake.requests if r[0] != "GET"]
        return json.dumps(sorted((list(k), v) for k, v in self.fake.objects.items()), default=str), len(writes)

    def close(self) -> None:
        self.fake.__exit__(None, None, None)


class LocalRayClient:
    """Ray's job submission API as the backend uses it, with each entrypoint a local process: the
    backend's own code (entrypoint, result, states, logs, stop) runs for real; Ray does not."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.jobs: dict[str, dict[str, Any]] = {}

    def submit_job(self, *, entrypoint: str, submission_id: str, runtime_env: dict, metadata: dict) -> str:
        log = self.root / f"{submission_id}.log"
        self.root.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                entrypoint,
                shell=True,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **runtime_env.get("env_vars", {})},
                start_new_session=True,
            )
        self.jobs[submission_id] = {"proc": proc, "log": log, "stopped": False}
        return submission_id

    def get_job_info(self, job_id: str) -> SimpleNamespace:
        job = self.jobs[job_id]
        code = job["proc"].poll()
        status = "STOPPED" if job["stopped"] else "RUNNING" if code is None else "SUCCEEDED" if code == 0 else "FAILED"
        return SimpleNamespace(status=status, message=f"exit {code}" if code else "")

    def get_job_logs(self, job_id: str) -> str:
        return self.jobs[job_id]["log"].read_bytes().decode("utf-8", "replace")

    def stop_job(self, job_id: str) -> bool:
        job = self.jobs[job_id]
        if job["proc"].poll() is None:
            job["stopped"] = True
            os.killpg(job["proc"].pid, signal.SIGTERM)
            job["proc"].wait(30)
        return True


class RayHarness(Harness):
    name = "ray"

    def make(self, **options: Any) -> Backend:
        self.client = getattr(self, "client", None) or LocalRayClient(self.root / "ray")
        options = {"address": "http://ray-head:8265", "python": sys.executable, **options}
        # The client the factory would build, injected: a stand-in whose jobs are local processes.
        return get_backend("ray", env={"PYTHONPATH": JOB_PYTHONPATH}, **options, client=self.client)

    def external(self, handle: JobHandle) -> Any:
        return {k: (j["proc"].poll(), j["stopped"]) for k, j in self.client.jobs.items()}

    def close(self) -> None:
        for job_id in list(self.client.jobs):
            self.client.stop_job(job_id)


HARNESSES = {"local": LocalHarness, "slurm": SlurmHarness, "kubernetes": KubernetesHarness, "ray": RayHarness}


# -- the contract --------------------------------------------------------------------------------


def check_result_after_success(h: Harness) -> None:
    spec = h.spec(units=3, rows=4)
    handle = h.backend.launch(spec)
    assert json.loads(json.dumps(handle)) == handle  # kept in Airflow's task state store
    st = h.wait(handle)
    assert st.state == JobState.SUCCEEDED, st
    assert st.result["status"] == "succeeded" and st.result["result_version"] == 1
    assert st.result["rows"] == 12 and st.result["manifest_uri"] == spec.manifest_uri
    # The spec the job runs: the one launched, but for min_units, raised to the groups it runs in (a small
    # input still gives every array task or indexed pod a unit: jobs.groups.with_min_units).
    ran = h.backend.spec_of(handle)
    assert int(ran.config.get("min_units") or 1) >= int(spec.config.get("min_units") or 1)
    assert ran == with_min_units(spec, int(ran.config.get("min_units") or 1))


def check_status_is_read_only(h: Harness, polls: int = 200) -> None:
    flag = h.root / "broken"
    flag.touch()
    handle = h.backend.launch(h.spec(units=4, fail_units=["u001"], fail_flag=str(flag), max_attempts=1))
    first = h.wait(handle)
    assert first.state == JobState.FAILED
    before, outside = tree(h.root), h.external(handle)
    for _ in range(polls):
        st = h.backend.status(handle)
        assert (st.state, st.retryable) == (first.state, first.retryable)
    assert h.external(handle) == outside
    assert tree(h.root) == before  # nothing written, touched, created or deleted


def check_cancel_is_idempotent(h: Harness) -> None:
    handle = h.backend.launch(h.spec(units=2, sleep_s=60))
    h.backend.cancel(handle)
    h.backend.cancel(handle)
    deadline = time.time() + 120
    while (st := h.backend.status(handle)).state != JobState.CANCELLED:
        assert time.time() < deadline and not st.state.finished, st
        time.sleep(0.3)
    h.backend.cancel(handle)
    assert h.backend.status(handle).state == JobState.CANCELLED


def check_logs_by_byte_offsets(h: Harness) -> None:
    handle = h.backend.launch(h.spec(units=2))
    assert h.wait(handle).state == JobState.SUCCEEDED
    text, end = h.backend.logs(handle, 0)
    assert LAKE_NAME in text and end == len(text.encode())
    i = text.index(LAKE_NAME) + len("lac-é")  # just after a two-byte character
    cut = len(text[:i].encode())
    assert cut != i  # bytes, not characters
    assert h.backend.logs(handle, cut) == (text[i:], end)
    assert h.backend.logs(handle, end) == ("", end)


def check_failure_message(h: Harness) -> None:
    flag = h.root / "fails"
    flag.touch()
    handle = h.backend.launch(h.spec(run_id="r2", units=3, fail_units=["u002"], fail_flag=str(flag), max_attempts=1))
    st = h.wait(handle)
    assert st.state == JobState.FAILED and "u002" in st.message, st
    assert st.result is None or st.result["status"] == "failed"


def follow_to_end(h: Harness, follower: Follower, timeout: float = 240.0) -> tuple[Look, str]:
    """Look until the run is over (what the operator, the CLI and a gate do): the last look, and the
    log text of every look."""
    deadline, text = time.time() + timeout, ""
    while True:
        h.drive()
        look = follower.look()
        text += look.text
        if look.ended:
            return look, text
        assert time.time() < deadline, f"{h.name}: no end in {timeout}s: {look.status}"
        time.sleep(0.3)


def check_follower_streams_the_log_once(h: Harness) -> None:
    handle = h.backend.launch(h.spec(run_id="r4", units=2))
    look, text = follow_to_end(h, Follower(h.backend, handle))
    assert look.status.state == JobState.SUCCEEDED and look.record.job_id == handle["job_id"], look
    assert LAKE_NAME in text and h.backend.logs(handle, 0)[0].startswith(text)  # each byte once, in order


def check_relaunch_is_one_attempt_that_every_holder_follows(h: Harness) -> None:
    """The jobs layer's relaunch of a failed run: two followers relaunching the same failure at once launch
    one attempt 2, which runs only what is unfinished; a holder of attempt 1's record follows attempt 2
    to its end; a running attempt is never relaunched."""
    flag = h.root / "broken"
    flag.touch()
    spec = h.spec(run_id="r3", units=4, fail_units=["u001"], fail_flag=str(flag), max_attempts=1)
    first = RunRecord.from_dict(h.backend.launch(spec))
    assert h.wait(first.to_dict()).state == JobState.FAILED
    flag.unlink()
    launched, launch = [], h.backend.launch

    def counted(*args: Any, **kwargs: Any) -> JobHandle:
        launched.append(kwargs.get("previous"))
        return launch(*args, **kwargs)

    h.backend.launch = counted
    threads = [threading.Thread(target=attempts.relaunch, args=(h.backend, first)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(launched) == 1 and launched[0]["attempt"] == 1, launched
    second = attempts.latest(h.backend, first)
    assert second.attempt == 2 and second.submitted_at == first.submitted_at
    if not h.backend.status(second.to_dict()).state.finished:
        try:
            attempts.relaunch(h.backend, first)
        except RuntimeError as e:
            assert "still" in str(e)
        else:
            raise AssertionError("a running attempt was relaunched")
    look, _ = follow_to_end(h, Follower(h.backend, first, relaunch=False))
    assert look.record.attempt == 2 and look.status.state == JobState.SUCCEEDED, look
    assert len(launched) == 1


CHECKS = {
    "result_after_success": check_result_after_success,
    "status_is_read_only": check_status_is_read_only,
    "cancel_is_idempotent": check_cancel_is_idempotent,
    "logs_by_byte_offsets": check_logs_by_byte_offsets,
    "failure_message": check_failure_message,
    "follower_streams_the_log_once": check_follower_streams_the_log_once,
    "relaunch_is_one_attempt_that_every_holder_follows": check_relaunch_is_one_attempt_that_every_holder_follows,
}
