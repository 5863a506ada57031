"""The job spec: the one contract between Airflow, every backend and the stage code.

A job spec is a small JSON document. Airflow writes it, a backend ships it (a subprocess argument,
an sbatch script, a Kubernetes Job), and ``python -m airflow_curation.jobs run SPEC.json`` runs it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_curation.core import storage
from airflow_curation.core.layout import Lake

SPEC_VERSION = 1


@dataclass
class JobSpec:
    """:param stage: stage name (``ingest``...).
    :param lake: ``{"root", "dataset", "snapshot"}``.
    :param run_id: names the manifest, ``<lake>/_manifests/<run_id>/<stage>.json``.
    :param config: the stage's settings.
    """

    stage: str
    lake: dict[str, Any]
    run_id: str
    config: dict[str, Any] = field(default_factory=dict)
    spec_version: int = SPEC_VERSION

    @property
    def lake_obj(self) -> Lake:
        return Lake.from_dict(self.lake)

    @property
    def manifest_uri(self) -> str:
        return self.lake_obj.manifest_uri(self.run_id, self.stage)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "JobSpec":
        if d.get("spec_version") != SPEC_VERSION:
            raise ValueError(f"job spec version {d.get('spec_version')!r} not supported (expected {SPEC_VERSION})")
        missing = [k for k in ("stage", "lake", "run_id") if k not in d]
        if missing:
            raise ValueError(f"job spec lacks {missing}")
        return cls(**{k: d[k] for k in ("stage", "lake", "run_id", "config", "spec_version") if k in d})

    @classmethod
    def read(cls, uri: str) -> "JobSpec":
        return cls.from_dict(storage.read_json(uri))
