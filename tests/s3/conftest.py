"""A real S3 API on loopback for the whole session: ``moto_server`` on a free 127.0.0.1 port.

Tests get a fresh bucket each (``s3_bucket``) with the storage layer pointed at the server, in this
process and in job subprocesses alike: through the environment (``CURATION_STORAGE_OPTIONS_S3``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from process_helpers import free_port

KEY, SECRET, REGION = "testing", "testing", "us-east-1"


def _moto_command(port: int) -> list[str]:
    exe = Path(sys.executable).with_name("moto_server")
    if not exe.exists():
        found = shutil.which("moto_server")
        if not found:
            raise RuntimeError("moto_server not found: pip install 'moto[server]' (it is in the dev extra)")
        exe = Path(found)
    return [str(exe), "-H", "127.0.0.1", "-p", str(port)]


def start_moto(log_path: Path) -> tuple[subprocess.Popen, str]:
    """A moto S3 server on a free loopback port: (process, endpoint URL)."""
    last = ""
    for _ in range(3):  # the free port can be taken between probing and binding: try another
        port = free_port()
        log = open(log_path, "ab")
        proc = subprocess.Popen(
            _moto_command(port),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "MOTO_PORT": str(port)},
        )
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                urllib.request.urlopen(f"{url}/moto-api/", timeout=2).read()
                return proc, url
            except OSError:
                time.sleep(0.2)
        proc.kill()
        proc.wait()
        last = log_path.read_text(errors="replace")[-2000:]
    raise RuntimeError(f"moto_server did not start; its log:\n{last}")


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory):
    """``{"endpoint_url", "key", "secret", "region"}`` of a moto S3 server that lives for the session."""
    proc, url = start_moto(tmp_path_factory.mktemp("moto") / "moto_server.log")
    try:
        yield {"endpoint_url": url, "key": KEY, "secret": SECRET, "region": REGION}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def storage_options(ep: dict) -> dict:
    """fsspec/s3fs options for the server (what users put in CURATION_STORAGE_OPTIONS_S3)."""
    return {
        "key": ep["key"],
        "secret": ep["secret"],
        "endpoint_url": ep["endpoint_url"],
        "client_kwargs": {"region_name": ep["region"]},
    }


@pytest.fixture(scope="session")
def second_s3_endpoint(tmp_path_factory):
    """The endpoint URL of a second moto S3 server, for the session: buckets on a server of their own."""
    proc, url = start_moto(tmp_path_factory.mktemp("moto-second") / "moto_server.log")
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def s3_bucket(s3_endpoint, monkeypatch):
    """A new empty bucket; the storage layer (here and in subprocesses) is configured for the server."""
    import boto3

    name = f"test-{uuid.uuid4().hex[:12]}"
    # boto3, not s3fs.mkdir: s3fs sends a LocationConstraint that moto refuses for us-east-1.
    boto3.client(
        "s3",
        endpoint_url=s3_endpoint["endpoint_url"],
        aws_access_key_id=KEY,
        aws_secret_access_key=SECRET,
        region_name=REGION,
    ).create_bucket(Bucket=name)
    monkeypatch.setenv("CURATION_STORAGE_OPTIONS_S3", json.dumps(storage_options(s3_endpoint)))
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var, raising=False)  # only the options above may be used
    return name


@pytest.fixture
def s3_client(s3_endpoint):
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=s3_endpoint["endpoint_url"],
        aws_access_key_id=KEY,
        aws_secret_access_key=SECRET,
        region_name=REGION,
    )
