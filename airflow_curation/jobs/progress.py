"""How far a stage run has got, from its manifest and checkpoint records: the one reading of progress
used by the stage runner (the failure budget), the checkpoint sensor and trigger, the jobs CLI
(``reopen``) and every backend (unfinished groups, "k/N units checkpointed").

The checkpoint records are the truth: a record with the manifest's fingerprint and the unit's input
checksum means that unit's outputs are complete, whatever the job's exit code says. Once a run has ended,
its final manifest is its own reading of those records, and its head's counts stand for them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from airflow_curation.core import storage
from airflow_curation.core.accounting import allowed_failures  # noqa: F401 - re-exported for the gates
from airflow_curation.core.checkpoint import CheckpointStore
from airflow_curation.core.integrity import chain_problem, input_manifest_uris
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest, ManifestError, ManifestHead, UnitEntry, group_of
from airflow_curation.core.tally import TallyReader, drop_failed

ENDED = ("done", "skipped", "failed")  # unit statuses of a run's final reading
_SUMS = ("rows", "bytes", "shards")


def _store(manifest: Manifest | ManifestHead) -> CheckpointStore:
    return Lake.from_dict(manifest.lake).checkpoints(manifest.stage, manifest.fingerprint)


def _read(manifest_uri: str, head: bool = False) -> Manifest | ManifestHead | None:
    """The manifest (or only its head), None while it is not written yet."""
    try:
        return ManifestHead.read(manifest_uri) if head else Manifest.read(manifest_uri)
    except ManifestError as e:
        if "not found" not in str(e):
            raise
        return None


def checkpointed(manifest_uri: str) -> tuple[int, int]:
    """(units with a checkpoint record, units planned); (0, 0) before the run has planned."""
    head = _read(manifest_uri, head=True)
    if head is None:
        return 0, 0
    done, _ = _store(head).scan()
    return len(done & {u["unit_id"] for u in head.unit_dicts()}), head.unit_count


def unfinished_groups(manifest_uri: str, groups: int) -> list[int]:
    """Groups (of ``groups``) with a unit that lacks a checkpoint; all of them before the run has planned."""
    head = _read(manifest_uri, head=True)
    if head is None:
        return list(range(groups))
    done, _ = _store(head).scan()
    units = head.unit_dicts()
    return sorted({group_of(i, groups, len(units)) for i, u in enumerate(units) if u["unit_id"] not in done})


def reopen(manifest_uri: str) -> dict[str, str]:
    """Before a relaunch: mark the manifest planned again and clear the failure markers of the units
    without a checkpoint, so that checkpoint gates wait for the new attempt instead of failing on the
    old one. Returns {unit id: previous error} for the units that will run again.

    Reads the head and the unit pages, never the shard list (the reopened run has none): O(units) once per
    relaunch, not per task."""
    head = _read(manifest_uri, head=True)
    if head is None:
        return {}
    manifest = Manifest._build({**head.data, "units": head.unit_dicts(), "shards": []})
    store = _store(manifest)
    done, failed = store.scan()
    reopened = {}
    for unit in manifest.units:
        if unit.unit_id in done:
            continue
        reopened[unit.unit_id] = unit.error or "not finished"
        unit.status, unit.error = "pending", None
        if unit.unit_id in failed:
            storage.remove(storage.join(store.directory, f"{unit.unit_id}.failed.json"))
    if manifest.tallies:  # before the head says planned: a gate reading it then must not find them
        drop_failed(manifest_uri, set(reopened))
    manifest.status, manifest.accounting, manifest.relaunch = "planned", {}, None
    manifest.write(manifest_uri)
    return reopened


def decline_relaunch(manifest_uri: str, why: str) -> bool:
    """The run's follower will not relaunch it: a failed manifest that said a relaunch was pending says so
    no more, and why (a downstream reader waiting for the reopen then fails at once, naming it). Rewrites the
    head only (its pages stay); a no-op for any other manifest. Returns whether it changed the head."""
    try:
        raw = storage.read_json(manifest_uri)
    except (FileNotFoundError, ValueError):
        return False
    if not isinstance(raw, dict) or raw.get("format_version") in (None, 1) or raw.get("status") != "failed":
        return False
    if not (raw.get("relaunch") or {}).get("pending"):
        return False
    storage.write_json(manifest_uri, {**raw, "relaunch": {**raw["relaunch"], "pending": False, "why": why}})
    return True


@dataclass
class Progress:
    """One look at a manifest's checkpoints."""

    manifest_uri: str
    stage: str = ""
    total: int = 0
    done: int = 0
    failed: int = 0
    allowed_failures: int = 0
    rows: int = 0
    bytes: int = 0
    shards: int = 0
    manifest_status: str = "missing"
    failed_units: list[str] = field(default_factory=list)
    books: str | None = None  # why the run's rows disagree with its upstream manifest's, if they do

    @property
    def over_budget(self) -> bool:
        return self.failed > self.allowed_failures

    @property
    def complete(self) -> bool:
        """Every unit is accounted for (checkpointed, or failed within the budget) and the run has
        written its final manifest: a stage's global step (dedup's components, ingest's clean-up) and
        the collect step of a Slurm array or Kubernetes sweep run after the last unit."""
        return self.manifest_status == "complete" and self.done + self.failed >= self.total and not self.over_budget

    def line(self) -> str:
        if self.manifest_status == "missing":
            return f"waiting for the manifest {self.manifest_uri} (the job has not planned its units yet)"
        return (
            f"{self.stage or '?'}: {self.done}/{self.total} units checkpointed, {self.failed} failed "
            f"(budget {self.allowed_failures}), {self.rows} rows in {self.shards} shards"
        )

    def summary(self) -> dict[str, Any]:
        """What XCom carries: a pointer and counts."""
        return {"manifest_uri": self.manifest_uri, "shards": self.shards, "rows": self.rows, "bytes": self.bytes}


