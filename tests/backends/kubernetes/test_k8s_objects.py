"""Every object the Kubernetes backend builds validates against the real schemas, and says what it must."""

from __future__ import annotations

import copy
import json
import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_curation.backends import k8s_objects as o
from airflow_curation.backends.schemas import ManifestInvalid, crd_schemas, validate_object
from airflow_curation.hooks.factory import backend_for
from airflow_curation.jobs.spec import JobSpec

POD_SETTINGS = [
    {},
    {
        "storage_secret": "lake-creds",
        "node_selector": {"pool": "cpu"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "curation", "effect": "NoSchedule"}],
        "gpu_node_selector": {"nvidia.com/gpu.present": "true"},
        "gpu_tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "image_pull_secrets": ["regcred"],
        "priority_class": "batch-low",
        "gpus": 4,
        "env": {"CURATION_LOG_LEVEL": "INFO"},
        "labels": {"team": "data"},
        "annotations": {"a/b": "c"},
        "requests": {"cpu": "4", "memory": "16Gi"},
        "limits": {"cpu": "8", "memory": "32Gi"},
    },
]


def _backend(**options):
    """A backend on the factory's client for an API server that is never called: objects are only built."""
    return backend_for("kubernetes", {"host": "http://127.0.0.1:1", **options})


def _spec(stage: str = "preprocess") -> JobSpec:
    return JobSpec(
        stage=stage,
        lake={"root": "s3://bucket/lake", "dataset": "web", "snapshot": "2026-11-30"},
        run_id="scheduled__2026-11-30T00:00:00+00:00".replace("+", "_"),
        config={"workers": 2},
    )


def _pod_specs(obj: dict) -> list[dict]:
    out = []

    def walk(x):
        if isinstance(x, dict):
            if "containers" in x and isinstance(x["containers"], list):
                out.append(x)
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(obj)
    return out


def _containers(obj: dict) -> list[dict]:
    return [c for ps in _pod_specs(obj) for c in ps["containers"]]


@pytest.mark.parametrize("pod", POD_SETTINGS, ids=["defaults", "full"])
@pytest.mark.parametrize("engine", o.LAUNCH_KINDS)
def test_every_engine_builds_valid_non_root_objects(engine, pod):
    stage = "enrich" if engine == "ray" else "preprocess"
    backend = _backend(namespace="curation", pod=pod, launch_kinds={stage: engine}, shard_groups=6, parallelism=4)
    handle, objects = backend.build(_spec(stage))
    assert [x["kind"] for x in objects][0] == "ConfigMap"
    for obj in objects:
        validate_object(obj)  # raises on any schema violation, unknown fields included
    main = objects[1]
    assert main["kind"] == {"indexed": "Job", "job": "Job", "dask": "DaskJob", "ray": "RayJob"}[engine]
    assert handle["kind"] == main["kind"] and handle["name"] == main["metadata"]["name"]
    for ps in _pod_specs(main):
        assert ps["securityContext"]["runAsNonRoot"] is True
        assert ps["securityContext"]["runAsUser"] != 0
        assert ps["serviceAccountName"] == backend.pod.service_account
        assert ps["volumes"][0]["configMap"]["name"] == f"{handle['name']}-spec"
        if pod.get("node_selector"):
            assert ps["nodeSelector"]["pool"] == "cpu"
            assert ps["tolerations"][0]["key"] == "dedicated"
    for c in _containers(main):
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert c["resources"]["requests"] and c["resources"]["limits"]
        if pod.get("storage_secret"):
            assert c["envFrom"] == [{"secretRef": {"name": "lake-creds"}}]
        # No credential value anywhere: only the Secret's name.
        assert "AWS_SECRET_ACCESS_KEY" not in json.dumps(c)


def test_gpus_only_on_ray_workers_with_gpu_placement():
    settings_ = o.PodSettings.from_dict(POD_SETTINGS[1])
    obj = o.ray_job("cur-enrich-x", "ns", "enrich", "{}", settings_, workers=3, result_uri="s3://b/r.json")
    validate_object(obj)
    cluster = obj["spec"]["rayClusterSpec"]
    worker_group = cluster["workerGroupSpecs"][0]
    worker = worker_group["template"]["spec"]
    assert worker_group["replicas"] == 3 and worker_group["groupName"] == "gpu"
    res = worker["containers"][0]["resources"]
    assert res["requests"]["nvidia.com/gpu"] == res["limits"]["nvidia.com/gpu"] == "4"
    assert worker["nodeSelector"] == {"pool": "cpu", "nvidia.com/gpu.present": "true"}
    assert {t["key"] for t in worker["tolerations"]} == {"dedicated", "nvidia.com/gpu"}
    head = cluster["headGroupSpec"]["template"]["spec"]
    assert "nvidia.com/gpu" not in head["containers"][0]["resources"]["limits"]
    assert "nvidia.com/gpu.present" not in head.get("nodeSelector", {})
    # The entrypoint is the one job command, quoted for the shell that `ray job submit` uses.
    assert shlex.split(obj["spec"]["entrypoint"]) == RUN_ARGV
    assert obj["spec"]["shutdownAfterJobFinishes"] is True


