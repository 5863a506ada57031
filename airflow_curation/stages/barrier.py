"""One task of an array around a stage's global step (dedup's phases 1 and 2, boilerplate's line counts).

Such a step needs every shard: it is done once, by the first task to hold ``_locks/<stage>.global.lease``, and
the others wait for it. What a task reads to plan must not grow with the run (issue 20: 50,000 tasks each
parsing a 28 MB manifest is O(shards^2)), so a task that is not group 0 plans from the upstream manifest's
pages of its own block and from the record the whole plan leaves beside the step (its run key), read from a
file named by what decides it. Only the task that does the step plans the whole run.

The step's ``_SUCCESS.json`` vouches for the files it wrote, so no task stats them; when one is gone or
unreadable after all (deleted by hand, a lifecycle rule, a truncated copy), :func:`lost_step_files` removes that
mark with the error, so the rerun redoes the step instead of failing on the same file every time.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
from collections.abc import Callable

from airflow_curation.core import storage
from airflow_curation.core.integrity import IntegrityError
from airflow_curation.core.layout import Lake
from airflow_curation.core.lease import Lease
from airflow_curation.core.lsh import UnreadableSpill
from airflow_curation.core.manifest import UnitEntry, group_range
from airflow_curation.stages.attrs import upstream_head
from airflow_curation.stages.settings import Setting

# The first pass's setting that says its ``shards`` are one array task's block (read from its pages), not the run's.
BLOCK = Setting("block", bool, False, "the shards are one array task's block, not the run's", runtime=True, cli=False)


class BlockPass:
    """Mixed into a global step's first pass (dedup's signatures, boilerplate's counts): a task handed its own
    block's shards (``block``: :func:`plan_group_around`'s ``own_block``) runs all of them as its group; a pass
    given every shard is sliced as any stage."""

    def plan_group(self, index: int, count: int) -> list[UnitEntry]:
        return self.plan() if self.config.get("block") else super().plan_group(index, count)


def global_lease(lake: Lake, stage: str, what: str) -> Lease:
    """The lease of ``stage``'s global step: whoever holds it first does the step; the others wait while it
    lives (a dead holder's lease is taken over)."""
    return Lease(lake.path("_locks", f"{stage}.global.lease"), f"{what} on {lake.base}", math.inf)


def held(lease: Lease | None) -> contextlib.AbstractContextManager:
    """``lease`` to hold, or nothing where the caller already holds it (None)."""
    return lease if lease is not None else contextlib.nullcontext()


def plan_key_uri(lake: Lake, stage: str, input_manifest: str | None, fingerprints: list[str]) -> str | None:
    """Where the whole plan keeps its run key for the tasks of an array, named by what decides it: the
    ``fingerprints`` of the stage (and of its sub-stage) and the upstream manifest's shard pages (their
    checksums, recorded in its head). None for plain-file inputs or a manifest without pages."""
    if not input_manifest:
        return None
    meta = upstream_head(input_manifest).data["index"].get("shards") or {}
    if "checksums" not in meta:  # format 1: no pages to name it by
        return None
    ident = "|".join([*fingerprints, str(meta["count"]), *meta["checksums"]])
    return lake.path(stage, "plans", hashlib.sha256(ident.encode()).hexdigest()[:24] + ".json")


def read_plan_key(uri: str | None) -> dict:
    """The record :func:`plan_key_uri` names, or {} where there is none (not written yet, or unreadable)."""
    try:
        doc = storage.read_json(uri) if uri else {}
    except (FileNotFoundError, ValueError):
        return {}
    return doc if isinstance(doc, dict) and doc.get("run_key") else {}


def plan_group_around(
    from_pages: Callable[[], list[UnitEntry] | None],
    own_block: Callable[[], None],
    lease: Lease,
    whole: Callable[[Lease | None], list[UnitEntry]],
    index: int,
    count: int,
) -> list[UnitEntry]:
    """The units of group ``index`` of ``count`` (not group 0, which plans the whole run for the manifest).

    :param from_pages: the group's units from its pages and the whole plan's record, or None while the global
        step is not done.
    :param own_block: do the group's own share of the step's first part (dedup signs, boilerplate counts the
        shards of its block, from its pages), beside the other tasks.
    :param lease: the global step's lease (:func:`global_lease`).
    :param whole: the whole plan, with the global step done under the lease it is given (None: held already).

    Before the step is done a task does its own block's share, then waits for the lease; the task that takes it
    first finds the step still to do and plans the whole run (it reads every page once, and counts or signs
    what is still missing); every other task finds the step done when it gets the lease and plans from its
    pages. Before this, every task of an array that started before the step was done planned the whole run."""
    units = from_pages()
    if units is not None:
        return units
    own_block()
    with lease:
        units = from_pages()
        if units is not None:  # another task did the step while this one waited
            return units
        planned = whole(None)
    block = group_range(len(planned), index, count)
    return planned[block.start : block.stop]


def lost_step_files(
    error: BaseException, files: list[str], mark: str, stage: str, step: str = "global step"
) -> IntegrityError | None:
    """After a read of the ``files`` a ``step`` wrote failed with ``error``: where one of them is missing, or is the
    unreadable file ``error`` names, the error to raise, the step's done mark ``mark`` removed (so the next run
    redoes the step; its checkpoints keep what still matches); else None (the read failed for another reason).
    Without it every rerun failed on the same file, the mark keeping the step from running again."""
    if isinstance(error, UnreadableSpill):
        bad, how = [error.uri] if error.uri in files else [], f"unreadable ({error.reason[:120]})"
    else:
        bad, how = [f for f in files if not storage.exists(f)], "missing"
    if not bad:
        return None
    storage.remove(mark)
    more = f" and {len(bad) - 1} more" if len(bad) > 1 else ""
    return IntegrityError(
        f"{stage}: the {step}'s file {bad[0]}{more} is {how}, though the {step} was marked done: its mark is "
        f"removed, run {stage} again to redo the {step} (what still matches its checkpoints is kept)"
    )
