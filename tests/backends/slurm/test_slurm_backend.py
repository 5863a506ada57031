"""The Slurm backend against a real one-node Slurm: submit, status, logs, cancel, arrays, resubmission."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from airflow_curation.backends import get_backend
from airflow_curation.backends.base import JobState
from airflow_curation.backends.slurm import SlurmBackend
from airflow_curation.core.checkpoint import CheckpointStore
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest, group_of, group_range
from airflow_curation.jobs import progress

from .conftest import JOB_PYTHONPATH, current, follow, relaunch, spec_for, wait_for
from .conftest import checkpoint_records as _records

pytestmark = pytest.mark.slurm


def _scontrol_state(job_id: str) -> str:
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True).stdout
    return out.split("JobState=", 1)[1].split()[0]


class _StateStore:
    """The task state store's API over a dict (what a retried task would read back)."""

    def __init__(self) -> None:
        self.data: dict = {}

    def get(self, key, default=None):
        return self.data.get(key, default)

    def set(self, key, value, *, retention=None) -> None:
        self.data[key] = value


def _drive(op, context: dict) -> dict:
    """Run a deferrable operator as the task runner and triggerer would: execute, then each trigger's
    first event into the method it names, until the task returns."""
    import asyncio

    from airflow.sdk.exceptions import TaskDeferred

    async def first_event(trigger):
        async for event in trigger.run():
            return event.payload

    try:
        return op.execute(context)
    except TaskDeferred as deferred:
        while True:
            event = asyncio.run(first_event(deferred.trigger))
            try:
                return getattr(op, deferred.method_name)(context, event)
            except TaskDeferred as again:
                deferred = again


@pytest.fixture(scope="module")
def timeout_run(slurm_cluster, tmp_path_factory):
    """A job that hits a real TIMEOUT, followed end to end by the stage operator (deferred to its
    trigger, which only polls the read-only status): the operator relaunches it. Slurm's smallest limit
    is a minute (enforced within ~30 s more), so it starts with the module and is checked by its last
    test, in a thread: the wait overlaps the other tests."""
    import threading

    from airflow_curation.operators.base import CurationStageOperator

    base = tmp_path_factory.mktemp("timeout")
    lake = {"root": str(base / "lake"), "dataset": "ds", "snapshot": None}
    op = CurationStageOperator(
        task_id="slow",
        stage="slurmtest",
        lake=lake["root"],
        dataset="ds",
        run_id="timeout",
        backend="slurm",
        backend_options={
            "python": sys.executable,
            "env": {"PYTHONPATH": JOB_PYTHONPATH},
            "time_limit": "1",
            "max_resubmits": 1,
        },  # TIMEOUT is in resubmit_on by default
        # 2 x 45 s: attempt 1 hits the limit after u000; attempt 2 runs u001 alone, within it.
        config={"units": 2, "sleep_s": 45},
        poll_interval=1,
    )
    store = _StateStore()
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["result"] = _drive(op, {"run_id": "timeout", "task_state_store": store, "ti": None})
        except BaseException as e:  # noqa: BLE001 - surfaced by the test
            outcome["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.time() + 60
    while "curation_job" not in store.data:
        assert time.time() < deadline and "error" not in outcome, outcome
        time.sleep(0.2)
    return store, thread, outcome, lake, dict(store.data["curation_job"])


def test_a_job_with_a_one_minute_limit_starts(timeout_run):
    store, _, _, _, _ = timeout_run
    assert store.data["curation_job"]["job_id"].isdigit() and store.data["curation_job"]["attempt"] == 1


def test_registered_and_options_round_trip(slurm_cluster):
    backend = get_backend("slurm", partition="debug", shard_groups=3, sbatch_options="--nice=5 --comment='a b'")
    assert isinstance(backend, SlurmBackend)
    assert backend.sbatch.extra == ["--nice=5", "--comment=a b"]
    again = get_backend("slurm", **json.loads(json.dumps(backend.options())))
    assert again.options() == backend.options()


def test_options_hand_on_every_constructor_argument():
    """``options()`` is assembled from the composed parts: every argument is there (but the live
    ``transport`` and ``engine``, ``launch_kind``'s old name), and a rebuilt backend builds the same parts."""
    backend = SlurmBackend(
        partition="debug",
        qos="high",
        time_limit="00:10:00",
        cpus_per_task=2,
        mem="1G",
        sbatch_options=["--nice=5"],
        nodes=2,
        ntasks=4,
        collect_time_limit="00:05:00",
        export_env="OMP_NUM_THREADS",
        shard_groups=3,
        python="/opt/py/bin/python",
        env={"A": "1"},
        max_resubmits=4,
        command_timeout=5.0,
        launch_kind="dask",
    )
    options = backend.options()
    arguments = set(inspect.signature(SlurmBackend.__init__).parameters) - {"self", "transport", "engine"}
    assert set(options) == arguments
    again = SlurmBackend(**json.loads(json.dumps(options)))
    assert again.options() == options
    assert again.sbatch.argv("s.sh", "n", "l", "d") == backend.sbatch.argv("s.sh", "n", "l", "d")
    assert (again.script.python, again.script.env, again.script.max_resubmits) == ("/opt/py/bin/python", {"A": "1"}, 4)
    assert again.commands.timeout == 5.0 and again.launch_kind == "dask"


def test_engine_is_the_deprecated_name_of_launch_kind(tmp_path, lake):
    """``engine="dask"`` (the option's old name) still starts a Dask cluster, with a warning naming
    ``launch_kind``; the backend hands it on as ``launch_kind`` (a rebuilt backend warns no more)."""
    with pytest.warns(FutureWarning, match="renamed to 'launch_kind'"):
        old = SlurmBackend(engine="dask", work_dir=str(tmp_path / "jobs"))
    assert old.launch_kind == "dask" and "engine" not in old.options()
    base = old._prepare(spec_for(lake))  # writes the job folder; submits nothing
    assert "distributed.cli.dask_scheduler" in Path(base["job_dir"], "job.sh").read_text()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert SlurmBackend(**old.options()).launch_kind == "dask"
    with pytest.raises(ValueError, match="disagree"):
        SlurmBackend(engine="dask", launch_kind="ray")
    with pytest.raises(ValueError, match="only 'dask'"):
        SlurmBackend(launch_kind="ray")
    with pytest.warns(FutureWarning), pytest.raises(ValueError, match="only 'dask'"):
        SlurmBackend(engine="ray")


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="does not start with"):
        SlurmBackend(sbatch_options=["--nice=1", "evil.sh"])
    with pytest.raises(ValueError, match="set by the backend"):
        SlurmBackend(sbatch_options=["--wrap=rm -rf /"])
    with pytest.raises(ValueError, match="not a valid identifier"):
        SlurmBackend(env={"A;B": "x"})
    with pytest.raises(ValueError, match="NUL"):
        SlurmBackend(partition="de\x00bug")
    with pytest.raises(TypeError, match="ssh_host"):  # no ssh command line: a login node is a transport
        SlurmBackend(ssh_host="-oProxyCommand=touch /tmp/x")


