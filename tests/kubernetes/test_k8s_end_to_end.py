"""The generated Jobs run the real stage: a loopback API server plus a kubelet stand-in that executes
each pod's command as written (argv, env, envFrom, mounted spec), on a real ingest."""

from __future__ import annotations

import json

import pytest
from k8s_fake_kubelet import FakeKubelet

from airflow_curation.backends.base import JobState
from airflow_curation.core.manifest import Manifest
from airflow_curation.jobs.spec import JobSpec


@pytest.fixture
def corpus(tmp_path):
    src = tmp_path / "input"
    src.mkdir()
    for i in range(4):
        rows = [{"text": f"document {i}-{j} " + "word " * (j + 3)} for j in range(5)]
        (src / f"part{i}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return src


def test_indexed_sweep_and_gather_ingest_for_real(fake_k8s, make_backend, corpus, lake, tmp_path):
    backend = make_backend(engines={"ingest": "indexed"}, shard_groups=2, pod={},
                           env={"CURATION_TEST_MARKER": "from-secret"})
    spec = JobSpec("ingest", {"root": str(lake), "dataset": "d", "snapshot": None}, "r1",
                   {"inputs": [str(corpus)], "unit_bytes": 1})
    handle = backend.submit(spec)
    kubelet = FakeKubelet(fake_k8s, tmp_path / "kubelet")

    assert kubelet.run_job(handle["name"]) == [0, 0]  # both shard groups ran their units
    st = backend.status(handle)  # sweep complete: the gather job is created
    assert st.state == JobState.PENDING and st.message.startswith("gather:")
    assert kubelet.run_job(f"{handle['name']}-gather") == [0]
    st = backend.status(handle)
    assert st.state == JobState.SUCCEEDED, st.message
    assert st.result["rows"] == 20 and st.result["manifest_uri"] == spec.manifest_uri
    manifest = Manifest.read(spec.manifest_uri)
    assert manifest.status == "complete" and manifest.rows == 20
    # The gather pass skipped every unit the sweep had checkpointed.
    text, _ = backend.logs(handle)
    assert "0 to run" in text and "shard_group" in text


def test_bad_spec_fails_fast_through_the_pod_failure_policy(fake_k8s, make_backend, corpus, lake, tmp_path):
    backend = make_backend(engines={"ingest": "indexed"}, shard_groups=2, pod={})
    spec = JobSpec("ingest", {"root": str(lake), "dataset": "d", "snapshot": None}, "r1",
                   {"inputs": [str(corpus)], "unit_bytes": 1})
    handle = backend.submit(spec)
    key = next(k for k in fake_k8s.objects if k[1] == "configmaps")
    fake_k8s.objects[key]["data"]["spec.json"] = json.dumps({"spec_version": 99})  # corrupt it
    assert FakeKubelet(fake_k8s, tmp_path / "kubelet").run_job(handle["name"]) == [2, 2]
    st = backend.status(handle)
    assert st.state == JobState.FAILED and "exit code 2" in st.message
    assert fake_k8s.get("jobs", f"{handle['name']}-gather") is None


def test_a_failed_group_is_redone_by_the_gather(fake_k8s, make_backend, corpus, lake, tmp_path):
    backend = make_backend(engines={"ingest": "indexed"}, shard_groups=2, pod={})
    spec = JobSpec("ingest", {"root": str(lake), "dataset": "d", "snapshot": None}, "r1",
                   {"inputs": [str(corpus)], "unit_bytes": 1})
    handle = backend.submit(spec)
    kubelet = FakeKubelet(fake_k8s, tmp_path / "kubelet")
    assert kubelet.run_job(handle["name"], kill=frozenset({1})) == [0, 137]  # group 1's pod was OOM-killed
    st = backend.status(handle)
    assert st.state == JobState.PENDING and st.message.startswith("gather:")
    assert kubelet.run_job(f"{handle['name']}-gather") == [0]
    st = backend.status(handle)
    assert st.state == JobState.SUCCEEDED and st.result["rows"] == 20
    text, _ = backend.logs(handle)
    assert "2 units already done (checkpoint matches), 2 to run" in text  # only group 1's units redone
