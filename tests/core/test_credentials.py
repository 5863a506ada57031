"""The one definition of a credential (what every backend keeps out of job records, what logs mask)."""

from __future__ import annotations

import json

import pytest

from airflow_curation.core import credentials

SECRET = [
    "CURATION_STORAGE_OPTIONS_S3",
    "curation_storage_options_gcs",
    "AIRFLOW_CONN_WAREHOUSE",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_CLIENT_SECRET",
    "HF_TOKEN",
    "OPENAI_API_KEY",
    "MINIO_ROOT_PASSWORD",
    "AIRFLOW__CORE__FERNET_KEY",
    "AIRFLOW__API_AUTH__JWT_SECRET",
    "SMTP_PASS",
    "secretAccessKey",  # camelCase keys (Helm values, JSON connections)
    "sas_token",
    "account_key",
    "password",
]
PLAIN = [
    "PATH",
    "PWD",
    "HOME",
    "TOKENIZERS_PARALLELISM",  # a TOKEN inside a word is no token
    "RAY_AUTH_MODE",
    "XDG_SESSION_TYPE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",  # where a credential lies, not the credential
    "AWS_SHARED_CREDENTIALS_FILE",
    "SSH_PUBLIC_KEY",
    "CURATION_LOG_LEVEL",
    "endpoint_url",
    "client_kwargs",
]


@pytest.mark.parametrize("name", SECRET)
def test_credential_names(name):
    assert credentials.secret_name(name)


@pytest.mark.parametrize("name", PLAIN)
def test_plain_names(name):
    assert not credentials.secret_name(name)


def test_a_uri_with_a_password_is_a_credential_whatever_its_name():
    uri = "postgresql://airflow:p%40ss@pg:5432/airflow"
    plain, secret = credentials.split({"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": uri, "LAKE": "s3://bucket/lake"})
    assert secret == {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": uri} and plain == {"LAKE": "s3://bucket/lake"}
    assert credentials.secret_values("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", uri) == {uri, "p%40ss", "p@ss"}


def test_json_options_mask_their_credential_leaves_only():
    options = json.dumps({"key": "AKIA1", "secret": "s3cr3t", "client_kwargs": {"endpoint_url": "http://s3:9000"}})
    assert credentials.secret_values("CURATION_STORAGE_OPTIONS_S3", options) == {"AKIA1", "s3cr3t"}
    assert credentials.secret_values("CURATION_LOG_LEVEL", "INFO") == set()
