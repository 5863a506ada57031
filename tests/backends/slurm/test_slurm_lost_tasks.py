"""An array task lost to its node, a preemption or its memory limit, as the follower sees it: the backend's
status of an attempt whose collect job wrote a failed result, from ``scontrol show job -o`` as Slurm 22.05
prints it (those states need a site the one-node test cluster is not: a failing node, a preempting partition,
the cgroup task plugin). NODE_FAIL and PREEMPTED are relaunched like a cancelled task, within the budget and
said; OUT_OF_MEMORY is not (it would run out again), and its message says OOM and which option to raise."""

from __future__ import annotations

import subprocess

import pytest

from airflow_curation.backends.slurm import SlurmBackend
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest, ManifestHead, UnitEntry
from airflow_curation.jobs.follow import Follower
from airflow_curation.jobs.result import JobResult

from .test_slurm_states import LINE

ARRAY, COLLECT = "700", "703"


class Controller:
    """Answers ``scontrol show job -o ID`` for one attempt: three array tasks (task 1 ended in ``word``) and
    their collect job, which exited 1 after writing the failed result; anything else is refused."""

    remote = False

    def __init__(self, word: str) -> None:
        tasks = {0: "COMPLETED", 1: word, 2: "COMPLETED"}
        self.jobs = {
            ARRAY: "\n".join(
                LINE.format(
                    id=701 + t, array=f"ArrayJobId={ARRAY} ArrayTaskId={t} ", state=s, reason="None", exit="0:0"
                )
                for t, s in tasks.items()
            ),
            COLLECT: LINE.format(id=COLLECT, array="", state="FAILED", reason="NonZeroExitCode", exit="1:0"),
        }

    def run(self, argv, data, timeout):
        if argv[:4] != ["scontrol", "show", "job", "-o"] or argv[4] not in self.jobs:
            raise OSError(f"not on this test's controller: {argv}")
        return subprocess.CompletedProcess(argv, 0, (self.jobs[argv[4]] + "\n").encode(), b"")


def _attempt(tmp_path, word: str, **options) -> tuple[SlurmBackend, dict]:
    """Attempt 1 of a 3-group run whose collect found group 1's units lost (a relaunch pending)."""
    lake = Lake(str(tmp_path / "lake"), "d")
    uri = lake.manifest_uri("r", "preprocess")
    units = [UnitEntry(f"u{i}", [], "c", status="done" if i != 1 else "failed") for i in range(3)]
    units[1].error = "no checkpoint: its shard group did not finish it"
    Manifest(
        "d", "preprocess", "r", "f", lake.to_dict(), units=units, status="failed", relaunch={"pending": True}
    ).write(uri)
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    handle = {
        "backend": "slurm",
        "job_id": COLLECT,
        "array_job_id": ARRAY,
        "array": "0-2",
        "attempt": 1,
        "groups": 3,
        "job_dir": str(job_dir),
        "log": str(job_dir / "job.log"),
        "result": str(job_dir / "result-1.json"),
        "manifest_uri": uri,
    }
    JobResult("collect", "failed", 1, manifest_uri=uri, error="StageFailed: preprocess: 1 of 3 units failed").write(
        handle["result"]
    )
    return SlurmBackend(shard_groups=3, transport=Controller(word), work_dir=str(job_dir), **options), handle


@pytest.mark.parametrize(
    ("word", "said"),
    [("NODE_FAIL", "group 1/3 lost its node (NODE_FAIL)"), ("PREEMPTED", "group 1/3 was preempted (PREEMPTED)")],
)
def test_a_task_lost_to_its_node_or_a_preemption_is_relaunched_like_a_cancel(tmp_path, word, said):
    backend, handle = _attempt(tmp_path, word)
    status = backend.status(handle)
    assert status.state.value == "failed" and status.retryable, status
    assert said in status.message and "1 of 3 units failed" in status.message, status.message
    look = Follower(backend, handle, relaunch=False).conclude(status)
    assert look.relaunch_due  # the follower that may relaunch does (attempt 2 of 3)
    assert ManifestHead.read(handle["manifest_uri"]).relaunch_pending  # a streaming reader waits for it


def test_a_task_out_of_memory_fails_the_run_saying_oom_and_the_option_to_raise(tmp_path):
    backend, handle = _attempt(tmp_path, "OUT_OF_MEMORY", mem="4G")
    status = backend.status(handle)
    assert status.state.value == "failed" and not status.retryable, status
    assert "group 1/3 ran out of memory (OUT_OF_MEMORY)" in status.message, status.message
    assert "out of memory (OOM): raise the Slurm backend's mem option (sbatch --mem, now 4G)" in status.message
    look = Follower(backend, handle, relaunch=False).conclude(status)
    assert not look.relaunch_due and look.ended
    head = ManifestHead.read(handle["manifest_uri"])  # a streaming reader stops waiting, and says why
    assert not head.relaunch_pending and "out of memory (OOM)" in head.relaunch["why"]
