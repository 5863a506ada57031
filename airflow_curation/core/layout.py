"""Where everything lives in the lake: one dataset (and snapshot) under one root URL.

```
<lake>/<dataset>[/snapshot=<date>]/
    shards/<shard>.parquet                      source shards (never rewritten)
    attrs/<stage>/<fingerprint>/<shard>.parquet additive columns keyed by id, per configuration
    packed/<fingerprint>/<shard>.parquet        tokenize: packed training sequences
    _checkpoints/<stage>/<fingerprint>/<unit>.json
    _manifests/<run_id>/<stage>.json
    _quarantine/<stage>/<unit>.parquet
    _jobs/<run_id>/<stage>/...                  job specs, logs, results of the backends
```
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from airflow_curation.core import storage
from airflow_curation.core.checkpoint import CheckpointStore

_SAFE = re.compile(r"^[A-Za-z0-9_.=:+@-]+$")


def safe_name(value: str, what: str) -> str:
    """Refuse names that could escape their folder or break a URL."""
    if not value or not _SAFE.fullmatch(value) or value in (".", ".."):
        raise ValueError(f"invalid {what} {value!r}: use letters, digits and _ . = : + @ - only")
    return value


@dataclass(frozen=True)
class Lake:
    root: str
    dataset: str
    snapshot: str | None = None

    def __post_init__(self) -> None:
        if storage.is_local(self.root):
            # Manifests store this root: a relative one would point elsewhere for every other reader
            # (a worker, the api-server, a rerun from another folder).
            root = self.root.split("://", 1)[-1]
            object.__setattr__(self, "root", os.path.abspath(os.path.expanduser(root)))
        safe_name(self.dataset, "dataset name")
        if self.snapshot is not None:
            safe_name(self.snapshot, "snapshot")

    @property
    def base(self) -> str:
        base = storage.join(self.root, self.dataset)
        return storage.join(base, f"snapshot={self.snapshot}") if self.snapshot else base

    def path(self, *parts: str) -> str:
        return storage.join(self.base, *parts)

    def shard_uri(self, shard_id: str) -> str:
        return self.path("shards", f"{shard_id}.parquet")

    def attrs_uri(self, stage: str, shard_id: str, fingerprint: str | None = None) -> str:
        """A stage's additive columns for one shard. Stages pass their config fingerprint, so that
        outputs of different configurations never share a path (a rerun with another preset cannot
        find, and trust, the files of the previous one)."""
        if fingerprint:
            return self.path("attrs", stage, safe_name(fingerprint, "fingerprint"), f"{shard_id}.parquet")
        return self.path("attrs", stage, f"{shard_id}.parquet")

    def checkpoint_dir(self, stage: str, fingerprint: str) -> str:
        return self.path("_checkpoints", stage, fingerprint)

    def checkpoints(self, stage: str, fingerprint: str) -> CheckpointStore:
        """The checkpoint records of one stage configuration, their URIs relative to this lake's root."""
        return CheckpointStore(self.checkpoint_dir(stage, fingerprint), root=self.root)

    def manifest_uri(self, run_id: str, stage: str) -> str:
        return self.path("_manifests", safe_name(run_id, "run id"), f"{stage}.json")

    def quarantine_uri(self, stage: str, unit_id: str) -> str:
        return self.path("_quarantine", stage, f"{unit_id}.parquet")

    def jobs_dir(self, run_id: str, stage: str) -> str:
        return self.path("_jobs", safe_name(run_id, "run id"), stage)

    def to_dict(self) -> dict:
        return {"root": self.root, "dataset": self.dataset, "snapshot": self.snapshot}

    @classmethod
    def from_dict(cls, d: dict) -> "Lake":
        return cls(root=d["root"], dataset=d["dataset"], snapshot=d.get("snapshot"))


def sanitize_run_id(run_id: str) -> str:
    """Airflow run ids contain characters such as ``:`` and ``+``; keep them readable but path-safe."""
    return re.sub(r"[^A-Za-z0-9_.=:+@-]", "_", run_id)
