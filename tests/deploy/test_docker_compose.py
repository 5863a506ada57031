"""docker-compose.yaml: no Docker engine runs here, so the file is checked by Debian's
``docker-compose config`` (which validates against the Compose Specification schema and resolves
anchors, variables and dependencies), by that schema directly, and by what the DAG and the stages
need: every service, image, port, volume and environment variable, and that the addresses in the
environment point at services that listen there."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yaml"
AIRFLOW_SERVICES = {
    "airflow-api-server": "api-server",
    "airflow-scheduler": "scheduler",
    "airflow-dag-processor": "dag-processor",
    "airflow-triggerer": "triggerer",
}
INSTALL_HINT = "docker-compose (Debian package) is missing: run scripts/install_system_deps.sh"


def _docker_compose() -> str:
    exe = shutil.which("docker-compose")
    assert exe, INSTALL_HINT
    return exe


@pytest.fixture(scope="module")
def config() -> dict:
    """The file as docker-compose resolves it (anchors merged, defaults of ${VARS} filled in)."""
    proc = subprocess.run(
        [_docker_compose(), "-f", str(COMPOSE), "config"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    return yaml.safe_load(proc.stdout)


def _compose_schema() -> dict:
    proc = subprocess.run(
        ["/usr/bin/python3", "-c", "import compose, os; print(os.path.dirname(compose.__file__))"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, INSTALL_HINT
    return json.loads((Path(proc.stdout.strip()) / "config" / "compose_spec.json").read_text())


def test_file_matches_the_compose_specification_schema():
    import jsonschema

    raw = yaml.safe_load(COMPOSE.read_text())
    jsonschema.Draft7Validator(_compose_schema()).validate(raw)
    bad = {**raw, "services": {**raw["services"], "oops": {"image": "x", "portz": ["1:1"]}}}
    with pytest.raises(jsonschema.ValidationError, match="portz"):
        jsonschema.Draft7Validator(_compose_schema()).validate(bad)


def test_docker_compose_rejects_a_broken_variant(tmp_path):
    # The check above is not vacuous: a dependency on a missing service fails `config`.
    broken = yaml.safe_load(COMPOSE.read_text())
    broken["services"]["dask-worker"]["depends_on"] = ["no-such-service"]
    (tmp_path / "docker-compose.yaml").write_text(yaml.safe_dump(broken))
    proc = subprocess.run(
        [_docker_compose(), "-f", str(tmp_path / "docker-compose.yaml"), "config", "-q"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode != 0 and "no-such-service" in proc.stderr


def test_every_component_is_there(config):
    services = config["services"]
    for name, command in AIRFLOW_SERVICES.items():
        assert services[name]["command"] == [command]
    assert {
        "postgres",
        "minio",
        "minio-init",
        "airflow-init",
        "ray-head",
        "ray-worker",
        "dask-scheduler",
        "dask-worker",
    } <= set(services)
    assert "--head" in services["ray-head"]["command"]
    assert "--address=ray-head:6379" in services["ray-worker"]["command"]
    assert "tcp://dask-scheduler:8786" in services["dask-worker"]["command"]


def test_images_are_pinned_and_the_build_exists(config):
    for name, svc in config["services"].items():
        image = svc.get("image")
        assert image, f"{name} has no image"
        assert ":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest"), f"{name}: unpinned {image}"
    build = config["services"]["airflow-scheduler"]["build"]
    dockerfile = Path(build["context"]) / build["dockerfile"]
    text = dockerfile.read_text()
    assert "apache/airflow:3.3" in text
    extras = re.search(r"\[([a-z0-9,-]+)\]", text.split("pip install", 1)[1]).group(1).split(",")
    assert {"dask", "ray", "s3"} <= set(extras)  # the engines the stack's clusters and the lake need
    # Ray and Dask run on the same image as Airflow, so driver and cluster versions always match.
    curation_image = config["services"]["airflow-scheduler"]["image"]
    for name in ("ray-head", "ray-worker", "dask-scheduler", "dask-worker"):
        assert config["services"][name]["image"] == curation_image


def test_published_ports(config):
    published = {}
    for name, svc in config["services"].items():
        for p in svc.get("ports", []):
            host = int(p["published"]) if isinstance(p, dict) else int(str(p).split(":")[0])
            assert host not in published, f"port {host} published by {published.get(host)} and {name}"
            published[host] = name
    assert published[8080] == "airflow-api-server" and published[9000] == "minio"
    assert published[8265] == "ray-head" and published[8787] == "dask-scheduler"


def _env(svc: dict) -> dict[str, str]:
    env = svc.get("environment") or {}
    return {k: ("" if v is None else str(v)) for k, v in env.items()}


def test_airflow_gets_every_variable_the_dag_and_the_lake_need(config):
    dag_vars, airflow_vars = set(), set()
    for dag in (REPO / "dags").glob("*.py"):
        text = dag.read_text()
        dag_vars |= set(re.findall(r"os\.environ\.get\(\s*[\"'](CURATION_[A-Z0-9_]+)", text))
        # The DAG's defaults are Airflow Variables and the curation_default connection.
        airflow_vars |= {f"AIRFLOW_VAR_{v.upper()}" for v in re.findall(r"var\.value\.get\(\s*'(curation_\w+)'", text)}
    assert {"AIRFLOW_VAR_CURATION_INPUT", "AIRFLOW_VAR_CURATION_DATASET"} <= airflow_vars
    dag_vars |= airflow_vars | {"AIRFLOW_CONN_CURATION_DEFAULT"}
    services = config["services"]
    for name in [*AIRFLOW_SERVICES, "ray-head", "ray-worker", "dask-scheduler", "dask-worker"]:
        env = _env(services[name])
        if name in AIRFLOW_SERVICES:
            missing = dag_vars - set(env)
            assert not missing, (
                f"{name} lacks {sorted(missing)}: the DAG reads them; declare them in docker-compose.yaml"
            )
        lake = env["CURATION_LAKE"]
        protocol = lake.split("://", 1)[0]
        options = json.loads(env[f"CURATION_STORAGE_OPTIONS_{protocol.upper()}"])
        assert options["key"] and options["secret"], name
        endpoint = urlparse(options["endpoint_url"])
        assert endpoint.hostname == "minio" and endpoint.port == 9000
    minio_env = _env(services["minio"])
    opts = json.loads(_env(services["airflow-scheduler"])["CURATION_STORAGE_OPTIONS_S3"])
    assert (opts["key"], opts["secret"]) == (minio_env["MINIO_ROOT_USER"], minio_env["MINIO_ROOT_PASSWORD"])
    # The lake's bucket is the one minio-init creates.
    bucket = urlparse(_env(services["airflow-scheduler"])["CURATION_LAKE"]).netloc
    assert f"lake/{bucket}" in " ".join(services["minio-init"]["command"])


def test_connection_and_addresses_point_at_services(config):
    from airflow.models.connection import Connection

    services = config["services"]
    env = _env(services["airflow-scheduler"])
    conn = Connection.from_json(env["AIRFLOW_CONN_CURATION_DEFAULT"], conn_id="curation_default")
    assert conn.conn_type == "curation" and conn.extra_dejson["lake"] == env["CURATION_LAKE"]
    assert conn.login == _env(services["minio"])["MINIO_ROOT_USER"]

    db = urlparse(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    assert db.hostname == "postgres" and db.port == 5432
    assert db.password == _env(services["postgres"])["POSTGRES_PASSWORD"]
    api = urlparse(env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"])
    assert api.hostname == "airflow-api-server" and api.port == 8080
    assert env["RAY_ADDRESS"] == "ray-head:6379" and "--port=6379" in services["ray-head"]["command"]
    # Ray Client: `ray start --head` serves it on 10001 unless told another port.
    client = urlparse(env["CURATION_RAY_ADDRESS"])
    assert client.scheme == "ray" and client.hostname == "ray-head" and client.port == 10001
    assert not any(a.startswith("--ray-client-server-port") for a in services["ray-head"]["command"])
    dask = urlparse(env["DASK_SCHEDULER_ADDRESS"])
    assert dask.hostname == "dask-scheduler" and str(dask.port) in services["dask-scheduler"]["command"]
    # Every Airflow component shares the JWT secret and the DB, or task tokens fail between them.
    for key in ("AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"):
        assert len({_env(services[n])[key] for n in AIRFLOW_SERVICES}) == 1


def test_volumes_mount_the_dags_and_declared_volumes(config):
    for name in AIRFLOW_SERVICES:
        svc = config["services"][name]
        mounts = {}
        for v in svc["volumes"]:
            if isinstance(v, dict):
                mounts[v["target"]] = v["source"]
            else:
                src, target = v.split(":")[:2]
                mounts[target] = src
        dags_folder = _env(svc)["AIRFLOW__CORE__DAGS_FOLDER"]
        assert Path(mounts[dags_folder]).resolve() == (REPO / "dags").resolve()
        sample = _env(svc)["CURATION_SAMPLE_INPUT"]
        parent = next(t for t in mounts if sample.startswith(t + "/"))
        host_path = Path(mounts[parent]) / Path(sample).relative_to(parent)
        assert host_path.resolve().is_relative_to(REPO)
        named = [s for s in mounts.values() if not s.startswith(("/", "."))]
        assert set(named) <= set(config["volumes"])
    # Dependencies: Airflow starts after its DB is healthy, the bucket exists and the DB is migrated.
    deps = config["services"]["airflow-scheduler"]["depends_on"]
    assert deps["postgres"]["condition"] == "service_healthy"
    assert deps["minio-init"]["condition"] == deps["airflow-init"]["condition"] == "service_completed_successfully"
    assert "airflow-init" not in config["services"]["airflow-init"].get("depends_on", {})