def test_single_job_submit_status_logs(make_backend, lake):
    backend = make_backend(partition="debug")
    handle = backend.submit(spec_for(lake, units=3, rows=4))
    assert handle["job_id"].isdigit() and handle["array_job_id"] is None
    assert Path(handle["job_dir"]).parent == Path(lake["root"], "ds", "_jobs", "run1", "slurmtest")
    st = wait_for(backend, handle)
    assert st.state == JobState.SUCCEEDED, st
    assert st.result["rows"] == 12 and st.result["shards"] == 3
    assert _scontrol_state(handle["job_id"]) == "COMPLETED"
    manifest = Manifest.read(handle["manifest_uri"])
    assert manifest.status == "complete" and [u.status for u in manifest.units] == ["done"] * 3
    assert {r["extra"]["slurm_job"] for r in _records(lake, manifest).values()} == {handle["job_id"]}
    text, offset = backend.logs(handle)
    assert "3 units planned" in text and offset == len(text.encode())
    more, offset2 = backend.logs(handle, offset)
    assert more == "" and offset2 == offset


def test_array_over_shard_groups_respects_max_array_size(make_backend, lake):
    backend = make_backend(shard_groups=50, array_parallelism=2)
    cap = backend.commands.max_array_size()
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True).stdout
    assert f"MaxArraySize            = {cap}" in config
    groups = min(50, cap)
    handle = backend.submit(spec_for(lake, units=groups + 3, rows=2))
    assert handle["groups"] == groups and handle["array"] == f"0-{groups - 1}%2"
    st = wait_for(backend, handle)
    assert st.state == JobState.SUCCEEDED, st
    assert st.result["shards"] == groups + 3
    manifest = Manifest.read(handle["manifest_uri"])
    records = _records(lake, manifest)
    # Unit i ran in the array task whose contiguous block holds it, and every task wrote its own result.
    total = groups + 3
    for i, unit in enumerate(manifest.units):
        assert records[unit.unit_id]["extra"]["task"] == str(group_of(i, groups, total))
    for g in range(groups):
        group_result = json.loads(Path(handle["job_dir"], f"result-1-group-{g}.json").read_text())
        assert group_result["status"] == "succeeded" and group_result["group"] == f"{g}/{groups}"
        assert group_result["shards"] == len(group_range(total, g, groups))


