"""Ingest's plan, listed once per run: what lets one task of an array read only its own units.

Ingest's units group consecutive input files, so where a unit ends depends on every file: each task of an
array used to list every input (O(tasks x files) requests at 50 TB). Now the first task of a run to take
``_locks/ingest.plan.lease`` lists the inputs and groups them; the others wait while it lives (a dead
holder's lease is taken over), as for mix's tally and dedup's global phase. The plan is written as a paged
manifest (``core/manifest.py``: one unit a line, pages checksummed in the head) named by its content,
``ingest/plans/<time>-<key>.json``, so a task reads only the pages of its block (:func:`group_range`), and a
run with the same inputs and settings finds the plan it would write already there. Which plan a run follows
is named by a small pointer per run (its id, fingerprint, inputs and ``min_units``):
``ingest/plans/runs/<scope>.json``; relaunched tasks of the run read the same plan.

Only the holder lists: a task that finds the run's pointer does not list at all. A changed input set is
found by the listings that happen anyway once per run: the holder's (a new run, a rerun after a complete
one, whose collect step removed the pointer, or a new launch of the same run id after a killed one:
``Backend.submit`` calls ``IngestStage.new_launch``, which removes the run's pointer), and the collect
step's, which lists as a whole run does and, where that differs from the pointer's plan (inputs changed
while the launch went), moves the pointer to the new plan: units the tasks ran under the old plan then have
no checkpoint under the new one and fail, and a relaunch (or rerun) of the run runs the new plan.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time

from airflow_curation.core import storage
from airflow_curation.core.fingerprint import canonical_json
from airflow_curation.core.lease import Lease
from airflow_curation.core.manifest import PAGE_ENTRIES, Manifest, ManifestError, ManifestHead, UnitEntry

log = logging.getLogger(__name__)

KEEP_PLANS = 4  # plans kept beside those a run's pointer names (a rerun with the same inputs reuses one)


def plan_key(units: list[UnitEntry], root: str) -> str:
    """What names a plan: its source root (what every id is relative to) and each unit's id, input checksum
    (relative paths, sizes, versions) and inputs."""
    h = hashlib.sha256(root.encode())
    for u in units:
        h.update(b"\0" + canonical_json([u.unit_id, u.input_checksum, u.inputs]).encode())
    return h.hexdigest()[:24]


class RunPlans:
    """The plans of one ingest stage's runs in its lake.

    :param stage: the ingest stage (its lake, run id, fingerprint and config name the run's pointer).
    """

    def __init__(self, stage) -> None:
        self.stage = stage
        self.folder = stage.lake.path("ingest", "plans")
        c = stage.config
        scope = {
            "run_id": stage.run_id,
            "fingerprint": stage.fingerprint,
            "inputs": list(c["inputs"]),
            "min_units": int(c.get("min_units") or 1),
        }
        digest = hashlib.sha256(canonical_json(scope).encode()).hexdigest()[:24]
        self.pointer_uri = storage.join(self.folder, "runs", f"{digest}.json")

    def lease(self) -> Lease:
        """Held while one task lists and writes the plan; the others wait while it lives."""
        lake = self.stage.lake
        return Lease(lake.path("_locks", "ingest.plan.lease"), f"ingest's plan on {lake.base}", math.inf)

    def current(self) -> ManifestHead | None:
        """The head of the plan this run follows, None before one is written (or where it cannot be read:
        the holder then lists again)."""
        try:
            pointer = storage.read_json(self.pointer_uri)
            return ManifestHead.read(storage.join(self.folder, pointer["plan"]))
        except (FileNotFoundError, ValueError, KeyError, TypeError, ManifestError):
            return None

    def publish(self, units: list[UnitEntry], root: str) -> ManifestHead:
        """Make ``units`` (a whole listing's, with its source ``root``) this run's plan: the plan of the same
        content where one is kept, else a new one; then the pointer."""
        key = plan_key(units, root)
        head = self._find(key)
        if head is None:
            name = f"{time.time_ns():020d}-{key}.json"
            plan = Manifest(
                dataset=self.stage.lake.dataset,
                stage=self.stage.name,
                run_id=self.stage.run_id,
                fingerprint=self.stage.fingerprint,
                lake=self.stage.lake.to_dict(),
                units=[UnitEntry(u.unit_id, list(u.inputs), u.input_checksum) for u in units],
                config={"source_root": root, "plan_key": key, "files": sum(len(u.inputs) for u in units)},
            )
            # About PAGE_ENTRIES input files a page: a task whose units are few and large reads its own.
            files = max(1, plan.config["files"])
            per_page = max(1, min(PAGE_ENTRIES, PAGE_ENTRIES * len(units) // files))
            head = ManifestHead.read(plan.write(storage.join(self.folder, name), page_entries=per_page))
            log.info("ingest: plan %s written: %d units, %d files", name, len(units), plan.config["files"])
        else:
            log.info("ingest: plan %s reused (the same inputs and grouping)", head.uri.rsplit("/", 1)[-1])
        storage.write_json(self.pointer_uri, {"plan": head.uri.rsplit("/", 1)[-1], "run_id": self.stage.run_id})
        self._prune(keep=head.uri)
        return head

    def reconcile(self, units: list[UnitEntry], root: str) -> None:
        """The collect step's listing against the run's plan: where they differ, the listing becomes the
        plan (what a relaunch of the run's tasks reads)."""
        head = self.current()
        if head is None or head.config.get("plan_key") == plan_key(units, root):
            return
        log.warning(
            "ingest: the inputs changed since this run's tasks planned (%s): units without a checkpoint under "
            "today's listing fail, and a relaunch or rerun of the run runs them",
            head.uri,
        )
        self.publish(units, root)

    def drop(self) -> None:
        """The run is complete: its pointer goes (a later run of the same id lists again); the plan stays
        for a rerun with the same inputs."""
        storage.remove(self.pointer_uri)

    @staticmethod
    def forget(lake, run_id: str) -> None:
        """Remove every pointer of run ``run_id`` in ``lake`` (whatever its fingerprint or inputs): its next
        task to plan lists again. The plans stay (one of the same content is reused)."""
        for uri in storage.glob(storage.join(lake.path("ingest", "plans"), "runs", "*.json")):
            try:
                named = storage.read_json(uri).get("run_id")
            except (FileNotFoundError, ValueError, AttributeError):
                continue
            if named == run_id:
                storage.remove(uri)
                log.info("ingest: a new launch of %s: its earlier launch's plan pointer removed", run_id)

    def _find(self, key: str) -> ManifestHead | None:
        for uri in sorted(storage.glob(storage.join(self.folder, f"*-{key}.json"))):
            try:
                return ManifestHead.read(uri)
            except ManifestError:
                continue  # torn: written again
        return None

    def _prune(self, keep: str) -> None:
        """Remove all but the newest :data:`KEEP_PLANS` plans, never one a run's pointer names."""
        named = {keep.rsplit("/", 1)[-1]}
        for uri in storage.glob(storage.join(self.folder, "runs", "*.json")):
            try:
                named.add(storage.read_json(uri)["plan"])
            except (FileNotFoundError, ValueError, KeyError, TypeError):
                continue
        plans = sorted(storage.glob(storage.join(self.folder, "*.json")))
        for uri in plans[: max(0, len(plans) - KEEP_PLANS)]:
            name = uri.rsplit("/", 1)[-1]
            if name in named:
                continue
            storage.remove(uri)
            index = storage.join(self.folder, name.removesuffix(".json") + ".index")
            for page in storage.listdir(index):
                storage.remove(page)
