"""Export's done marks: the file that says a phase (the scatter, the middle pass) is finished for all the
tasks of a run, so no task lists or stats the phase's files to know it; and what a later phase does when a
file such a mark vouched for is gone (deleted by hand, a lifecycle rule) or unreadable (truncated, corrupted):
it removes the mark and fails with the file named (:func:`~airflow_curation.stages.barrier.lost_step_files`), so
the rerun redoes the phase's missing or changed files (their checkpoints no longer match: a changed file is
re-hashed) and skips the others."""

from __future__ import annotations

from airflow_curation.core import storage
from airflow_curation.core.layout import Lake


def scatter_mark(lake: Lake, scatter_fingerprint: str, run_key: str) -> str:
    """In the spill folder: removing the spills removes it."""
    return storage.join(lake.path("export", scatter_fingerprint, "spill"), "_done", f"{run_key}.json")


def merge_mark(lake: Lake, merge_fingerprint: str) -> str:
    return storage.join(lake.path("export", merge_fingerprint, "merge"), "_done.json")
