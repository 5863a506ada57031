"""Bounded, scrubbed error text for what lands in manifests, failure records, reports and logs.

Errors can carry what a process should never publish: a failed cast echoes the string it could not
convert (a line of ``/proc/self/environ``, say), a client error echoes its options. ``scrub`` cuts
the text to a bound and masks what looks like a secret: the values of secret-named environment
variables and storage options, ``NAME=value`` pairs as in an environment block, ``key: value``
pairs whose key names a secret, AWS access key ids, and long opaque tokens.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Iterable

LIMIT = 500  # one error message
TRACEBACK_LIMIT = 8000  # a traceback, or a summary of many checks
MASK = "***"

_SECRET_NAME = re.compile(
    r"secret|passw|token|credential|private|api_?key|access_?key|auth|session|(^|_)key($|_)", re.I
)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
AWS_KEY_ID = re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|APKA|AROA)[A-Z0-9]{16}\b")
# An environment block: NAME=value (what /proc/self/environ holds, one after the other).
_ENV_PAIR = re.compile(r"\b([A-Z][A-Z0-9_]{2,})=[^\s'\"]*")
# key=value, key: value, 'key': 'value' where the key names a secret.
_SECRET_PAIR = re.compile(
    r"""(?ix)(['"]?)([\w.-]*(?:secret|passw|token|credential|private|api_?key|access_?key)[\w.-]*)\1
    (\s*[:=]\s*)(['"]?)[^\s'",}]+\4"""
)
# Long opaque tokens (hex, base64 pieces): 32+ letters and digits, both present, unbroken by the
# '/', '_', '-' and '.' that separate the words of paths and names (those survive).
_TOKEN = re.compile(r"(?<![A-Za-z0-9+=])(?=[A-Za-z0-9+=]*\d)(?=[A-Za-z0-9+=]*[A-Za-z])[A-Za-z0-9+=]{32,}")


def scrub(text: Any, limit: int | None = LIMIT) -> str:
    """``text`` with secrets masked, cut to ``limit`` characters (None: no cut)."""
    s = _CONTROL.sub(" ", str(text))
    for value in sorted(known_secrets(), key=len, reverse=True):
        s = s.replace(value, MASK)
    s = AWS_KEY_ID.sub(MASK, s)
    s = _ENV_PAIR.sub(lambda m: f"{m.group(1)}={MASK}", s)
    s = _SECRET_PAIR.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(1)}{m.group(3)}{m.group(4)}{MASK}{m.group(4)}", s)
    s = _TOKEN.sub(MASK, s)
    if limit is not None and len(s) > limit:
        s = f"{s[:limit]}... [{len(s) - limit} more characters cut]"
    return s


def known_secrets(min_len: int = 8) -> set[str]:
    """Values this process holds that must never be published: secret-named environment variables
    and every secret-named storage option (from ``CURATION_STORAGE_OPTIONS_*`` or registered in process
    for a lake, :func:`airflow_curation.core.storage.register_options`)."""
    from airflow_curation.core import storage

    found: set[str] = set()
    for name, value in os.environ.items():
        if name.startswith(storage.ENV_PREFIX):
            try:
                found.update(_secret_values(json.loads(value)))
            except ValueError:
                found.add(value)
        elif _SECRET_NAME.search(name):
            found.add(value)
    for options in storage.registered_options().values():
        found.update(_secret_values(options))
    return {v for v in found if len(v) >= min_len}


def _secret_values(options: Any, secret: bool = False) -> Iterable[str]:
    """String leaves of ``options`` under a secret-named key (at any depth)."""
    if isinstance(options, dict):
        for k, v in options.items():
            yield from _secret_values(v, secret or bool(_SECRET_NAME.search(str(k))))
    elif isinstance(options, (list, tuple)):
        for v in options:
            yield from _secret_values(v, secret)
    elif secret and isinstance(options, str):
        yield options
