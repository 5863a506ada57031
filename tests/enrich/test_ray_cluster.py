"""Enrich on a Ray cluster started by the tests (the session's ``ray_head``), as a deployment runs it:

- the cluster addressed both ways, ``host:port`` (a driver on a node) and ``ray://host:port`` (Ray Client,
  where Ray Data cannot run: a driver actor runs each shard's pipeline on the cluster), same output;
- no address while that cluster runs and ``RAY_ADDRESS`` names it: a new local Ray of ``ray_num_cpus``;
- a job killed mid-shard on Ray: an engine actor is held (``CURATION_HOLD``) inside the shard's second
  chunk, the first chunk's part is committed meanwhile, the driver is SIGKILLed; the rerun resumes from
  that part and its output is identical to an unkilled run's;
- a process already on another Ray: moved to the one asked for when this code connected it, refused when
  its owner did;
- the journey: enrich as a Ray Client killed mid-shard, resumed as a driver, then Daft validate both ways.

Which path a run took is read from the head's GCS: a ``host:port`` driver is the job's own process, a Ray
Client session's is the client server's. The transformers runtime keeps the actors' start short; vLLM actors are ``test_ray.py``'s.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pyarrow.parquet as pq
import pytest
from enrich_helpers import make_docs, record, run_enrich, write_lake

from airflow_curation.core.manifest import Manifest
from airflow_curation.jobs.spec import JobSpec

N_ROWS, CHUNK = 14, 4


def _config(model: str, **extra) -> dict:
    return {
        "task": "score",
        "model": model,
        "model_runtime": "transformers",
        "mapper": "ray",
        "dtype": "float32",
        "batch_size": 2,
        "checkpoint_rows": CHUNK,
        **extra,
    }


def _lake(root):
    return write_lake(str(root), {"s0": make_docs(N_ROWS)}, keep={"s0": {"d00001"}})


def _output(stage, manifest):
    return pq.read_table(manifest.shards[0].attrs[stage.output_name]).to_pydict()


@pytest.fixture(scope="module")
def unkilled(ray_head, tmp_path_factory, llama_score):
    """One enrich run on the cluster by its GCS address: the output the other runs must match."""
    lake, uri = _lake(tmp_path_factory.mktemp("unkilled"))
    before = ray_head.driver_pids()
    stage, manifest = run_enrich(lake, uri, run_id="gcs", **_config(llama_score, ray_address=ray_head.gcs))
    stage.close()
    assert _new(ray_head, before) == [os.getpid()]  # this process joined the cluster as a driver
    out = _output(stage, manifest)
    assert sum(out["enriched"]) == N_ROWS - 1 and record(stage, "s0").extra["rows_computed"] == N_ROWS - 1
    return out


def _new(head, before: list[int]) -> list[int]:
    """The drivers' processes that joined ``head`` since ``before``."""
    return sorted((Counter(head.driver_pids()) - Counter(before)).elements())


def test_a_cluster_addressed_by_ray_client_gives_the_same_output(ray_head, unkilled, tmp_path, llama_score):
    from airflow_curation.stages.mappers import ray as ray_cluster

    lake, uri = _lake(tmp_path)
    # This process is a driver of the cluster by its GCS address first (as an earlier stage leaves it): the
    # run must not reuse that connection but take the ray:// path, a Ray Client session (whose driver is
    # the client server's process, not this one) with the shard's Ray Data pipeline in a driver actor
    # (Ray Data itself fails through a client).
    ray_cluster.connect(ray_head.gcs)
    try:
        before = ray_head.driver_pids()
        stage, manifest = run_enrich(lake, uri, run_id="client", **_config(llama_score, ray_address=ray_head.client))
        stage.close()
    finally:
        ray_cluster.disconnect()
    (client,) = _new(ray_head, before)
    assert client != os.getpid()
    assert _output(stage, manifest) == unkilled
    assert record(stage, "s0").extra["rows_computed"] == N_ROWS - 1


def test_no_address_starts_a_local_ray_beside_a_running_cluster(ray_head, monkeypatch, tmp_path, llama_score):
    import ray

    from airflow_curation.stages.base import StageRunner
    from airflow_curation.stages.enrich.stage import EnrichStage

    monkeypatch.setenv("RAY_ADDRESS", ray_head.gcs)  # what a plain ray.init() would join
    lake, uri = _lake(tmp_path)
    before = ray_head.drivers()
    stage = EnrichStage(lake, {"input_manifest": uri, **_config(llama_score, ray_num_cpus=1)}, "local")
    try:
        stage._executor_for_run()  # the Ray the run uses (the run closes it when it ends)
        assert ray.get_runtime_context().gcs_address != ray_head.gcs
        assert ray.cluster_resources()["CPU"] == 1
        manifest = StageRunner(stage).run()
    finally:
        stage.close()
    assert not ray.is_initialized() and ray_head.drivers() == before
    assert sum(_output(stage, manifest)["enriched"]) == N_ROWS - 1


