"""The helm chart, rendered by a real Helm engine (helm-python-sdk embeds Helm v4) for several value
sets; every object validated against the real schemas (kubernetes-validate, CRD openAPIV3Schema)."""

from __future__ import annotations

import json
from pathlib import Path

import helm_python  # noqa: E402
import pytest
import yaml

from airflow_curation.backends.kubernetes import KubernetesBackend  # noqa: E402
from airflow_curation.backends.schemas import validate_object  # noqa: E402
from airflow_curation.hooks.factory import backend_for  # noqa: E402
from airflow_curation.jobs.spec import JobSpec  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "airflow-curation"

FULL = {
    "image": {"repository": "registry.example.com/curation", "tag": "1.2.3", "pullPolicy": "Always"},
    "imagePullSecrets": [{"name": "regcred"}],
    "lake": {
        "uri": "s3://lake-bucket/prod",
        "dataset": "web",
        "storageOptions": {"endpoint_url": "http://minio:9000"},
        "credentials": {"accessKeyId": "AKIA-CHART", "secretAccessKey": "chart-secret"},
    },
    "airflow": {
        "namespace": "airflow",
        "serviceAccounts": ["airflow-worker", "airflow-triggerer", "airflow-scheduler"],
    },
    "jobs": {
        "namespace": "curation-jobs",
        "parallelism": 8,
        "launchKinds": {"preprocess": "indexed"},
        "nodeSelector": {"pool": "cpu"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "curation", "effect": "NoSchedule"}],
        "gpu": {
            "resource": "nvidia.com/gpu",
            "count": 2,
            "nodeSelector": {"gpu": "h100"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
        "priorityClassName": "batch",
    },
    "ray": {"enabled": True, "workers": {"replicas": 2, "minReplicas": 1, "maxReplicas": 4, "gpus": 2}},
    "dask": {"enabled": True, "workers": {"replicas": 3}},
    "dags": {"mode": "configMap", "extraFiles": {"site_extra.py": "# a site's own DAG\n"}},
}
MINIMAL = {
    "lake": {"uri": "gs://bucket/lake", "dataset": "d", "existingSecret": "my-lake-creds"},
    "rbac": {"create": False},
    "jobs": {"serviceAccount": {"create": False, "name": "existing-sa"}},
    "dags": {"mode": "none"},
}
GITSYNC = {
    "dags": {"mode": "gitSync", "gitSync": {"repo": "https://git.example.com/dags.git"}},
    "ray": {"enabled": True, "workers": {"gpus": 0, "minReplicas": 1, "maxReplicas": 1}},
}
VALUE_SETS = {"defaults": {}, "full": FULL, "minimal": MINIMAL, "gitsync": GITSYNC}


def render(values: dict, namespace: str = "airflow") -> tuple[list[dict], str]:
    with helm_python.Chart.load(str(CHART)) as chart:
        chart.validate_schema(values)
        out = chart.render(values, name="cur", namespace=namespace)
    docs = []
    notes = ""
    for path, text in out.items():
        if path.endswith("NOTES.txt"):
            notes = text
            continue
        docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs, notes


@pytest.fixture(scope="module")
def rendered() -> dict[str, tuple[list[dict], str]]:
    return {name: render(values) for name, values in VALUE_SETS.items()}


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


@pytest.mark.parametrize("name", VALUE_SETS)
def test_every_rendered_object_validates(rendered, name):
    docs, notes = rendered[name]
    assert docs and "airflow-curation" in notes
    for doc in docs:
        validate_object(doc)


def test_lint_is_clean():
    report = helm_python.lint(str(CHART), strict=True)
    assert report["errors"] == [], report
    assert not [m for m in report["messages"] if m["severity"] >= 2], report["messages"]


def test_kinds_per_value_set(rendered):
    kinds = {name: sorted({d["kind"] for d in docs}) for name, (docs, _) in rendered.items()}
    assert kinds["defaults"] == ["ConfigMap", "Role", "RoleBinding", "Secret", "ServiceAccount"]
    assert kinds["full"] == [
        "ConfigMap",
        "DaskCluster",
        "RayCluster",
        "Role",
        "RoleBinding",
        "Secret",
        "ServiceAccount",
    ]
    assert kinds["minimal"] == ["ConfigMap", "Secret"]  # config + connection; no RBAC, SA, lake Secret, DAGs
    assert "RayCluster" in kinds["gitsync"]
    docs, notes = rendered["gitsync"]
    assert not [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("-dags")]
    assert "dags.gitSync.repo=https://git.example.com/dags.git" in notes


def test_dag_config_map_carries_the_repo_dags_verbatim(rendered):
    docs, _ = rendered["full"]
    dags = next(d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("-dags"))
    repo_dags = {p.name: p.read_text() for p in (REPO / "dags").glob("*.py")}
    assert repo_dags and set(dags["data"]) == set(repo_dags) | {"site_extra.py"}
    for name, text in repo_dags.items():
        assert dags["data"][name] == text.rstrip("\n")  # `|-` drops the final newline only


def test_backend_options_build_a_working_backend(rendered, tmp_path):
    docs, _ = rendered["full"]
    config = next(d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("-config"))["data"]
    assert config["CURATION_LAKE"] == "s3://lake-bucket/prod" and config["CURATION_BACKEND"] == "kubernetes"
    # The pipeline DAG's defaults, and metrics and lineage on out of the box.
    assert config["AIRFLOW_VAR_CURATION_DATASET"]
    assert config["AIRFLOW__METRICS__STATSD_ON"] == "True" and config["AIRFLOW__METRICS__STATSD_PORT"] == "9125"
    assert json.loads(config["AIRFLOW__OPENLINEAGE__TRANSPORT"])["type"] == "console"
    # The backend's options live in one place: the curation connection (the factory builds the client).
    assert "CURATION_KUBERNETES_OPTIONS" not in config
    secret = next(d for d in by_kind(docs, "Secret") if d["metadata"]["name"].endswith("-connection"))
    options = json.loads(secret["stringData"]["AIRFLOW_CONN_CURATION_DEFAULT"])["extra"]["backend_options"]
    assert options["namespace"] == "curation-jobs" and options["in_cluster"] is True
    backend = backend_for("kubernetes", {**options, "in_cluster": None, "host": "http://127.0.0.1:1"})
    assert isinstance(backend, KubernetesBackend)
    pod = backend.pod
    sa = by_kind(docs, "ServiceAccount")[0]
    lake_secret = next(d for d in by_kind(docs, "Secret") if d["metadata"]["name"] == pod.storage_secret)
    assert sa["metadata"]["name"] == pod.service_account
    assert sa["metadata"]["namespace"] == lake_secret["metadata"]["namespace"] == "curation-jobs"
    assert pod.image == "registry.example.com/curation:1.2.3" and pod.image_pull_secrets == ["regcred"]
    assert pod.gpus == 2 and pod.gpu_node_selector == {"gpu": "h100"}
    storage = json.loads(lake_secret["stringData"]["CURATION_STORAGE_OPTIONS_S3"])
    assert storage == {"endpoint_url": "http://minio:9000", "key": "AKIA-CHART", "secret": "chart-secret"}
    spec = JobSpec(stage="enrich", lake={"root": "s3://lake-bucket/prod", "dataset": "web"}, run_id="r")
    for stage in ("ingest", "preprocess", "dedup", "enrich"):
        _, objects = backend.build(JobSpec(**{**spec.__dict__, "stage": stage}))
        for obj in objects:
            validate_object(obj)


def test_connection_secret_is_a_curation_connection(rendered):
    from airflow.models.connection import Connection

    docs, _ = rendered["full"]
    secret = next(d for d in by_kind(docs, "Secret") if d["metadata"]["name"].endswith("-connection"))
    assert secret["metadata"]["namespace"] == "airflow"
    conn = Connection.from_json(secret["stringData"]["AIRFLOW_CONN_CURATION_DEFAULT"], conn_id="curation_default")
    assert conn.conn_type == "curation" and conn.login == "AKIA-CHART" and conn.password == "chart-secret"
    extra = conn.extra_dejson
    assert extra["lake"] == "s3://lake-bucket/prod" and extra["backend"] == "kubernetes"
    assert extra["storage_options"] == {"s3": {"endpoint_url": "http://minio:9000"}}
    # Without storage options the connection names none, so the pods' lake Secret is not overridden.
    docs, _ = rendered["defaults"]
    secret = next(d for d in by_kind(docs, "Secret") if d["metadata"]["name"].endswith("-connection"))
    assert "storage_options" not in json.loads(secret["stringData"]["AIRFLOW_CONN_CURATION_DEFAULT"])["extra"]


def test_rbac_binds_airflow_service_accounts_across_namespaces(rendered):
    docs, _ = rendered["full"]
    binding = by_kind(docs, "RoleBinding")[0]
    assert binding["metadata"]["namespace"] == "curation-jobs"
    assert {(s["name"], s["namespace"]) for s in binding["subjects"]} == {
        ("airflow-worker", "airflow"),
        ("airflow-triggerer", "airflow"),
        ("airflow-scheduler", "airflow"),
    }


def test_ray_cluster_gpus_and_placement(rendered):
    docs, _ = rendered["full"]
    ray = by_kind(docs, "RayCluster")[0]
    group = ray["spec"]["workerGroupSpecs"][0]
    assert ray["spec"]["enableInTreeAutoscaling"] is True
    assert (group["groupName"], group["replicas"], group["minReplicas"], group["maxReplicas"]) == ("gpu", 2, 1, 4)
    pod = group["template"]["spec"]
    res = pod["containers"][0]["resources"]
    assert res["requests"]["nvidia.com/gpu"] == res["limits"]["nvidia.com/gpu"] == "2"
    assert pod["nodeSelector"] == {"pool": "cpu", "gpu": "h100"}
    assert {t["key"] for t in pod["tolerations"]} == {"dedicated", "nvidia.com/gpu"}
    head = ray["spec"]["headGroupSpec"]["template"]["spec"]
    assert "nvidia.com/gpu" not in head["containers"][0]["resources"]["limits"]
    for p in (pod, head):
        assert p["securityContext"]["runAsNonRoot"] is True
    docs, _ = rendered["gitsync"]
    cpu = by_kind(docs, "RayCluster")[0]["spec"]
    assert cpu["workerGroupSpecs"][0]["groupName"] == "cpu" and cpu["enableInTreeAutoscaling"] is False
    assert "nvidia.com/gpu" not in json.dumps(cpu)


@pytest.mark.parametrize(
    "bad, where",
    [
        ({"lake": {"uri": "not-a-url"}}, "/lake/uri"),
        ({"jobs": {"runAsUser": 0}}, "/jobs/runAsUser"),
        ({"jobs": {"paralelism": 3}}, "paralelism"),
        ({"jobs": {"launchKinds": {"enrich": "spark"}}}, "/jobs/launchKinds/enrich"),
        ({"jobs": {"resources": {"limits": {"cpu": 2}}}}, "/jobs/resources/limits/cpu"),
        ({"dags": {"mode": "nfs"}}, "/dags/mode"),
    ],
)
def test_schema_rejects_bad_values(bad, where):
    with helm_python.Chart.load(str(CHART)) as chart:
        with pytest.raises(helm_python.HelmValuesError) as e:
            chart.render(bad, name="cur", namespace="airflow")
    assert where in str(e.value)
