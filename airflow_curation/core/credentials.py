"""Which environment variables (and option keys) are credentials: the one definition that every backend
and the log scrubber (:mod:`airflow_curation.core.redact`) use.

A credential reaches a job by reference only (Kubernetes: a Secret read through ``envFrom``), in a
``0600`` file (Slurm: ``secrets.env``), or not at all (Ray: a ``runtime_env`` is readable by anyone who
reaches the dashboard); never literally in a Job spec, a runtime_env, a batch script, a job record or a log.

A variable is a credential when its name

* starts with ``CURATION_STORAGE_OPTIONS_`` (the lake's storage options) or ``AIRFLOW_CONN_`` (an
  Airflow connection: login, password, extras);
* is a known cloud credential (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
  ``GOOGLE_APPLICATION_CREDENTIALS``, ``AZURE_STORAGE_CONNECTION_STRING``...);
* holds one of the words ``SECRET``, ``PASSWORD``/``PASSWD``, ``CREDENTIAL``, ``API_KEY``, ``ACCESS_KEY``,
  ``PRIVATE_KEY``, ``CONNECTION_STRING``, or a whole word ``TOKEN``, ``KEY``, ``PASS``, ``SAS``
  (``HF_TOKEN``, ``AIRFLOW__CORE__FERNET_KEY``, ``AZURE_STORAGE_ACCOUNT_KEY``; not ``TOKENIZERS_PARALLELISM``);

unless it names where a credential lies rather than the credential (a last word ``FILE``, ``PATH``,
``DIR``: ``AWS_WEB_IDENTITY_TOKEN_FILE``) or a public key (``..._PUBLIC_KEY``). Whatever the name, a
value that is a URI with a password (``postgresql://user:pw@host/db``, as in
``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN``) is a credential too. Names are compared case-insensitively,
camelCase split into words (``secretAccessKey`` is ``SECRET_ACCESS_KEY``), so the same test serves the
keys of storage options and of JSON connections.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote

log = logging.getLogger(__name__)

STORAGE_OPTIONS_PREFIX = "CURATION_STORAGE_OPTIONS_"
PREFIXES = (STORAGE_OPTIONS_PREFIX, "AIRFLOW_CONN_")
NAMES = frozenset(
    {
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "AZURE_CLIENT_SECRET",
        "AZURE_STORAGE_KEY",
        "AZURE_STORAGE_ACCOUNT_KEY",
        "AZURE_STORAGE_CONNECTION_STRING",
        "AZURE_STORAGE_SAS_TOKEN",
    }
)
_WORDS = re.compile(r"SECRET|PASSW(?:OR)?D|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CONNECTION_?STRING")
_WHOLE_WORDS = frozenset({"TOKEN", "TOKENS", "KEY", "PASS", "SAS", "APIKEY"})
_NOT_SECRET_LAST = frozenset({"FILE", "PATH", "DIR"})
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
# scheme://user:password@host: the password may be empty of ':' but not of '@' (it ends there).
_URI_PASSWORD = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/:@\s]*:([^@\s/]+)@")

# Shortest value the scrubber masks: masking one or two characters everywhere would garble every log
# (each 'a', each '1') and hides nothing a reader could not guess. Such a value still travels as a
# secret; :func:`warn_unmaskable` says that logs cannot mask it.
MIN_MASKED = 3


def _normalized(name: str) -> str:
    return re.sub(r"[-.\s]", "_", _CAMEL.sub(r"\1_\2", str(name))).upper()


def secret_name(name: str) -> bool:
    """Whether a variable (or an option key) of this name holds a credential."""
    n = _normalized(name)
    if n.startswith(PREFIXES) or n in NAMES:
        return True
    words = [w for w in n.split("_") if w]
    if not words or words[-1] in _NOT_SECRET_LAST or n.endswith("PUBLIC_KEY"):
        return False
    return bool(_WORDS.search(n)) or any(w in _WHOLE_WORDS for w in words)


def uri_password(value: str) -> str | None:
    """The password of a ``scheme://user:password@host`` URI, or None."""
    m = _URI_PASSWORD.match(value)
    return m.group(1) if m else None


def is_secret(name: str, value: Any = "") -> bool:
    """Whether the variable ``name=value`` is a credential (by its name, or a value that is a URI with a
    password)."""
    return secret_name(name) or (isinstance(value, str) and uri_password(value) is not None)


def split(env: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``env`` as (plain variables, credentials)."""
    plain: dict[str, Any] = {}
    secret: dict[str, Any] = {}
    for name, value in env.items():
        (secret if is_secret(name, value) else plain)[name] = value
    return plain, secret


def warn_unmaskable(env: Mapping[str, Any], where: str) -> None:
    """Warn about the credentials of ``env`` that hold a value too short for logs to mask
    (:data:`MIN_MASKED`): they still travel as secrets, but a log that prints one shows it."""
    short = sorted(n for n, v in env.items() if any(0 < len(s) < MIN_MASKED for s in secret_values(n, v)))
    if short:
        log.warning(
            "%s: %s hold%s a credential shorter than %d characters, which logs cannot mask",
            where,
            ", ".join(short),
            "s" if len(short) == 1 else "",
            MIN_MASKED,
        )


def secret_values(name: str, value: Any) -> set[str]:
    """What to mask for the variable ``name=value``: nothing when it is no credential; else the strings of
    a JSON object under credential-named keys (storage options, an Airflow connection as JSON), or the
    whole value, plus the password of a URI (as written and decoded)."""
    if not isinstance(value, str) or not is_secret(name, value):
        return set()
    found: set[str] = set()
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        found.update(option_secrets(parsed))
    else:
        found.add(value)
    for text in [value, *found]:
        password = uri_password(text)
        if password:
            found.update({password, unquote(password)})
    return {s for s in found if s}


def option_secrets(options: Any, secret: bool = False) -> Iterable[str]:
    """String leaves of ``options`` (a dict of storage or connection options) under a credential-named key,
    at any depth, and the passwords of URIs anywhere in it."""
    if isinstance(options, dict):
        for k, v in options.items():
            yield from option_secrets(v, secret or secret_name(str(k)))
    elif isinstance(options, (list, tuple)):
        for v in options:
            yield from option_secrets(v, secret)
    elif isinstance(options, str):
        if secret:
            yield options
        password = uri_password(options)
        if password:
            yield from (password, unquote(password))
