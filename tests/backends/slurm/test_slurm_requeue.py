"""One array task cancelled under a run that was not (an admin's ``scancel``, a preemption that cancels):
the follower relaunches that group, within ``max_resubmits``, and says so; with the budget spent the run
fails and says why. On the real one-node Slurm."""

from __future__ import annotations

import subprocess
import time

import pytest

from airflow_curation.backends.base import JobState
from airflow_curation.core.manifest import Manifest, ManifestHead

from .conftest import settle, spec_for, wait_for

pytestmark = pytest.mark.slurm


def _task_state(array_job_id: str, task: int) -> str:
    out = subprocess.run(
        ["scontrol", "show", "job", "-o", f"{array_job_id}_{task}"], capture_output=True, text=True
    ).stdout
    return next((w.split("=", 1)[1] for w in out.split() if w.startswith("JobState=")), "")


def _cancel_task_once_running(handle: dict, task: int, timeout: float = 300) -> None:
    deadline = time.time() + timeout  # a guard against a cluster busy with other sessions' jobs
    while _task_state(handle["array_job_id"], task) != "RUNNING":
        assert time.time() < deadline, f"task {task} never ran"
        time.sleep(0.3)
    subprocess.run(["scancel", f"{handle['array_job_id']}_{task}"], check=True)


def _follow(backend, handle: dict, relaunch: list | None = None) -> tuple[list[str], JobState, dict]:
    """The follower's loop (operator, sensor): the ended status, settled; the messages it would log.
    ``relaunch``: gets what each ended attempt's manifest said of a relaunch before the follower decided."""
    said = []
    while True:
        st = wait_for(backend, handle, timeout=600)
        if relaunch is not None:
            relaunch.append(ManifestHead.read(handle["manifest_uri"]).relaunch)
        new = settle(backend, handle, st)
        said.append(st.message)
        if new is None:
            return said, st.state, handle
        handle = new


def test_a_cancelled_array_task_is_relaunched_and_the_run_completes(make_backend, lake, tmp_path):
    slow = tmp_path / "slow"
    slow.touch()
    backend = make_backend(shard_groups=3)  # the default budget: max_resubmits=2
    handle = backend.submit(spec_for(lake, units=6, sleep_s=20, slow_flag=str(slow)))
    _cancel_task_once_running(handle, 1)
    slow.unlink()  # the other units go fast from here
    seen: list = []
    said, state, last = _follow(backend, handle, seen)
    assert state == JobState.SUCCEEDED, said
    assert "group 1/3 was cancelled (CANCELLED" in said[0] and "relaunched, attempt 2 of 3" in said[0], said
    # Attempt 1's collect said a relaunch was pending (a streaming reader waits for it); the reopen cleared it.
    assert seen[0]["pending"] and seen[0]["lost_units"] >= 1 and seen[1] is None, seen
    assert last["attempt"] == 2 and last["array"] == "1"  # only the cancelled group ran again
    m = Manifest.read(handle["manifest_uri"])
    assert m.status == "complete" and m.rows == 6 * 5
    assert "attempt 2 resubmitted groups 1" in backend.logs(handle)[0]


def test_with_the_budget_spent_a_cancelled_task_fails_the_run_clearly(make_backend, lake, tmp_path):
    slow = tmp_path / "slow"
    slow.touch()
    backend = make_backend(shard_groups=3, max_resubmits=0)
    handle = backend.submit(spec_for(lake, units=6, sleep_s=20, slow_flag=str(slow)))
    _cancel_task_once_running(handle, 1)
    slow.unlink()
    seen: list = []
    said, state, last = _follow(backend, handle, seen)
    assert state == JobState.FAILED and last["attempt"] == 1
    assert seen == [None]  # the last attempt: no relaunch pending, a streaming reader fails at once
    (message,) = said
    assert "group 1/3 was cancelled (CANCELLED" in message
    assert "not relaunched: attempt 1 of 1 was the last (max_resubmits=0)" in message, message
    assert Manifest.read(handle["manifest_uri"]).status == "failed"


def _node_name() -> str:
    out = subprocess.run(["scontrol", "show", "node", "-o"], capture_output=True, text=True, check=True).stdout
    return out.split()[0].split("=", 1)[1]


def test_an_array_task_that_lost_its_node_is_relaunched_and_the_run_completes(make_backend, lake, tmp_path):
    """A real NODE_FAIL: the node is set DOWN under a running task (``--no-requeue``: else Slurm requeues the
    task itself), then resumed; the follower relaunches the groups with unfinished units, as after a cancel."""
    slow = tmp_path / "slow"
    slow.touch()
    backend = make_backend(shard_groups=2, sbatch_options="--no-requeue")
    handle = backend.submit(spec_for(lake, units=4, sleep_s=20, slow_flag=str(slow)))
    node = _node_name()
    try:
        deadline = time.time() + 300  # a guard against a busy cluster, not a timing assertion
        while _task_state(handle["array_job_id"], 1) != "RUNNING":
            assert time.time() < deadline, "task 1 never ran"
            time.sleep(0.3)
        subprocess.run(
            ["scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=curation-test-lost-node"], check=True
        )
        while _task_state(handle["array_job_id"], 1) != "NODE_FAIL":
            assert time.time() < deadline, _task_state(handle["array_job_id"], 1)
            time.sleep(0.3)
    finally:
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], check=False)
        slow.unlink(missing_ok=True)
    seen: list = []
    said, state, last = _follow(backend, handle, seen)
    assert state == JobState.SUCCEEDED, said
    assert "group 1/2 lost its node (NODE_FAIL" in said[0] and "relaunched, attempt 2 of 3" in said[0], said
    assert seen[0]["pending"] and seen[1] is None, seen  # a streaming reader waited for the relaunch
    assert last["attempt"] == 2
    m = Manifest.read(handle["manifest_uri"])
    assert m.status == "complete" and m.rows == 4 * 5
