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

import hashlib
import os
import re
from dataclasses import dataclass
from datetime import date, datetime, timezone
from typing import Any

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


_RUN_KIND = re.compile(r"^([a-z_]+?)__")
# Run types of which Airflow makes at most one run per logical date (a backfill reruns a date's run in place).
_ONE_PER_DATE = ("scheduled", "backfill")


def curation_run_id(
    airflow_run_id: str, snapshot: str | None, *, run_type: Any = None, logical_date: Any = None
) -> str:
    """The run id a user sees (manifest folder, report, dataset card): the snapshot the run curates, then how
    Airflow started it, e.g. ``2026-11-30__scheduled`` or ``2026-11-30__backfill``, not the trigger time
    (Airflow's own ids carry the time the run was due: a daily run of 2026-11-30 is ``scheduled__2026-12-01...``).

    Unique per Airflow run and the same on every retry or clear of it (a rerun resumes in the same folder):
    the short form is only for the one run of its kind whose logical date is the snapshot's midnight (UTC),
    with an id Airflow made; any other run of the snapshot (a manual trigger, an hourly schedule, another date naming this snapshot)
    adds a digest of its Airflow run id: ``2026-11-30__manual-1a2b3c4d``.

    :param airflow_run_id: the Airflow run id.
    :param snapshot: the snapshot the run writes; None or empty: the Airflow run id, made path-safe.
    :param run_type: the run's type (``scheduled``, ``backfill``, ``manual``...); default read from the id.
    :param logical_date: the run's logical date (a datetime or ISO text); None: a digest is added.
    """
    if not snapshot:
        return sanitize_run_id(airflow_run_id)
    found = _RUN_KIND.match(airflow_run_id)
    kind = str(getattr(run_type, "value", run_type) or (found.group(1) if found else "run"))
    made_by_airflow = airflow_run_id.startswith(f"{kind}__")  # an id given through the API may repeat
    if kind in _ONE_PER_DATE and made_by_airflow and _is_midnight_of(logical_date, snapshot):
        return safe_name(f"{snapshot}__{kind}", "run id")
    digest = hashlib.sha256(airflow_run_id.encode()).hexdigest()[:8]
    return safe_name(f"{snapshot}__{sanitize_run_id(kind)}-{digest}", "run id")


def _is_midnight_of(logical_date: Any, snapshot: str) -> bool:
    """Whether ``logical_date`` is 00:00 UTC of the day ``snapshot`` names (False when it names none)."""
    try:
        day = date.fromisoformat(snapshot)
        when = logical_date if isinstance(logical_date, datetime) else datetime.fromisoformat(str(logical_date))
    except ValueError:
        return False
    if when.tzinfo is None:
        return False
    return when.astimezone(timezone.utc) == datetime.combine(day, datetime.min.time(), timezone.utc)