def test_a_process_on_another_ray_is_moved_to_the_one_asked_for_or_refused(ray_head):
    import ray

    from airflow_curation.stages.mappers import ray as ray_cluster

    _, started = ray_cluster.connect(None, num_cpus=1)  # a local Ray, as an earlier stage leaves it
    try:
        assert started and ray.get_runtime_context().gcs_address != ray_head.gcs
        target, started = ray_cluster.connect(ray_head.gcs)
        assert started and ray.get_runtime_context().gcs_address == ray_head.gcs
        assert ray_cluster.connect(ray_head.gcs) == (target, False)  # the same cluster: kept
        _, started = ray_cluster.connect(None, num_cpus=1)
        assert started and ray.get_runtime_context().gcs_address != ray_head.gcs
    finally:
        ray_cluster.disconnect()
    ray.init(address="local", num_cpus=1, include_dashboard=False)  # the process owner's own Ray
    try:
        with pytest.raises(ValueError, match=r"already connected to the Ray at .* \(ray.init outside the stage\)"):
            ray_cluster.connect(ray_head.gcs)
        assert ray_cluster.connect(None) == (ray_cluster.resolve(None), False)  # no address: the owner's Ray
        assert ray.is_initialized()
    finally:
        ray.shutdown()


def test_a_client_the_cluster_failed_to_serve_connects_on_a_later_try(ray_head, monkeypatch, caplog):
    """The cluster's Ray client proxy can fail to start a client's own server ("Initialization failure from
    server"): a ``ray://`` connection is tried again, up to ``CLIENT_TRIES``, and then joins the real cluster;
    a driver's (``host:port``) failure, or the last try's, is raised."""
    import ray

    from airflow_curation.stages.mappers import ray as ray_cluster

    real, calls = ray.init, []

    def failing_first(fails: int):
        def init(*args, **kwargs):
            calls.append(kwargs.get("address"))
            if len(calls) <= fails:
                raise ConnectionAbortedError("Initialization failure from server:\nRuntimeError: Starting Ray client")
            return real(*args, **kwargs)

        return init

    monkeypatch.setattr(ray_cluster.time, "sleep", lambda s: None)
    # One failure made here; the real proxy may fail a try of its own (what the retries are for: CI saw it
    # fail the one real try left when this made two), so the later tries are one or two.
    monkeypatch.setattr(ray, "init", failing_first(1))
    try:
        _, started = ray_cluster.connect(ray_head.client)
        assert started and ray.is_initialized() and set(calls) == {ray_head.client}
        assert 2 <= len(calls) <= ray_cluster.CLIENT_TRIES
        assert ray.cluster_resources().get("CPU", 0) > 0  # the real cluster, through the client
    finally:
        ray_cluster.disconnect()
    assert "could not start this client's server" in caplog.text
    for address, fails in ((ray_head.client, ray_cluster.CLIENT_TRIES), (ray_head.gcs, 1)):
        calls.clear()
        monkeypatch.setattr(ray, "init", failing_first(fails))
        with pytest.raises(ConnectionAbortedError, match="Initialization failure"):
            ray_cluster.connect(address)
        assert len(calls) == fails
    assert not ray.is_initialized()


@pytest.mark.parametrize("address", ["127.0.0.1:6379", "ray://127.0.0.1:10001"])
def test_an_address_with_local_sizes_is_refused_before_any_work(address, tmp_path, llama_score):
    lake, uri = _lake(tmp_path)
    with pytest.raises(ValueError, match="ray_num_cpus / ray_num_gpus size a new local Ray; with ray_address"):
        run_enrich(lake, uri, run_id="both", **_config(llama_score, ray_address=address, ray_num_cpus=1))


def _job(tmp_path, spec: JobSpec, name: str, env: dict) -> subprocess.Popen:
    """A job process whose output goes to ``<name>.log`` (read with :func:`_log`). Not a pipe: a job held
    mid-shard is not read while it waits, and Ray's warnings could fill a pipe's buffer and block it."""
    spec_path = tmp_path / f"{name}.json"
    spec_path.write_text(spec.to_json())
    cmd = [sys.executable, "-m", "airflow_curation.jobs", "run", str(spec_path), "--result", str(tmp_path / "r.json")]
    with open(tmp_path / f"{name}.log", "w") as log:
        return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _log(tmp_path, name: str) -> str:
    return (tmp_path / f"{name}.log").read_text()[-5000:]


def _run_job(tmp_path, spec: JobSpec, name: str) -> int:
    """Run a job process to its end (as every backend runs one); its pid."""
    proc = _job(tmp_path, spec, name, _ENV)
    proc.wait(timeout=900)
    assert proc.returncode == 0, _log(tmp_path, name)
    return proc.pid


_ENV = {**os.environ, "PYTHONPATH": os.getcwd(), "RAY_AUTH_MODE": "disabled"}


def _enrich_spec(lake, uri: str, run_id: str, model: str, address: str) -> JobSpec:
    return JobSpec(
        stage="enrich",
        lake=lake.to_dict(),
        run_id=run_id,
        config={"input_manifest": uri, **_config(model, ray_address=address)},
    )


