"""The generated Jobs run the real stage: a loopback API server plus a kubelet stand-in that executes
each pod's command as written (argv, env, envFrom, mounted spec), on a real ingest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from k8s_fake_kubelet import FakeKubelet

from airflow_curation.backends.base import JobState
from airflow_curation.core.manifest import Manifest, ManifestHead
from airflow_curation.jobs import attempts
from airflow_curation.jobs.spec import JobSpec


@pytest.fixture
def corpus(tmp_path):
    src = tmp_path / "input"
    src.mkdir()
    for i in range(4):
        rows = [{"text": f"document {i}-{j} " + "word " * (j + 3)} for j in range(5)]
        (src / f"part{i}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return src


def test_indexed_groups_and_collect_ingest_for_real(fake_k8s, make_backend, corpus, lake, tmp_path):
    backend = make_backend(
        launch_kinds={"ingest": "indexed"}, shard_groups=2, pod={}, env={"CURATION_TEST_MARKER": "from-secret"}
    )
    spec = JobSpec(
        "ingest",
        {"root": str(lake), "dataset": "d", "snapshot": None},
        "r1",
        {"inputs": [str(corpus)], "unit_bytes": 1},
    )
    handle = backend.submit(spec)
    kubelet = FakeKubelet(fake_k8s, tmp_path / "kubelet")

    assert kubelet.run_job(handle["name"]) == [0, 0]  # both groups ran their units
    # Nobody polls: the collect pod finds both groups' results and finishes the stage by itself.
    assert kubelet.run_job(handle["collect"]) == [0]
    st = backend.status(handle)
    assert st.state == JobState.SUCCEEDED, st.message
    assert st.result["rows"] == 20 and st.result["manifest_uri"] == spec.manifest_uri
    manifest = Manifest.read(spec.manifest_uri)
    assert manifest.status == "complete" and manifest.rows == 20
    # The collect step ran no unit: every one was checkpointed by its group.
    text, _ = backend.logs(handle)
    assert "0 to run" in text and "all 2 groups reported" in text


def test_bad_spec_fails_fast_through_the_pod_failure_policy(fake_k8s, make_backend, corpus, lake, tmp_path):
    backend = make_backend(launch_kinds={"ingest": "indexed"}, shard_groups=2, pod={})
    spec = JobSpec(
        "ingest",
        {"root": str(lake), "dataset": "d", "snapshot": None},
        "r1",
        {"inputs": [str(corpus)], "unit_bytes": 1},
    )
    handle = backend.submit(spec)
    key = next(k for k in fake_k8s.objects if k[1] == "configmaps")
    fake_k8s.objects[key]["data"]["spec.json"] = json.dumps({"spec_version": 99})  # corrupt it
    assert FakeKubelet(fake_k8s, tmp_path / "kubelet").run_job(handle["name"]) == [2, 2]
    st = backend.status(handle)
    assert st.state == JobState.FAILED and "exit code 2" in st.message and not st.retryable


def test_a_killed_group_is_relaunched_by_the_follower(fake_k8s, make_backend, corpus, lake, tmp_path):
    backend = make_backend(launch_kinds={"ingest": "indexed"}, shard_groups=2, pod={}, max_resubmits=1)
    spec = JobSpec(
        "ingest",
        {"root": str(lake), "dataset": "d", "snapshot": None},
        "r1",
        {"inputs": [str(corpus)], "unit_bytes": 1},
    )
    handle = backend.submit(spec)
    kubelet = FakeKubelet(fake_k8s, tmp_path / "kubelet")
    assert kubelet.run_job(handle["name"], kill=frozenset({1})) == [0, 137]  # group 1's pod was OOM-killed
    st = backend.status(handle)
    assert st.state == JobState.FAILED and st.retryable
    new = attempts.settle(backend, handle, st)  # what the operator (or the checkpoint sensor) does with it
    assert new is not None and new.attempt == 2
    new = new.to_dict()
    assert kubelet.run_job(new["main"]) == [0]
    assert kubelet.run_job(new["collect"]) == [0]
    st = backend.status(new)
    assert st.state == JobState.SUCCEEDED and st.result["rows"] == 20
    text, _ = backend.logs(new)
    assert "1 units already done (checkpoint matches), 1 to run" in text or "0 units already done" in text
    manifest = Manifest.read(spec.manifest_uri)
    assert manifest.status == "complete" and manifest.rows == 20


def _ingest_spec(lake, corpus):
    return JobSpec(
        "ingest",
        {"root": str(lake), "dataset": "d", "snapshot": None},
        "r1",
        {"inputs": [str(corpus)], "unit_bytes": 1},
    )


def _lose_a_pod(fake_k8s, make_backend, lake, corpus, tmp_path, lost: int, max_resubmits: int, codes: list[int]):
    """An ingest Indexed Job of 2 groups whose group ``lost`` pod is killed (exit codes ``codes``): its backend,
    spec, handle and kubelet. The collect pod does not wait for a missing group (the tests play the
    controllers: a killed group never reports)."""
    backend = make_backend(
        launch_kinds={"ingest": "indexed"},
        shard_groups=2,
        pod={},
        max_resubmits=max_resubmits,
        collect_wait_seconds=0.01,
    )
    spec = _ingest_spec(lake, corpus)
    handle = backend.submit(spec)
    kubelet = FakeKubelet(fake_k8s, tmp_path / "kubelet")
    assert kubelet.run_job(handle["name"], kill=frozenset({lost})) == codes
    return backend, spec, handle, kubelet


def test_a_lost_pod_leaves_a_relaunch_pending_until_the_last_attempt(fake_k8s, make_backend, corpus, lake, tmp_path):
    """A group pod killed (no checkpoint, no failure of its own) and the collect pod's wait ended: the collect
    pod, run as rendered (``jobs collect --attempt 1 --attempts 2``), writes the failed manifest saying a
    relaunch is pending, so a stage streaming from it waits for the reopen. The follower's relaunch reopens it
    (the field goes) and runs a fresh collect for attempt 2, the last: its failed manifest says nothing of a
    relaunch, and the follower ends the run."""
    backend, spec, handle, kubelet = _lose_a_pod(fake_k8s, make_backend, lake, corpus, tmp_path, 1, 1, [0, 137])
    assert kubelet.run_job(handle["collect"]) == [1]  # gave up on group 1: its 2 units failed
    head = ManifestHead.read(spec.manifest_uri)
    assert head.status == "failed" and head.relaunch_pending and head.relaunch == {"pending": True, "lost_units": 2}

    st = backend.status(handle)
    assert st.state == JobState.FAILED and st.retryable, st.message
    new = attempts.settle(backend, handle, st)
    assert new is not None and new.attempt == 2, st.message
    new = new.to_dict()
    head = ManifestHead.read(spec.manifest_uri)
    assert head.status == "planned" and head.relaunch is None  # reopened: nothing pending any more

    # Attempt 2 (group 1 only) loses its pod too: the last attempt's collect says nothing of a relaunch.
    assert new["collect"] == f"{handle['name']}-collect-a2"
    assert kubelet.run_job(new["main"], kill=frozenset({0})) == [137]
    assert kubelet.run_job(new["collect"]) == [1]
    head = ManifestHead.read(spec.manifest_uri)
    assert head.status == "failed" and head.relaunch is None and not head.relaunch_pending
    assert "relaunch" not in json.loads(Path(spec.manifest_uri).read_text())
    st = backend.status(new)
    assert st.state == JobState.FAILED and st.retryable
    assert attempts.settle(backend, new, st) is None and "attempt 2 of 2 was the last" in st.message


def test_a_collect_pod_that_waited_through_the_relaunch_collects_the_newest_attempt(
    fake_k8s, make_backend, corpus, lake, tmp_path
):
    """The relaunch keeps a collect pod that is still waiting (created by attempt 1: ``--attempt 1``). When it
    collects after the last attempt lost its pod as well, the run's ``current.json`` (``--newest``) says attempt
    2 of 2: no relaunch pending (a reader fails at once instead of waiting for a relaunch that cannot come)."""
    backend, spec, handle, kubelet = _lose_a_pod(fake_k8s, make_backend, lake, corpus, tmp_path, 1, 1, [0, 137])
    st = backend.status(handle)  # the collect pod has not run yet: it is still waiting
    new = attempts.settle(backend, handle, st)
    assert new is not None and new.attempt == 2 and new.to_dict()["collect"] == handle["collect"], st.message
    argv = fake_k8s.get("jobs", handle["collect"])["spec"]["template"]["spec"]["containers"][0]["command"]
    assert argv[argv.index("--attempt") + 1] == "1" and argv[argv.index("--newest") + 1] == new.current_uri
    assert kubelet.run_job(new.to_dict()["main"], kill=frozenset({0})) == [137]
    assert kubelet.run_job(handle["collect"]) == [1]
    head = ManifestHead.read(spec.manifest_uri)
    assert head.status == "failed" and head.relaunch is None


def test_a_cancelled_run_declines_its_pending_relaunch(fake_k8s, make_backend, corpus, lake, tmp_path):
    """A run cancelled after its collect pod wrote a relaunch pending will not be relaunched: the cancel says so
    in the manifest (``attempts.decline``), and a reader waiting for the reopen fails at once."""
    backend, spec, handle, kubelet = _lose_a_pod(fake_k8s, make_backend, lake, corpus, tmp_path, 0, 2, [137, 0])
    assert kubelet.run_job(handle["collect"]) == [1]
    assert ManifestHead.read(spec.manifest_uri).relaunch == {"pending": True, "lost_units": 2}
    attempts.cancel(backend, handle)
    head = ManifestHead.read(spec.manifest_uri)
    assert head.status == "failed" and not head.relaunch_pending
    assert head.relaunch["pending"] is False and "cancelled" in head.relaunch["why"]


def test_collect_waits_for_every_group_then_gives_up_at_its_timeout(corpus, lake, tmp_path):
    import subprocess
    import sys

    spec = JobSpec(
        "ingest",
        {"root": str(lake), "dataset": "d", "snapshot": None},
        "r1",
        {"inputs": [str(corpus)], "unit_bytes": 1},
    )
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(spec.to_json())
    wait_dir = tmp_path / "results"
    wait_dir.mkdir()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_curation.jobs",
            "run",
            str(spec_path),
            "--group",
            "0/2",
            "--result",
            str(wait_dir / "group-{group}.json"),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    argv = [
        sys.executable,
        "-m",
        "airflow_curation.jobs",
        "collect",
        str(spec_path),
        "--result",
        str(tmp_path / "result.json"),
        "--group-results",
        str(wait_dir),
        "--wait-groups",
        "2",
        "--poll",
        "0.05",
    ]
    # Group 1 has not reported: the collect step waits (and is stopped here by the test's own timeout)...
    with pytest.raises(subprocess.TimeoutExpired):
        subprocess.run(argv + ["--timeout", "600"], capture_output=True, text=True, timeout=3)
    assert not (tmp_path / "result.json").exists()
    # ...and with a bound on the wait it gives up and collects: group 1's units count as failed.
    proc = subprocess.run(argv + ["--timeout", "0"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "gave up waiting for groups [1]" in proc.stderr
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["status"] == "failed" and result["kind"] == "collect" and "2 of 4 units failed" in result["error"]


def test_a_small_input_gives_every_indexed_pod_a_unit(fake_k8s, make_backend, corpus, lake, tmp_path):
    """Four small files are one ingest unit by default; an Indexed Job of 3 completions (the sweep's size from
    ``parallelism``, as a Slurm array's from ``shard_groups``) makes the spec ask for ``min_units=3``, so each
    pod ingests a unit of its own instead of two of them starting, finding nothing and leaving."""
    from airflow_curation.backends.schemas import validate_object

    backend = make_backend(launch_kinds={"ingest": "indexed"}, parallelism=3, pod={})
    spec = JobSpec("ingest", {"root": str(lake), "dataset": "d", "snapshot": None}, "r1", {"inputs": [str(corpus)]})
    handle, objects = backend.build(spec)
    for obj in objects:
        validate_object(obj)
    sweep = next(o for o in objects if o["metadata"]["name"] == handle["main"])
    assert sweep["spec"]["completions"] == handle["groups"] == 3 and sweep["spec"]["completionMode"] == "Indexed"
    (config_map,) = [o for o in objects if o["kind"] == "ConfigMap"]
    assert json.loads(config_map["data"]["spec.json"])["config"]["min_units"] == 3

    handle = backend.submit(spec)
    kubelet = FakeKubelet(fake_k8s, tmp_path / "kubelet")
    assert kubelet.run_job(handle["name"]) == [0, 0, 0]
    assert kubelet.run_job(handle["collect"]) == [0]
    st = backend.status(handle)
    assert st.state == JobState.SUCCEEDED and st.result["rows"] == 20, st.message
    manifest = Manifest.read(spec.manifest_uri)
    assert len(manifest.units) == 3 and manifest.rows == 20
    text, _ = backend.logs(handle)
    assert text.count("0 units already done (checkpoint matches), 1 to run") == 3, text  # one unit in each pod
    assert "3 units already done (checkpoint matches), 0 to run" in text  # the collect pod ran none
