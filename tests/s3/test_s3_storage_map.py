"""Input in one bucket, the lake in another, each on its own S3 server (two moto servers on loopback) with
its own credentials, configured only in the ``curation_default`` connection (one storage_options entry per
bucket): the IngestOperator checks the inputs and runs the job with them, and the ``curation`` CLI does the
same from the job environment. A bucket without credentials fails with a message that names the bucket
and where its credentials go.

Before the storage map, the operator checked the inputs before the connection's options were registered
(``NoCredentialsError``), and the options covered the lake root only."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import boto3
import pytest

from airflow_curation.core import storage

from .conftest import REGION

pytestmark = pytest.mark.s3
DOCS = 30


@pytest.fixture
def buckets(s3_endpoint, second_s3_endpoint, monkeypatch):
    """``{"raw": (bucket URL, options), "lake": (...)}``: the raw bucket on one server, the lake's on another."""
    for var in ("CURATION_STORAGE_OPTIONS_S3", "CURATION_STORAGE_OPTIONS_PREFIXES", "AWS_ACCESS_KEY_ID"):
        monkeypatch.delenv(var, raising=False)  # only the connection's options may be used
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")  # no ~/.aws credentials either
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    out = {}
    for name, url in (("raw", second_s3_endpoint), ("lake", s3_endpoint["endpoint_url"])):
        bucket = f"{name}-{uuid.uuid4().hex[:8]}"
        key, secret = f"key-{name}", f"secret-{name}"
        boto3.client(
            "s3", endpoint_url=url, aws_access_key_id=key, aws_secret_access_key=secret, region_name=REGION
        ).create_bucket(Bucket=bucket)
        out[name] = (
            f"s3://{bucket}",
            {"key": key, "secret": secret, "endpoint_url": url, "client_kwargs": {"region_name": REGION}},
        )
    raw, opts = out["raw"]
    with storage.using(storage.StorageMap({raw: opts})):
        for i, part in enumerate(("a", "b")):
            lines = [json.dumps({"text": f"document {part}{j}: the quick brown fox"}) for j in range(DOCS // 2)]
            storage.write_bytes(f"{raw}/in/{part}.jsonl", ("\n".join(lines) + "\n").encode())
    return out


def _connection(monkeypatch, buckets, with_raw: bool = True) -> None:
    entries = {url: opts for name, (url, opts) in buckets.items() if with_raw or name != "raw"}
    monkeypatch.setenv(
        "AIRFLOW_CONN_CURATION_DEFAULT",
        json.dumps(
            {
                "conn_type": "curation",
                "extra": {"lake": f"{buckets['lake'][0]}/lake", "backend": "local", "storage_options": entries},
            }
        ),
    )


class _Store(dict):
    """The task state store's API over a dict."""

    def set(self, key, value, *, retention=None):
        self[key] = value

    def delete(self, key):
        self.pop(key, None)


class _TI:
    stats_tags: dict = {}

    def xcom_push(self, key, value):
        pass


def _ingest(tmp_path, buckets):
    from airflow_curation.operators.ingest import IngestOperator

    op = IngestOperator(
        task_id="ingest",
        inputs=f"{buckets['raw'][0]}/in",
        dataset="web",
        curation_conn_id="curation_default",
        backend_options={"work_dir": str(tmp_path / "jobs")},
        deferrable=False,
        poll_interval=0.05,
    )
    return op.execute({"run_id": "manual__1", "task_state_store": _Store(), "ti": _TI()})


@pytest.mark.airflow
def test_ingest_operator_reads_one_bucket_and_writes_another_with_the_connections_options(
    tmp_path, buckets, monkeypatch
):
    _connection(monkeypatch, buckets)
    summary = _ingest(tmp_path, buckets)
    assert summary["rows"] == DOCS
    assert summary["manifest_uri"].startswith(f"{buckets['lake'][0]}/lake/web/")
    lake, opts = buckets["lake"]
    with storage.using(storage.StorageMap({lake: opts})):
        assert storage.read_json(summary["manifest_uri"])["status"] == "complete"
    # Nothing is left in effect in this process once the task is over.
    assert storage.options_for(summary["manifest_uri"]) == {}


@pytest.mark.airflow
def test_a_bucket_without_credentials_fails_naming_it_and_the_connection(tmp_path, buckets, monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    _connection(monkeypatch, buckets, with_raw=False)
    with pytest.raises(AirflowFailException) as e:
        _ingest(tmp_path, buckets)
    text = str(e.value)
    assert f"no credentials for {buckets['raw'][0]}/in" in text
    assert repr(buckets["raw"][0]) in text and "connection 'curation_default'" in text
    assert "`storage_options` extra" in text
    assert "secret-lake" not in text


def _cli(tmp_path, buckets, env_map: dict) -> subprocess.CompletedProcess:
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("CURATION_STORAGE")}
    env.update(storage.StorageMap(env_map).to_env())
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from airflow_curation.cli import main; sys.exit(main())",
            "ingest",
            f"{buckets['raw'][0]}/in",
        ]
        + ["--lake", f"{buckets['lake'][0]}/lake", "--dataset", "web", "--run-id", "cli1"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )


def test_cli_reads_one_bucket_and_writes_another_from_the_environment(tmp_path, buckets):
    proc = _cli(tmp_path, buckets, {url: opts for url, opts in buckets.values()})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["rows"] == DOCS


def test_cli_without_the_raw_buckets_credentials_names_what_is_missing(tmp_path, buckets):
    proc = _cli(tmp_path, buckets, {buckets["lake"][0]: buckets["lake"][1]})
    assert proc.returncode != 0
    assert f"no credentials for {buckets['raw'][0]}/in" in proc.stderr, proc.stderr[-3000:]
    assert "CURATION_STORAGE_OPTIONS_PREFIXES" in proc.stderr


@pytest.mark.airflow
def test_the_readmes_raw_and_lake_buckets_with_one_credential_in_the_connection(tmp_path, s3_endpoint, monkeypatch):
    """The README's example: inputs in ``s3://raw``, the lake in ``s3://lake``, one key in the connection's
    login/password and the endpoint under ``s3``: the protocol entry covers both buckets."""
    from airflow_curation.operators.ingest import IngestOperator

    for var in ("CURATION_STORAGE_OPTIONS_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    opts = {"endpoint_url": s3_endpoint["endpoint_url"], "client_kwargs": {"region_name": REGION}}
    raw, lake = f"raw-{uuid.uuid4().hex[:8]}", f"lake-{uuid.uuid4().hex[:8]}"
    client = boto3.client(
        "s3", endpoint_url=opts["endpoint_url"], aws_access_key_id="k", aws_secret_access_key="s", region_name=REGION
    )
    for b in (raw, lake):
        client.create_bucket(Bucket=b)
    client.put_object(Bucket=raw, Key="in/a.jsonl", Body=b'{"text": "one document"}\n{"text": "another one"}\n')
    monkeypatch.setenv(
        "AIRFLOW_CONN_CURATION_DEFAULT",
        json.dumps(
            {
                "conn_type": "curation",
                "host": f"s3://{lake}/curated",
                "login": "minio-key",
                "password": "minio-secret",
                "extra": {"storage_options": {"s3": opts}},
            }
        ),
    )
    op = IngestOperator(
        task_id="ingest",
        inputs=f"s3://{raw}/in",
        dataset="web",
        curation_conn_id="curation_default",
        backend_options={"work_dir": str(tmp_path / "jobs")},
        deferrable=False,
        poll_interval=0.05,
    )
    summary = op.execute({"run_id": "manual__1", "task_state_store": _Store(), "ti": _TI()})
    assert summary["rows"] == 2 and summary["manifest_uri"].startswith(f"s3://{lake}/curated/web/")
