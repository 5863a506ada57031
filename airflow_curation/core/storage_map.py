"""Which fsspec options (credentials, endpoint) a URL is opened with: a typed map prefix -> options.

A key is a protocol (``s3``: every bucket of it) or a URL prefix (``s3://raw``, ``s3://lake/web``); the
options of every key that is a prefix of a URL apply, the longest last (it wins a conflict): a protocol-wide
endpoint plus a key per bucket is two entries.

Where it comes from: an Airflow process builds one from a ``curation`` connection (hooks/curation.py) and
puts it *in effect* for one task, sensor poke or trigger with :func:`using` (a context variable: two
triggers in one triggerer never see each other's options, and nothing outlives the block). A job process
reads its environment once (:meth:`StorageMap.from_env`), which the backend filled from the same map
(:meth:`StorageMap.to_env`): that is the only place the environment is read.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from airflow_curation.core.credentials import STORAGE_OPTIONS_PREFIX

T = TypeVar("T")
# One variable per protocol (``CURATION_STORAGE_OPTIONS_S3``: every bucket), and one for narrower prefixes.
PREFIXES_ENV = f"{STORAGE_OPTIONS_PREFIX}PREFIXES"
# Where the options were configured, as an error should name it (not a secret).
SOURCE_ENV = "CURATION_STORAGE_SOURCE"
_ENV_NAMES = (STORAGE_OPTIONS_PREFIX, SOURCE_ENV)
ENV_SOURCE = f"the job's environment ({STORAGE_OPTIONS_PREFIX}<PROTOCOL> or {PREFIXES_ENV})"


def protocol_of(url: str) -> str:
    return url.split("://", 1)[0] if "://" in url else "file"


def normalize_key(key: str) -> str:
    """``s3`` and ``s3://`` -> ``s3://``; ``s3://b/x/`` -> ``s3://b/x``."""
    if "://" not in key:
        return f"{key.rstrip(':')}://"
    stripped = key.rstrip("/")
    return stripped if not stripped.endswith(":") else stripped + "//"


def _covers(key: str, url: str) -> bool:
    if key.endswith("://"):
        return url.startswith(key) or (key == "file://" and "://" not in url)
    return url == key or url.startswith(key + "/")


@dataclass(frozen=True)
class StorageMap:
    """fsspec options by protocol or URL prefix.

    :param entries: ``{key: options}``; keys as in :func:`normalize_key` (normalized here).
    :param source: where these options were configured, in words an error can name
        (``connection 'curation_default' (extra storage_options)``).
    """

    entries: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    source: str = ""

    def __post_init__(self) -> None:
        norm = {normalize_key(k): dict(v) for k, v in self.entries.items()}
        object.__setattr__(self, "entries", norm)

    def __bool__(self) -> bool:
        return bool(self.entries)

    def __repr__(self) -> str:  # options hold secrets: only the keys
        return f"StorageMap({sorted(self.entries)}, source={self.source!r})"

    def keys_for(self, url: str) -> list[str]:
        """The keys that apply to ``url``, shortest first."""
        return sorted((k for k in self.entries if _covers(k, url)), key=len)

    def resolve(self, url: str) -> dict[str, Any]:
        """The options for ``url``: every applying entry, the longest last."""
        out: dict[str, Any] = {}
        for key in self.keys_for(url):
            out.update(self.entries[key])
        return out

    def over(self, base: StorageMap) -> StorageMap:
        """This map layered over ``base``: an entry of both gets both options, this one's winning."""
        merged = {k: dict(v) for k, v in base.entries.items()}
        for k, v in self.entries.items():
            merged[k] = {**merged.get(k, {}), **v}
        return StorageMap(merged, self.source or base.source)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> StorageMap:
        """What a job process was given: ``CURATION_STORAGE_OPTIONS_<PROTOCOL>`` (JSON options) and
        ``CURATION_STORAGE_OPTIONS_PREFIXES`` (JSON ``{prefix: options}``)."""
        env = os.environ if environ is None else environ
        entries: dict[str, dict[str, Any]] = {}
        for name, value in env.items():
            if name.startswith(STORAGE_OPTIONS_PREFIX) and name != PREFIXES_ENV and value:
                entries[name[len(STORAGE_OPTIONS_PREFIX) :].lower()] = json.loads(value)
        raw = env.get(PREFIXES_ENV)
        for key, options in (json.loads(raw) if raw else {}).items():
            entries[key] = {**entries.get(key, {}), **options}
        return cls(entries, env.get(SOURCE_ENV) or ENV_SOURCE)

    def to_env(self) -> dict[str, str]:
        """The environment that gives a job process this map (credentials: see core/credentials.py)."""
        env: dict[str, str] = {}
        prefixes = {}
        for key, options in self.entries.items():
            if key.endswith("://"):
                env[f"{STORAGE_OPTIONS_PREFIX}{key[:-3].upper()}"] = json.dumps(options)
            else:
                prefixes[key] = options
        if prefixes:
            env[PREFIXES_ENV] = json.dumps(prefixes)
        if env and self.source:
            env[SOURCE_ENV] = self.source
        return env


_CURRENT: contextvars.ContextVar[StorageMap | None] = contextvars.ContextVar("curation_storage_map", default=None)


@functools.lru_cache(maxsize=8)
def _env_map(items: tuple[tuple[str, str], ...]) -> StorageMap:
    return StorageMap.from_env(dict(items))


def current() -> StorageMap:
    """The map in effect here: the one :func:`using` set for this task or trigger, over the environment's."""
    env = _env_map(tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(_ENV_NAMES))))
    active = _CURRENT.get()
    return active.over(env) if active else env


@contextlib.contextmanager
def using(storage_map: StorageMap | None) -> Iterator[StorageMap]:
    """Put ``storage_map`` in effect for this block, in this context only (an asyncio task, or a thread
    started with the context copied: ``asyncio.to_thread`` does). ``None`` or empty: nothing changes."""
    if not storage_map:
        yield current()
        return
    before = _CURRENT.get()
    token = _CURRENT.set(storage_map)
    try:
        yield current()
    finally:
        try:
            _CURRENT.reset(token)
        except ValueError:  # closed from another context (an async generator finalized elsewhere)
            _CURRENT.set(before)


def carried(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` with the map in effect here, for a thread pool's threads (which start with none)."""
    active = _CURRENT.get()

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> T:
        with using(active):
            return fn(*args, **kwargs)

    return run
