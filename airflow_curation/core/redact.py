"""Bounded, scrubbed error text for what lands in manifests, failure records, reports and logs.

Errors can carry what a process should never publish: a failed cast echoes the string it could not
convert (a line of ``/proc/self/environ``, say), a client error echoes its options. ``scrub`` cuts
the text to a bound and masks what looks like a secret: the values of the credentials in the
environment and of credential-named storage options (:mod:`airflow_curation.core.credentials` says
which), ``NAME=value`` pairs as in an environment block, ``key: value`` pairs whose key names a secret,
AWS access key ids, and long opaque tokens.

Length: a known secret value is masked whatever its length from
:data:`~airflow_curation.core.credentials.MIN_MASKED` (3) characters on; one of 3 to 7 characters only
where it stands as a word of its own (so that a password ``airflow`` does not garble
``airflow_curation``); one or two characters are never masked (that would garble every log), and the
backends warn about such a credential when they launch a job with it.
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterable

from airflow_curation.core import credentials

LIMIT = 500  # one error message
TRACEBACK_LIMIT = 8000  # a traceback, or a summary of many checks
SCAN_MARGIN = 65536  # characters past the limit that are scanned for secrets (the rest is cut unread)
MASK = "***"
WHOLE_BELOW = 8  # a secret shorter than this is masked only as a word of its own (see mask)

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
AWS_KEY_ID = re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|APKA|AROA)[A-Z0-9]{16}\b")
# An environment block: NAME=value (what /proc/self/environ holds, one after the other).
_ENV_PAIR = re.compile(r"\b([A-Z][A-Z0-9_]{2,})=[^\s'\"]*")
# key=value, key: value, 'key': 'value' where the key names a secret.
# (A key starts where its run of name characters starts, and ends at most 64 past its secret word:
# unanchored, every position of a long run of letters re-scanned the run, O(n^2) on a message that
# echoes a document.)
_SECRET_PAIR = re.compile(
    r"""(?ix)(['"]?)(?<![\w.-])([\w.-]*(?:secret|passw|token|credential|private|api_?key|access_?key)[\w.-]{0,64})\1
    (\s*[:=]\s*)(['"]?)[^\s'",}]+\4"""
)
# Long opaque tokens (hex, base64 pieces): 32+ letters and digits, both present, unbroken by the
# '/', '_', '-' and '.' that separate the words of paths and names (those survive).
_TOKEN = re.compile(r"(?<![A-Za-z0-9+=])(?=[A-Za-z0-9+=]*\d)(?=[A-Za-z0-9+=]*[A-Za-z])[A-Za-z0-9+=]{32,}")


def scrub(text: Any, limit: int | None = LIMIT) -> str:
    """``text`` with secrets masked, cut to ``limit`` characters (None: no cut)."""
    text = str(text)
    # An error can echo a whole document (a failed cast, a client error): only what can reach the output
    # is scanned, with room for the masks to shorten it (a mask is 3 characters, a secret usually more).
    if limit is not None and len(text) > limit + SCAN_MARGIN:
        unscanned, text = len(text) - limit - SCAN_MARGIN, text[: limit + SCAN_MARGIN]
    else:
        unscanned = 0
    s = mask(_CONTROL.sub(" ", text), known_secrets())
    s = AWS_KEY_ID.sub(MASK, s)
    s = _ENV_PAIR.sub(lambda m: f"{m.group(1)}={MASK}", s)
    s = _SECRET_PAIR.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(1)}{m.group(3)}{m.group(4)}{MASK}{m.group(4)}", s)
    s = _TOKEN.sub(MASK, s)
    if limit is not None and len(s) + unscanned > limit:
        s = f"{s[:limit]}... [{len(s) - limit + unscanned} more characters cut]"
    return s


def mask(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every one of ``secrets`` of :data:`~airflow_curation.core.credentials.MIN_MASKED`
    characters or more replaced by :data:`MASK`. One of fewer than :data:`WHOLE_BELOW` characters is
    masked where it stands as a word of its own (not inside a longer word or name: a password
    ``airflow`` must not turn ``airflow_curation`` into ``***_curation``); a longer one wherever it is."""
    values = sorted({v for v in secrets if len(v) >= credentials.MIN_MASKED}, key=len, reverse=True)
    for value in (v for v in values if len(v) >= WHOLE_BELOW):
        text = text.replace(value, MASK)
    short = [re.escape(v) for v in values if len(v) < WHOLE_BELOW]
    if short:
        text = re.sub(rf"(?<![\w])(?:{'|'.join(short)})(?![\w])", MASK, text)
    return text


def known_secrets() -> set[str]:
    """Values this process holds that must never be published: those of the credentials in its
    environment (:mod:`airflow_curation.core.credentials`: storage options, connections, cloud keys,
    tokens, passwords, URIs with a password) and of every credential-named storage option in effect here
    (:func:`airflow_curation.core.storage_map.using`)."""
    from airflow_curation.core import storage_map

    found: set[str] = set()
    for name, value in os.environ.items():
        found |= credentials.secret_values(name, value)
    for options in storage_map.current().entries.values():
        found.update(credentials.option_secrets(options))
    return found
