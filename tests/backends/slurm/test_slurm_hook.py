"""SlurmHook: a real Airflow connection (from the environment) becomes the backend's options, and the
connection form is declared in the provider metadata."""

from __future__ import annotations

import json

import pytest

from airflow_curation import get_provider_info
from airflow_curation.backends.slurm import SlurmBackend

from .conftest import JOB_PYTHONPATH, spec_for, wait_for

pytestmark = [pytest.mark.airflow, pytest.mark.slurm]


def _set_conn(monkeypatch, conn_id: str, **conn) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "slurm", **conn}))


def test_provider_declares_the_slurm_connection_form():
    from airflow_curation.hooks.slurm import EXTRA_FIELDS, SlurmHook

    info = get_provider_info()
    (conn_type,) = [c for c in info["connection-types"] if c["connection-type"] == "slurm"]
    assert conn_type["hook-class-name"] == f"{SlurmHook.__module__}.{SlurmHook.__name__}"
    fields = conn_type["conn-fields"]
    for name in ("partition", "account", "qos", "sbatch_options", "work_dir"):
        assert name in fields and fields[name]["label"]
    assert set(fields) <= {*EXTRA_FIELDS, "ssh_conn_id"}  # every form field reaches the backend
    # The login node is an ssh connection of its own: no SSH fields on this form.
    assert {"host", "login", "port", "password"} <= set(conn_type["ui-field-behaviour"]["hidden-fields"])
    assert "airflow_curation.hooks.slurm" in info["hooks"][0]["python-modules"]


def test_provider_metadata_validates_against_airflow_schema():
    import airflow
    import jsonschema
    from airflow.providers_manager import ProvidersManager

    schema_path = airflow.__path__[0] + "/provider_info.schema.json"
    with open(schema_path) as f:
        jsonschema.validate(get_provider_info(), json.load(f))
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    assert "slurm" in ProvidersManagerTaskRuntime().hooks  # discovered through the entry point
    widgets = ProvidersManager().connection_form_widgets  # the form, read from the metadata
    assert "extra__slurm__partition" in widgets and "extra__slurm__qos" in widgets


def test_hook_builds_the_backend_from_the_connection(monkeypatch):
    from airflow_curation.hooks.slurm import SlurmHook

    monkeypatch.setenv(
        "AIRFLOW_CONN_LOGIN1",
        json.dumps({"conn_type": "ssh", "host": "login1.example.org", "login": "curation", "port": 2222}),
    )
    _set_conn(
        monkeypatch,
        "slurm_site",
        extra={
            "ssh_conn_id": "login1",
            "partition": "gpu",
            "account": "llm",
            "qos": "high",
            "time_limit": "02:00:00",
            "sbatch_options": "--gres=gpu:1 --comment='curation run'",
            "shard_groups": "16",
            "extra__slurm__array_parallelism": "4",
            "work_dir": "/shared/jobs",
            "remote_work_dir": "true",
        },
    )
    backend = SlurmHook("slurm_site", shard_groups=4).get_backend()
    assert isinstance(backend, SlurmBackend)
    assert (backend.sbatch.partition, backend.sbatch.account, backend.sbatch.qos, backend.sbatch.time_limit) == (
        "gpu",
        "llm",
        "high",
        "02:00:00",
    )
    assert backend.sbatch.extra == ["--gres=gpu:1", "--comment=curation run"]
    assert backend.shard_groups == 4 and backend.array_parallelism == 4  # the override wins
    assert backend.remote_work_dir is True and backend.work_dir == "/shared/jobs"
    # Commands go through Airflow's SSH provider on the ssh connection (nothing connects until used).
    hook = backend.transport.hook
    assert (hook.ssh_conn_id, hook.remote_host, hook.username, hook.port) == (
        "login1",
        "login1.example.org",
        "curation",
        2222,
    )
    assert backend.remote
    assert "transport" not in backend.options()


def test_a_connections_launch_kind_and_its_deprecated_name(monkeypatch):
    from airflow_curation.hooks.slurm import SlurmHook

    _set_conn(monkeypatch, "slurm_dask", extra={"launch_kind": "dask", "ntasks": "2"})
    assert SlurmHook("slurm_dask").get_backend().launch_kind == "dask"
    _set_conn(monkeypatch, "slurm_engine", extra={"engine": "dask"})  # a connection made before the rename
    with pytest.warns(FutureWarning, match="launch_kind"):
        backend = SlurmHook("slurm_engine").get_backend()
    assert backend.launch_kind == "dask" and backend.options()["launch_kind"] == "dask"


def test_stage_operator_takes_the_backend_from_a_slurm_connection(monkeypatch):
    from airflow_curation.operators.ingest import IngestOperator

    _set_conn(monkeypatch, "slurm_site", extra={"partition": "cpu", "account": "llm", "qos": "low"})
    op = IngestOperator(
        task_id="ingest",
        inputs="/data/raw",
        lake="/lake",
        dataset="web",
        backend="slurm",
        backend_options={"slurm_conn_id": "slurm_site", "qos": "high"},
    )
    backend = op.get_backend()
    assert isinstance(backend, SlurmBackend)
    assert (backend.sbatch.partition, backend.sbatch.account, backend.sbatch.qos) == (
        "cpu",
        "llm",
        "high",
    )  # explicit wins
    assert "slurm_conn_id" not in backend.options()  # the backend knows no connection
    from airflow_curation.hooks.factory import handle_options

    kept = handle_options(backend, op._backend_options)  # the handle: resolved options + the connection id
    assert kept["slurm_conn_id"] == "slurm_site" and kept["qos"] == "high" and kept["partition"] == "cpu"


def test_legacy_ssh_fields_go_through_the_ssh_provider(monkeypatch):
    """Host/login/port on a slurm connection (before ``ssh_conn_id``) still work, through SSHHook: no
    command line is built from them, so a login that ssh would read as an option is just a name."""
    from airflow_curation.hooks.slurm import SlurmHook

    _set_conn(monkeypatch, "slurm_old", host="login1", login="-oProxyCommand=touch /tmp/pwned", port=2222)
    backend = SlurmHook("slurm_old").get_backend()
    hook = backend.transport.hook
    assert (hook.remote_host, hook.username, hook.port) == ("login1", "-oProxyCommand=touch /tmp/pwned", 2222)


def test_hook_without_host_submits_locally(monkeypatch, make_backend, lake):
    from airflow_curation.hooks.slurm import SlurmHook

    _set_conn(monkeypatch, "slurm_local", extra={"partition": "debug"})
    hook = SlurmHook("slurm_local", env={"PYTHONPATH": JOB_PYTHONPATH})
    ok, message = hook.test_connection()
    assert ok and "debug" in message
    backend = hook.get_backend()
    assert backend.transport is None and not backend.remote
    handle = backend.submit(spec_for(lake, units=2))
    assert wait_for(backend, handle).result["shards"] == 2