def test_failed_shards_then_resubmit_only_their_groups(make_backend, lake, tmp_path):
    flag = tmp_path / "broken"
    flag.touch()
    backend = make_backend(shard_groups=3)
    spec = spec_for(lake, units=6, fail_units=["u004"], fail_flag=str(flag), max_attempts=1)
    handle = backend.submit(spec)
    st = wait_for(backend, handle)
    assert st.state == JobState.FAILED
    assert "u004" in st.message and "1 of 6 units failed" in st.message
    manifest = Manifest.read(handle["manifest_uri"])
    assert manifest.status == "failed"
    assert {u.unit_id: u.status for u in manifest.units}["u004"] == "failed"
    # u004 is unit 4 of 6: the block of group 2 of 3 (units 4 and 5)
    assert progress.unfinished_groups(handle["manifest_uri"], handle["groups"]) == [2]
    before = _records(lake, manifest)
    assert set(before) == {"u000", "u001", "u002", "u003", "u005"}

    # A resubmission first reopens the run, so that checkpoint gates wait for it instead of failing.
    failure_marker = Path(
        CheckpointStore(Lake.from_dict(lake).checkpoint_dir(manifest.stage, manifest.fingerprint)).directory,
        "u004.failed.json",
    )
    assert failure_marker.exists()
    assert progress.reopen(handle["manifest_uri"]) == {"u004": manifest.units[4].error}
    reopened = Manifest.read(handle["manifest_uri"])
    assert reopened.status == "planned" and reopened.units[4].status == "pending" and not reopened.shards
    assert not failure_marker.exists()

    flag.unlink()
    new = relaunch(backend, handle)
    assert new["attempt"] == 2 and new["array"] == "2"
    st = wait_for(backend, handle)  # the first handle follows the latest attempt
    assert st.state == JobState.SUCCEEDED, st
    manifest = Manifest.read(handle["manifest_uri"])
    after = _records(lake, manifest)
    assert manifest.status == "complete" and len(after) == 6
    for unit_id, rec in before.items():
        assert after[unit_id] == rec  # untouched: only group 2 ran again, and it skipped u005
    assert after["u004"]["extra"]["task"] == "2"
    assert not Path(handle["job_dir"], "result-2-group-0.json").exists()  # the group scripts are reused
    assert Path(handle["job_dir"], "result-2-group-2.json").exists()
    assert "attempt 2 resubmitted groups 2" in backend.logs(handle)[0]


def test_automatic_resubmission(make_backend, lake, tmp_path):
    flag = tmp_path / "broken"
    flag.touch()
    backend = make_backend(shard_groups=2, max_resubmits=1, resubmit_on=["FAILED"])
    handle = backend.submit(spec_for(lake, units=4, fail_units=["u001"], fail_flag=str(flag), max_attempts=1))
    st = wait_for(backend, handle)
    assert st.state == JobState.FAILED and st.retryable
    for _ in range(20):  # polling is read-only: nothing is resubmitted however often one asks
        assert backend.status(handle).state == JobState.FAILED
    assert current(backend, handle)["attempt"] == 1
    flag.unlink()
    st, last = follow(backend, handle)  # the follower (operator, sensor) relaunches the failed group
    assert st.state == JobState.SUCCEEDED, st
    assert current(backend, handle)["attempt"] == 2 and current(backend, handle)["array"] == "0"  # u001: group 0
    assert last == current(backend, handle)


def test_cancel_a_running_job(make_backend, lake):
    backend = make_backend()
    handle = backend.submit(spec_for(lake, units=2, sleep_s=60))
    wait_for(backend, handle, until=lambda st: st.state == JobState.RUNNING)
    backend.cancel(handle)
    st = wait_for(backend, handle)
    assert st.state == JobState.CANCELLED, st
    assert _scontrol_state(handle["job_id"]) == "CANCELLED"
    assert not Path(handle["result"]).exists()
    backend.cancel(handle)  # idempotent


def test_kill_mid_stage_then_rerun_skips_checkpointed_units(make_backend, lake):
    backend = make_backend()
    spec = spec_for(lake, units=6, sleep_s=1.5)
    handle = backend.submit(spec)
    ckpt_dir = None
    deadline = time.time() + 180
    while True:  # kill it once two units are checkpointed and the rest are not
        st = backend.status(handle)
        assert not st.state.finished, st
        if Path(handle["manifest_uri"]).exists():
            m = Manifest.read(handle["manifest_uri"])
            ckpt_dir = Lake.from_dict(lake).checkpoint_dir(m.stage, m.fingerprint)
            if len(CheckpointStore(ckpt_dir).scan()[0]) >= 2:
                break
        assert time.time() < deadline
        time.sleep(0.2)
    backend.cancel(handle)
    assert wait_for(backend, handle).state == JobState.CANCELLED
    done_before, _ = CheckpointStore(ckpt_dir).scan()
    assert 2 <= len(done_before) < 6
    records_before = {u: Path(ckpt_dir, f"{u}.json").read_text() for u in done_before}

    rerun = backend.submit(spec)
    st = wait_for(backend, rerun)
    assert st.state == JobState.SUCCEEDED, st
    manifest = Manifest.read(rerun["manifest_uri"])
    status = {u.unit_id: u.status for u in manifest.units}
    assert {u for u, s in status.items() if s == "skipped"} == done_before
    assert all(s == "done" for u, s in status.items() if u not in done_before)
    for unit_id, text in records_before.items():
        assert Path(ckpt_dir, f"{unit_id}.json").read_text() == text
    assert st.result["rows"] == 6 * 5