RUN_ARGV = ["python", "-m", "airflow_curation.jobs", "run", o.SPEC_PATH, "--result", "s3://b/r.json"]


def test_sweep_is_indexed_with_per_index_retries_and_failure_policy():
    job = o.sweep_job(
        "cur-preprocess-x",
        "ns",
        "preprocess",
        "{}",
        o.PodSettings(),
        groups=10,
        parallelism=4,
        result_dir="s3://b/jobs/x",
    )
    validate_object(job)
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == 10 and spec["parallelism"] == 4
    assert spec["backoffLimitPerIndex"] == 2 and "backoffLimit" not in spec
    argv = spec["template"]["spec"]["containers"][0]["command"]
    assert argv[argv.index("--group") + 1] == "$(JOB_COMPLETION_INDEX)/10"
    actions = {r["action"] for r in spec["podFailurePolicy"]["rules"]}
    assert actions == {"FailJob", "FailIndex", "Ignore"}
    assert spec["template"]["spec"]["restartPolicy"] == "Never"


def test_dask_job_matches_operator_conventions():
    obj = o.dask_job(
        "cur-dedup-x",
        "ns",
        "dedup",
        "{}",
        o.PodSettings(limits={"cpu": "2", "memory": "8Gi"}),
        workers=5,
        result_uri="s3://b/r.json",
    )
    validate_object(obj)
    cluster = obj["spec"]["cluster"]["spec"]
    assert cluster["worker"]["replicas"] == 5
    worker_cmd = cluster["worker"]["spec"]["containers"][0]["command"]
    assert worker_cmd[worker_cmd.index("--memory-limit") + 1] == "8GiB"
    assert obj["spec"]["job"]["spec"]["containers"][0]["command"] == RUN_ARGV


def test_names_are_deterministic_per_spec_and_dns_safe():
    a, b = _spec().to_json(), _spec("dedup").to_json()
    assert o.object_name("preprocess", a) == o.object_name("preprocess", a)
    assert o.object_name("preprocess", a) != o.object_name("preprocess", b)
    assert o.object_name("preprocess", a, attempt=2).endswith("-r2")


@settings(max_examples=50, deadline=None)
@given(stage=st.text(max_size=80), spec=st.text(max_size=50), attempt=st.integers(0, 99))
def test_any_stage_name_gives_a_valid_object_name(stage, spec, attempt):
    name = o.object_name(stage, spec, attempt)
    assert len(name) <= 52
    cm = o.spec_config_map(name, "ns", stage, spec, o.PodSettings())
    validate_object(cm)  # names and label values stay legal whatever the stage is called


def test_pod_settings_refuse_root_and_numbers_as_quantities():
    with pytest.raises(ValueError, match="non-root"):
        o.PodSettings(run_as_user=0)
    with pytest.raises(ValueError, match="quantity string"):
        o.PodSettings(requests={"cpu": 2})
    with pytest.raises(ValueError, match="unknown pod settings"):
        o.PodSettings.from_dict({"imagee": "x"})


