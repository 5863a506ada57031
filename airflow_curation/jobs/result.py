"""The job result: what ``python -m airflow_curation.jobs`` writes when a run, a group or a collect ends.

One schema for all three (``kind``), versioned like the job spec, so every backend, the trigger and the
operator read results the same way.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_curation.core import storage

RESULT_VERSION = 1
KINDS = ("run", "group", "collect")
EXIT_OK, EXIT_STAGE_FAILED, EXIT_BAD_SPEC = 0, 1, 2


@dataclass
class JobResult:
    """:param kind: ``run`` (a whole stage), ``group`` (the contiguous block of units of group ``i`` of ``N``) or ``collect`` (the step after
        every group: manifest, failure budget, ``finalize``).
    :param status: ``succeeded`` or ``failed``.
    :param returncode: the process's exit code (0 done, 1 stage failed, 2 bad spec).
    :param error: why it failed (secrets scrubbed).
    :param group: ``"i/N"`` for a group.
    :param manifest_uri: / :param shards: / :param rows: / :param bytes: the XCom summary.
    :param accounting: / :param fingerprint: the manifest's books and configuration fingerprint.
    :param kernels_compiled: numba kernels the process compiled, not finding them in its cache (each task
        that does pays seconds of CPU: docs/backends/kubernetes.md, *Compiled kernels*).
    """

    kind: str
    status: str
    returncode: int
    error: str = ""
    group: str | None = None
    manifest_uri: str | None = None
    shards: int = 0
    rows: int = 0
    bytes: int = 0
    seconds: float = 0.0
    accounting: dict[str, Any] = field(default_factory=dict)
    fingerprint: str | None = None
    kernels_compiled: int = 0
    result_version: int = RESULT_VERSION

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "JobResult":
        if d.get("result_version") != RESULT_VERSION:
            raise ValueError(
                f"job result version {d.get('result_version')!r} not supported (expected {RESULT_VERSION})"
            )
        if d.get("kind") not in KINDS or d.get("status") not in ("succeeded", "failed"):
            raise ValueError(f"job result with kind {d.get('kind')!r}, status {d.get('status')!r}")
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})

    def describe(self) -> str:
        """One line for a person: what ended, how, and what it wrote (the job's log ends with the JSON)."""
        what = f"group {self.group}" if self.group else self.kind
        took = f" in {self.seconds:.1f} s" if self.seconds else ""
        if not self.succeeded:
            return f"{what} failed{took} (exit {self.returncode}): {self.error or 'no error recorded'}"
        line = f"{what} succeeded{took}: {self.rows:,} rows in {self.shards:,} shards"
        acc = self.accounting or {}
        if acc:
            gone = {k: sum((acc.get(k) or {}).values()) for k in ("dropped", "quarantined")}
            line += f" (read {acc.get('read', 0):,}, kept {acc.get('kept', 0):,}"
            line += "".join(f", {k} {n:,}" for k, n in gone.items() if n) + ")"
        return line + (f"; manifest {self.manifest_uri}" if self.manifest_uri else "")

    def write(self, uri: str | None) -> None:
        if uri:
            storage.write_json(uri, self.to_dict())

    @classmethod
    def read(cls, uri: str) -> "JobResult | None":
        """The result at ``uri``, or None while there is none (not written yet, or not whole)."""
        try:
            data = storage.read_json(uri)
        except (FileNotFoundError, json.JSONDecodeError):  # not written yet, or not whole yet
            return None
        return cls.from_dict(data)
