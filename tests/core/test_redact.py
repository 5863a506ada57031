"""Error text is bounded and scrubbed before it reaches manifests, failure records, reports and logs."""

from __future__ import annotations

import json
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_curation.core import storage
from airflow_curation.core.redact import LIMIT, scrub


def test_an_environment_block_is_masked():
    environ = "PATH=/usr/bin\0HOME=/root\0AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG\0LANG=C.UTF-8"
    out = scrub(f"Could not convert string '{environ}' to INT32")
    assert "wJalrXUtnFEMI" not in out and "/root" not in out and "\0" not in out
    assert out.startswith("Could not convert string 'PATH=*** HOME=***")


def test_secret_named_values_and_aws_key_ids_are_masked():
    out = scrub(
        "options {'key': 'AKIAIOSFODNN7EXAMPLE', 'secret': 'hunter2hunter2', 'endpoint_url': "
        "'http://127.0.0.1:9000'} token=abc.def password: pw1234567"
    )
    for secret in ("AKIAIOSFODNN7EXAMPLE", "hunter2hunter2", "abc.def", "pw1234567"):
        assert secret not in out
    assert "http://127.0.0.1:9000" in out


def test_values_of_secret_env_vars_and_storage_options_are_masked(monkeypatch):
    monkeypatch.setenv("MY_API_TOKEN", "plain-looking-value")
    monkeypatch.setenv(
        "CURATION_STORAGE_OPTIONS_S3",
        json.dumps(
            {"key": "id-in-options", "secret": "s3cret-in-options", "client_kwargs": {"region_name": "us-east-1"}}
        ),
    )
    with storage.using(storage.StorageMap({"gs://bucket/lake": {"token": "set-in-process-token"}})):
        out = scrub("saw plain-looking-value, id-in-options, s3cret-in-options and set-in-process-token in us-east-1")
    assert out == "saw ***, ***, *** and *** in us-east-1"


def test_short_passwords_of_connections_are_masked(monkeypatch):
    """A connection's 5-character password is masked, whether the connection is a URI (an Airflow
    connection in the environment, percent-encoded), JSON, or storage options in effect in process."""
    monkeypatch.setenv("AIRFLOW_CONN_WAREHOUSE", "postgresql://loader:pw%2123@db.internal:5432/lake")
    monkeypatch.setenv("AIRFLOW_CONN_API", json.dumps({"conn_type": "http", "login": "bot", "password": "k3y9z"}))
    with storage.using(storage.StorageMap({"s3://bucket/lake": {"key": "minio", "secret": "hu5ky"}})):
        out = scrub("login as loader with pw!23 failed; api said 'k3y9z' rejected; s3 secret hu5ky (key minio)")
    assert out == "login as loader with *** failed; api said '***' rejected; s3 secret *** (key ***)"


def test_one_and_two_character_secrets_are_not_masked_and_short_ones_only_as_words(monkeypatch):
    """Guard: masking a 1-character password everywhere would garble every log; a 3-7 character one is
    masked where it stands alone, not inside a longer name."""
    monkeypatch.setenv("TINY_PASSWORD", "a")
    monkeypatch.setenv("DB_PASSWORD", "airflow")
    out = scrub("a user of airflow_curation logged in with airflow, as a test")
    assert out == "a user of airflow_curation logged in with ***, as a test"


def test_long_opaque_tokens_go_paths_and_names_stay():
    fp = "3fa85f6457174562b3fc2c963f66afa63fa85f6457174562b3fc2c963f66afa6"
    path = "/tmp/pytest-of-root/pytest-23/test_a_failed_unit_fails_its_group_0/flag"
    out = scrub(f"fingerprint {fp} in {path} of manual__2026-11-21T00:00:00+00:00")
    assert fp not in out and path in out and "manual__2026-11-21T00:00:00+00:00" in out


def test_text_is_bounded():
    out = scrub("x" * 10_000)
    assert len(out) < LIMIT + 60 and out.endswith("[9500 more characters cut]")
    assert scrub("x" * 10_000, limit=None) == "x" * 10_000
    assert scrub("ValueError: short") == "ValueError: short"


def test_a_message_echoing_a_whole_document_is_scrubbed_in_linear_time():
    """A failed cast can echo a document: the secret-pair pattern re-scanned a run of letters from each of
    its positions (O(n^2): hours on megabytes), and every character was scanned though 500 are kept."""
    secret = "password=hunter2hunter2"
    text = f"cannot cast {secret} '{'a' * 3_000_000} {secret}' to int64"
    out = scrub(text)
    masked = len("hunter2hunter2") - len("***")  # the first one, in the scanned part
    assert "hunter2" not in out and out.endswith(f"[{len(text) - LIMIT - masked} more characters cut]")
    run = "b" * 200_000  # within the scanned margin, with limit=None: scanned whole, once
    assert scrub(f"{run} token: s3cr3tvalue {run}", limit=None) == f"{run} token: *** {run}"


OLD_SECRET_PAIR = re.compile(
    r"""(?ix)(['"]?)([\w.-]*(?:secret|passw|token|credential|private|api_?key|access_?key)[\w.-]*)\1
    (\s*[:=]\s*)(['"]?)[^\s'",}]+\4"""
)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(list("ab_.-'\" :=}") + ["token", "Passw", "key"]), max_size=30).map("".join))
def test_the_anchored_secret_pair_pattern_masks_what_the_unanchored_one_did(text):
    from airflow_curation.core.redact import _SECRET_PAIR

    assert [m.span() for m in _SECRET_PAIR.finditer(text)] == [m.span() for m in OLD_SECRET_PAIR.finditer(text)]