def test_validator_rejects_unknown_fields_wrong_types_and_missing_required():
    good = o.ray_job("cur-enrich-x", "ns", "enrich", "{}", o.PodSettings(), workers=1, result_uri="r")
    validate_object(good)
    bad = copy.deepcopy(good)
    bad["spec"]["shutdownAfterJobFinish"] = True  # typo: unknown field
    with pytest.raises(ManifestInvalid, match="shutdownAfterJobFinish"):
        validate_object(bad)
    bad = copy.deepcopy(good)
    bad["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] = "three"
    with pytest.raises(ManifestInvalid, match="replicas"):
        validate_object(bad)
    bad = copy.deepcopy(good)
    del bad["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["groupName"]
    with pytest.raises(ManifestInvalid, match="groupName"):
        validate_object(bad)

    job = o.stage_job("cur-x", "ns", "x", "{}", o.PodSettings(), result_uri="r")
    validate_object(job)
    bad = copy.deepcopy(job)
    bad["spec"]["template"]["spec"]["containers"][0]["resource"] = {}
    with pytest.raises(ManifestInvalid):
        validate_object(bad)
    bad = copy.deepcopy(job)
    bad["spec"]["completions"] = "1"
    with pytest.raises(ManifestInvalid):
        validate_object(bad)
    bad = copy.deepcopy(job)
    bad["metadata"]["name"] = "Not_A_Name"
    with pytest.raises(ManifestInvalid, match="DNS-1123"):
        validate_object(bad)

    dask = o.dask_job("cur-x", "ns", "x", "{}", o.PodSettings(), workers=1, result_uri="r")
    bad = copy.deepcopy(dask)
    del bad["spec"]["cluster"]["spec"]["scheduler"]["service"]
    with pytest.raises(ManifestInvalid, match="service"):
        validate_object(bad)


def test_shipped_crd_schemas_cover_the_kinds_we_create():
    assert {
        ("ray.io/v1", "RayJob"),
        ("ray.io/v1", "RayCluster"),
        ("kubernetes.dask.org/v1", "DaskJob"),
        ("kubernetes.dask.org/v1", "DaskCluster"),
    } <= set(crd_schemas())


def test_spec_travels_in_a_config_map_without_secrets():
    spec = _spec()
    cm = o.spec_config_map("cur-x", "ns", "preprocess", spec.to_json(), o.PodSettings())
    validate_object(cm)
    assert JobSpec.from_dict(json.loads(cm["data"]["spec.json"])) == spec
    secret = o.storage_secret("lake-creds", "ns", {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"})
    validate_object(secret)


@pytest.mark.parametrize("engine", o.LAUNCH_KINDS)
def test_secret_env_reaches_every_container_by_reference_only(engine):
    """The storage options the Airflow layer hands the backend (``env``) are in the job's Secret and
    nowhere else; every container reads them (and the lake Secret) through a Secret reference."""
    secret = "s3cr3t-value-8c1f"
    env = {"CURATION_STORAGE_OPTIONS_S3": json.dumps({"key": "AKIA-FAKE", "secret": secret})}
    stage = "enrich" if engine == "ray" else "preprocess"
    backend = _backend(
        namespace="curation",
        pod={"storage_secret": "lake-creds"},
        launch_kinds={stage: engine},
        shard_groups=3,
        env=env,
    )
    handle, objects = backend.build(_spec(stage))
    for obj in objects:
        validate_object(obj)
    [job_secret] = [x for x in objects if x["kind"] == "Secret"]
    assert job_secret["metadata"]["name"] == handle["env_secret"]
    assert job_secret["stringData"] == env
    assert all(secret not in json.dumps(x) for x in objects if x["kind"] != "Secret")
    assert secret not in json.dumps(handle)
    containers = [c for x in objects for c in _containers(x)]
    assert len(containers) >= (2 if engine == "indexed" else 1)  # the collect job's pod too
    for c in containers:
        assert c["envFrom"] == [{"secretRef": {"name": "lake-creds"}}, {"secretRef": {"name": handle["env_secret"]}}]
        assert not [e for e in c["env"] if e["name"].startswith("CURATION_STORAGE_OPTIONS_")]


@pytest.mark.parametrize("engine", o.LAUNCH_KINDS)
def test_credentials_of_pod_env_and_of_env_are_read_from_a_secret_only(engine):
    """A cloud key in ``pod.env`` (literal in every pod spec until now) and a token in the backend's
    ``env`` reach every container through the job's Secret: no object but that Secret holds either, and
    every object validates against its schema. Plain ``pod.env`` variables stay literal."""
    aws, hf, pw = "wJalrXUtnFEMI-fake-4c1e", "hf_fake_token_77a0", "pw123"
    stage = "enrich" if engine == "ray" else "preprocess"
    backend = _backend(
        namespace="curation",
        pod={
            "storage_secret": "lake-creds",
            "env": {
                "AWS_SECRET_ACCESS_KEY": aws,
                "DATABASE_URL": f"postgresql://loader:{pw}@db:5432/lake",
                "CURATION_LOG_LEVEL": "INFO",
            },
        },
        launch_kinds={stage: engine},
        shard_groups=3,
        env={"HF_TOKEN": hf},
    )
    handle, objects = backend.build(_spec(stage))
    for obj in objects:
        validate_object(obj)
    [job_secret] = [x for x in objects if x["kind"] == "Secret"]
    assert job_secret["metadata"]["name"] == handle["env_secret"]
    assert job_secret["stringData"]["AWS_SECRET_ACCESS_KEY"] == aws and job_secret["stringData"]["HF_TOKEN"] == hf
    for obj in objects:
        if obj["kind"] != "Secret":
            assert all(s not in json.dumps(obj) for s in (aws, hf, pw)), obj["kind"]
    assert all(s not in json.dumps(handle) for s in (aws, hf, pw))
    assert all(s not in json.dumps(backend.options()["pod"]) for s in (aws, pw))
    containers = [c for x in objects for c in _containers(x)]
    for c in containers:
        assert {"secretRef": {"name": handle["env_secret"]}} in c["envFrom"]
        assert {"name": "CURATION_LOG_LEVEL", "value": "INFO"} in c["env"]
        assert not {"AWS_SECRET_ACCESS_KEY", "DATABASE_URL", "HF_TOKEN"} & {e["name"] for e in c["env"]}


def test_credentials_are_refused_as_literal_pod_env():
    for env in ({"CURATION_STORAGE_OPTIONS_S3": '{"secret": "x"}'}, {"AWS_SECRET_ACCESS_KEY": "x"}, {"HF_TOKEN": "x"}):
        with pytest.raises(ValueError, match="credentials .* would be written into the pod spec"):
            o.PodSettings(env=env)
    # The backend moves them into the job's Secret instead (above).
    backend = _backend(pod={"env": {"curation_storage_options_gcs": "{}"}})
    assert backend.pod.env == {} and backend.env == {"curation_storage_options_gcs": "{}"}