# A run that ended before the gate's first look gets a line per unit up to this many units (one unit page).
FINAL_UNIT_LINES = 64


class CheckpointWatcher:
    """Reads a manifest and its stage's checkpoint folder; remembers verified records between looks.

    :param manifest_uri: the stage run's manifest (written by the job when it plans its units).
    :param max_failed_fraction: failure budget as a fraction of units; ``None``: the one in the
        manifest's config (what the job itself enforces), else 0.
    :param not_before: epoch seconds; a manifest planned before this (an earlier attempt's, about to be
        rewritten by the job just submitted) counts as not written yet.
    """

    # Clocks of the Airflow worker and of the job's machine may differ a little.
    CLOCK_SLACK_S = 5.0

    def __init__(
        self, manifest_uri: str, max_failed_fraction: float | None = None, not_before: float | None = None
    ) -> None:
        self.manifest_uri = manifest_uri
        self.max_failed_fraction = max_failed_fraction
        self.not_before = not_before
        self._verified: dict[str, dict[str, Any]] = {}  # unit id -> record outputs summary
        self._head: ManifestHead | None = None
        self._head_version: tuple | None = None
        self._units: dict[str, UnitEntry] | None = None  # of the planned head, read when first needed
        self._books: str | None = None
        self._books_checked = False
        self._tallies: TallyReader | None = None
        self._failed: dict[str, float] = {}  # unit id -> when its tally said it failed
        self._sums: dict[str, int] = {}
        #: Units verified by the latest :meth:`look` and not before, with their counts (for progress lines).
        self.new_units: dict[str, dict[str, Any]] = {}

    def _check_books(self, head: ManifestHead) -> str | None:
        """Once, for a complete manifest: does it read every row its upstream manifests hand on?"""
        if not self._books_checked:
            upstream_uris = input_manifest_uris(head.config)
            if upstream_uris:
                try:
                    self._books = chain_problem(head, *(ManifestHead.read(u) for u in upstream_uris))
                except ManifestError as e:
                    self._books = f"cannot check its rows against the upstream manifest: {e}"
            self._books_checked = True
        return self._books

    def _load_head(self) -> ManifestHead | None:
        # Only re-read while the run may still change it (planned), and only when the file changed (the
        # job rewrites it once, at the end).
        if self._head is None or self._head.status == "planned":
            version = storage.version(self.manifest_uri)
            if version is not None and version == self._head_version:
                return self._head
            head = _read(self.manifest_uri, head=True)
            if head is None:
                return None
            if self.not_before is not None and head.created_at < self.not_before - self.CLOCK_SLACK_S:
                return None
            self._head, self._head_version, self._units = head, version, None
        return self._head

    def look(self) -> Progress:
        head = self._load_head()
        if head is None:
            return Progress(self.manifest_uri)
        budget = self.max_failed_fraction
        if budget is None:
            budget = float(head.config.get("max_failed_fraction", 0.0) or 0.0)
        statuses = head.unit_statuses
        if head.status != "planned" and sum(statuses.get(s, 0) for s in ENDED) == head.unit_count:
            return self._final(head, budget)
        if head.tallies:
            return self._from_tallies(head, budget)
        if self._units is None:  # the unit pages only, once per manifest version: never its shards
            self._units = {u.unit_id: u for u in head.units()}
        units = self._units
        store = _store(head)
        done_ids, failed_ids = store.scan()
        self.new_units = {}
        for unit_id in done_ids - set(self._verified):
            unit = units.get(unit_id)
            if unit is None:
                continue  # a unit of another run with the same config
            self._verify(store, unit, head.fingerprint)
        failed = []
        for unit_id in sorted(failed_ids & set(units)):
            if unit_id in self._verified:
                continue
            info = store.failure(unit_id)
            # A marker older than this run's plan is from an earlier run, which this run retries.
            if info is not None and float(info.get("at", 0)) >= head.created_at:
                failed.append(unit_id)
        verified = [v for k, v in self._verified.items() if k in units]
        return Progress(
            manifest_uri=self.manifest_uri,
            stage=head.stage,
            total=len(units),
            done=len(verified),
            failed=len(failed),
            allowed_failures=allowed_failures(budget, len(units)),
            rows=sum(v["rows"] for v in verified),
            bytes=sum(v["bytes"] for v in verified),
            shards=sum(v["shards"] for v in verified),
            manifest_status=head.status,
            failed_units=failed,
            books=self._check_books(head) if head.status == "complete" else None,
        )

    def _from_tallies(self, head: ManifestHead, budget: float) -> Progress:
        """A run whose tasks write tallies (``core/tally.py``): the tally files that changed since the last
        look, not a listing of every record and a read of each new one; counts kept from look to look."""
        if self._tallies is None or self._tallies.fingerprint != head.fingerprint:
            self._tallies, self._failed, self._verified = TallyReader(self.manifest_uri, head.fingerprint), {}, {}
            self._sums = dict.fromkeys(_SUMS, 0)
        self.new_units = {}
        for unit_id, entry in self._tallies.look().items():
            old = self._verified.pop(unit_id, None)
            for key in _SUMS if old is not None else ():
                self._sums[key] -= old[key]
            self._failed.pop(unit_id, None)
            if entry.get("status") in ("done", "skipped"):
                counts = {key: int(entry.get(key, 0)) for key in _SUMS}
                self._verified[unit_id] = counts
                for key in _SUMS:
                    self._sums[key] += counts[key]
                if old is None:
                    self.new_units[unit_id] = {**counts, "accounting": entry.get("accounting") or {}}
            elif entry.get("status") == "failed":
                self._failed[unit_id] = float(entry.get("at", 0))
        # A failure before this run's plan is an earlier run's, which this run retries (as with markers).
        failed = sorted(u for u, at in self._failed.items() if at >= head.created_at)
        return Progress(
            manifest_uri=self.manifest_uri,
            stage=head.stage,
            total=head.unit_count,
            done=len(self._verified),
            failed=len(failed),
            allowed_failures=allowed_failures(budget, head.unit_count),
            rows=self._sums["rows"],
            bytes=self._sums["bytes"],
            shards=self._sums["shards"],
            manifest_status=head.status,
            failed_units=failed,
            books=self._check_books(head) if head.status == "complete" else None,
        )

    def _report_units(self, head: ManifestHead) -> None:
        """A small run that ended before this watcher's first look: each unit's progress line all the same
        (its records, at most :data:`FINAL_UNIT_LINES` of them: one unit page), as a look during the run
        would have given them; a larger run's gate says its totals only."""
        store = _store(head)
        for unit in head.units():
            self._verify(store, unit, head.fingerprint)

    def _verify(self, store: CheckpointStore, unit: UnitEntry, fingerprint: str) -> None:
        """Count ``unit`` done (and new since the last look) when its record vouches for its outputs."""
        rec = store.is_done(unit.unit_id, unit.input_checksum, fingerprint)
        if rec is not None:
            self._verified[unit.unit_id] = {
                "rows": sum(o.get("rows", 0) for o in rec.outputs),
                "bytes": sum(o.get("bytes", 0) for o in rec.outputs),
                "shards": len(rec.outputs),
            }
            self.new_units[unit.unit_id] = {**self._verified[unit.unit_id], "accounting": rec.accounting}

    def _final(self, head: ManifestHead, budget: float) -> Progress:
        """A run that has ended and says how every unit ended: its final manifest is its own reading of
        every checkpoint (written by the run, or its collect step, after it verified each record), so the
        head's counts and totals stand for them; a look at 50,000 units reads one small file, not 50,000
        records and the shard list. (A final manifest whose units are not all accounted for is looked at
        record by record, as while the run goes.)"""
        statuses = head.unit_statuses
        self.new_units = {}
        if not self._verified and head.unit_count <= FINAL_UNIT_LINES:
            self._report_units(head)
        return Progress(
            manifest_uri=self.manifest_uri,
            stage=head.stage,
            total=head.unit_count,
            done=statuses.get("done", 0) + statuses.get("skipped", 0),
            failed=statuses.get("failed", 0),
            allowed_failures=allowed_failures(budget, head.unit_count),
            rows=head.rows,
            bytes=head.bytes,
            shards=head.shard_count,
            manifest_status=head.status,
            failed_units=head.failed_units,
            books=self._check_books(head) if head.status == "complete" else None,
        )