def test_job_forgotten_by_slurm_without_accounting(make_backend, lake):
    """Past MinJobAge scontrol forgets a job; with no slurmdbd sacct cannot help: the files decide."""
    backend = make_backend()
    handle = backend.submit(spec_for(lake, units=3))
    assert wait_for(backend, handle).state == JobState.SUCCEEDED
    sacct = subprocess.run(["sacct", "-j", handle["job_id"]], capture_output=True, text=True)
    assert "accounting storage is disabled" in sacct.stderr + sacct.stdout

    gone = {**handle, "job_id": "987654321", "attempt": 1}  # an id this cluster never had
    records, source = backend.job_records(gone)
    assert records == [] and source == "none"
    # Its result file is the truth...
    assert backend.status(gone).state == JobState.SUCCEEDED
    # ...and without one, the checkpoints say how far it got; the run counts as failed, retryable.
    Path(handle["result"]).rename(Path(handle["job_dir"], "result-moved.json"))
    status = backend._status({**gone, "job_dir": handle["job_dir"]})
    assert status.state == JobState.FAILED and status.retryable  # GONE is in resubmit_on by default
    assert "3/3 units checkpointed" in status.message and "no record" in status.message


def test_environment_values_reach_the_job_literally(make_backend, lake, tmp_path, ssh_conn_id):
    canary = tmp_path / "pwned"
    evil = f"a'b\"c $(touch {canary}) `touch {canary}` ${{HOME}} \\ ;|&\n<>*?"
    # Through the login node's shell (the factory's SSH transport), the harder path for quoting.
    backend = make_backend(env={"CURATION_TEST_ECHO": evil}, slurm_conn_id=ssh_conn_id)
    handle = backend.submit(spec_for(lake, units=1))
    assert wait_for(backend, handle).state == JobState.SUCCEEDED
    manifest = Manifest.read(handle["manifest_uri"])
    assert _records(lake, manifest)["u000"]["extra"]["echo"] == evil
    assert not canary.exists()


def test_submission_errors_are_clear(make_backend, lake):
    with pytest.raises(Exception, match="(?i)partition"):
        make_backend(partition="no-such-partition").submit(spec_for(lake, units=1))


def test_unreachable_controller_is_unknown_not_a_failure(make_backend, lake):
    backend = make_backend()
    handle = backend.submit(spec_for(lake, units=1, sleep_s=60))
    # scontrol keeps retrying without a configuration: the command time-out is what ends it.
    broken = make_backend(command_timeout=3)
    with pytest.MonkeyPatch.context() as m:
        m.setenv("SLURM_CONF", "/nonexistent/slurm.conf")
        st = broken.status(handle)
    assert st.state == JobState.UNKNOWN and "cannot reach Slurm" in st.message
    backend.cancel(handle)
    assert wait_for(backend, handle).state == JobState.CANCELLED


def test_real_timeout_is_relaunched_by_the_operator_and_resumes_from_checkpoints(timeout_run):
    store, thread, outcome, lake, first = timeout_run
    thread.join(timeout=400)
    assert not thread.is_alive() and "error" not in outcome, outcome
    assert outcome["result"]["rows"] == 10
    # The operator relaunched the run and kept the new attempt's handle, for a retry to reconnect to.
    latest = store.data["curation_job"]
    assert latest["attempt"] == 2
    log_text = Path(latest["log"]).read_text()
    assert "DUE TO TIME LIMIT" in log_text and "attempt 2 resubmitted the job" in log_text
    manifest = Manifest.read(latest["manifest_uri"])
    assert [u.status for u in manifest.units] == ["skipped", "done"]
    # u000 was checkpointed by attempt 1 before its time limit; attempt 2 ran only u001.
    jobs = {u: r["extra"]["slurm_job"] for u, r in _records(lake, manifest).items()}
    assert jobs["u001"] == latest["job_id"] and jobs["u000"] != latest["job_id"]
    assert jobs["u000"] == first["job_id"] and first["attempt"] == 1