def _kill_mid_shard(tmp_path, lake, spec: JobSpec) -> str:
    """Run ``spec`` with an engine actor held at the shard's second chunk, wait for the first chunk's part,
    SIGKILL the job (as a pre-empted node: no handler runs); the glob of the part files."""
    release = tmp_path / "release"
    # Held: the first batch the engine actor gets past the first chunk (by row position: the actor runs several
    # chunks' tasks at once, so counting its calls could hold one inside the first chunk).
    hold = f"enrich.actor_batch_after_first_chunk@1={release}"
    held = _job(tmp_path, spec, "held", {**_ENV, "CURATION_HOLD": hold})
    parts_glob = os.path.join(lake.path("attrs", "enrich-score"), "_parts", "*", "*", "*.parquet")
    try:
        deadline = time.monotonic() + 600
        while not glob.glob(parts_glob):
            assert held.poll() is None, f"the job ended before committing a part mid-shard:\n{_log(tmp_path, 'held')}"
            assert time.monotonic() < deadline, f"no part committed mid-shard; the job's log:\n{_log(tmp_path, 'held')}"
            time.sleep(0.5)
        os.killpg(held.pid, signal.SIGKILL)
        held.wait()
    finally:
        release.touch()  # an actor of the killed driver that is still held goes on (Ray removes it anyway)
        if held.poll() is None:
            os.killpg(held.pid, signal.SIGKILL)
    assert [os.path.basename(p) for p in glob.glob(parts_glob)] == [f"{0:010d}-{CHUNK:010d}.parquet"]
    return parts_glob


def _resumed_output(lake, spec: JobSpec, parts_glob: str) -> dict:
    """After a rerun of ``spec``: only the chunks without a part were computed; the output."""
    from airflow_curation.stages.enrich.stage import EnrichStage

    extra = record(EnrichStage(lake, spec.config, spec.run_id), "s0").extra
    assert extra["rows_resumed"] == CHUNK and extra["rows_computed"] == N_ROWS - 1 - (CHUNK - 1)
    assert not glob.glob(parts_glob)
    return pq.read_table(Manifest.read(spec.manifest_uri).shards[0].attrs["enrich-score"]).to_pydict()


def test_a_job_killed_mid_shard_on_ray_resumes_from_its_parts(ray_head, unkilled, tmp_path, llama_score):
    lake, uri = _lake(tmp_path / "lake")
    spec = _enrich_spec(lake, uri, "gcs", llama_score, ray_head.gcs)
    parts_glob = _kill_mid_shard(tmp_path, lake, spec)
    _run_job(tmp_path, spec, "rerun")
    assert _resumed_output(lake, spec, parts_glob) == unkilled


def test_journey_enrich_and_daft_validate_on_a_ray_cluster_addressed_both_ways(
    ray_head, unkilled, tmp_path, llama_score
):
    """Issue 25's Ray journey, as a deployment runs it against a cluster it did not start: enrich as a Ray
    Client (``ray://``) killed mid-shard, then resumed as a driver on the cluster (``host:port``: the address
    is an execution setting, the checkpoints stay valid), output identical to an unkilled run; then Daft
    validate on the same cluster both ways, each in a job process, the same report."""
    lake, uri = _lake(tmp_path / "lake")
    before = ray_head.driver_pids()
    client = _enrich_spec(lake, uri, "journey", llama_score, ray_head.client)
    parts_glob = _kill_mid_shard(tmp_path, lake, client)
    assert _new(ray_head, before)  # the killed job was a client session (its driver: the client server's)
    rerun = _enrich_spec(lake, uri, "journey", llama_score, ray_head.gcs)
    before = ray_head.driver_pids()
    pid = _run_job(tmp_path, rerun, "rerun")
    assert _new(ray_head, before) == [pid]
    assert _resumed_output(lake, rerun, parts_glob) == unkilled

    reports = {}
    for form, address in (("client", ray_head.client), ("gcs", ray_head.gcs)):
        spec = JobSpec(
            stage="validate",
            lake=lake.to_dict(),
            run_id=f"validate-{form}",
            config={
                "input_manifest": rerun.manifest_uri,
                "query_engine": "daft",
                "daft_runner": "ray",
                "ray_address": address,
                # a check of its own per form: another fingerprint, so the second run computes too
                "checks": [{"type": "sql", "name": f"rows {form}", "query": "SELECT count(*) FROM docs", "min": 1}],
            },
        )
        before = ray_head.driver_pids()
        pid = _run_job(tmp_path, spec, f"validate-{form}")
        joined = _new(ray_head, before)
        # host:port: the job process itself is a driver of the cluster; ray://: it is not (client sessions).
        assert joined and (pid in joined) == (form == "gcs"), (form, pid, joined)
        with open(os.path.join(os.path.dirname(spec.manifest_uri), "report.json")) as f:
            reports[form] = json.load(f)
        assert reports[form]["status"] == "passed" and reports[form]["metrics"]["query_engine"] == "daft-ray"
        (rows,) = [c for c in reports[form]["checks"] if c["name"] == f"rows {form}"]
        assert rows["observed"] == reports[form]["metrics"]["rows"] > 0
    assert reports["client"]["metrics"] == reports["gcs"]["metrics"]
