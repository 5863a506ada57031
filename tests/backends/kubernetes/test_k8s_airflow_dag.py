"""The product's pipeline DAG with ``backend=kubernetes`` in a real ``dag.test()``: the operator
submits through the Kubernetes backend to the loopback API server, defers on its status, and a
kubelet stand-in runs the generated pods (groups + collect jobs) on the real ingest, preprocess and dedup
stages. Only Jobs can run here (no Dask or KubeRay operator), so every stage is configured as one."""

from __future__ import annotations

import importlib.util
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from k8s_fake_kubelet import AutoKubelet

from airflow_curation.core.layout import Lake, curation_run_id
from airflow_curation.core.manifest import Manifest

pytestmark = pytest.mark.airflow
REPO = Path(__file__).resolve().parents[3]


def test_pipeline_dag_on_kubernetes(airflow_db, fake_k8s, tmp_path, monkeypatch):
    inputs = tmp_path / "in"
    inputs.mkdir()
    for i in range(3):
        (inputs / f"part{i}.jsonl").write_text(
            "".join(json.dumps({"text": f"doc {i} {j} " + "w " * j}) + "\n" for j in range(10))
        )
    monkeypatch.setenv("CURATION_POLL_INTERVAL", "0.2")
    # Deployment defaults, as the helm chart sets them: the curation connection's backend options, from
    # which the factory builds the backend and its API client (the provider's hook on a kubeconfig for ``host``).
    backend_options = {
        "host": fake_k8s.url,
        "namespace": "default",
        "shard_groups": 2,
        # Only Jobs can run here (no Dask or KubeRay operator): sweeps, and one pod for global dedup.
        "launch_kinds": {
            "ingest": "indexed",
            "preprocess": "indexed",
            "dedup": "job",
            "enrich": "job",
            "validate": "job",
        },
        "pod": {"service_account": "airflow-curation-job"},
    }
    connection = {"conn_type": "curation", "extra": {"backend": "kubernetes", "backend_options": backend_options}}
    monkeypatch.setenv("AIRFLOW_CONN_CURATION_DEFAULT", json.dumps(connection))
    spec = importlib.util.spec_from_file_location(
        "curation_pipeline_k8s_under_test", REPO / "dags" / "curation_pipeline.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    lake_root = tmp_path / "lake"

    with AutoKubelet(fake_k8s, tmp_path / "kubelet") as kubelet:
        dag_run = module.dag.test(
            logical_date=datetime(2026, 11, 27, tzinfo=timezone.utc),
            run_conf={
                "input": str(inputs),
                "lake": str(lake_root),
                "dataset": "web",
                "backend": "kubernetes",
                # Its 30 short generated documents all fail the gopher preset: validate would rightly refuse
                # an empty curated set, so the gate asks for none; the run still validates on Kubernetes.
                "max_failed_fraction": 0.0,
                "min_rows": 0,
            },
        )
    assert not kubelet.errors, kubelet.errors
    assert dag_run.state == "success", dag_run.state

    jobs = fake_k8s.names("jobs")
    sweeps = [fake_k8s.get("jobs", n) for n in jobs if "-collect" not in n]
    stages = sorted(j["metadata"]["labels"]["curation.airflow.apache.org/stage"] for j in sweeps)
    assert stages == sorted(set(stages)) and {"ingest", "preprocess", "dedup", "validate"} <= set(stages)  # each once
    ingest = next(j for j in sweeps if j["metadata"]["labels"]["curation.airflow.apache.org/stage"] == "ingest")
    assert ingest["spec"]["completionMode"] == "Indexed" and ingest["spec"]["completions"] == 2
    assert f"{ingest['metadata']['name']}-collect" in jobs
    lake = Lake(str(lake_root), "web", "2026-11-27")
    manifest = Manifest.read(lake.manifest_uri(curation_run_id(dag_run.run_id, lake.snapshot), "ingest"))
    assert manifest.status == "complete" and manifest.rows == 30
