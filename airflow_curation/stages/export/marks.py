"""Export's done marks: the file that says a phase (the scatter, the middle pass) is finished for all the
tasks of a run, so no task lists or stats the phase's files to know it; and what a later phase does when a
file such a mark vouched for is gone (deleted by hand, a lifecycle rule): it removes the mark and fails
with the file named, so the rerun redoes the phase's missing files (its checkpoints skip the others)."""

from __future__ import annotations

from airflow_curation.core import storage
from airflow_curation.core.integrity import IntegrityError
from airflow_curation.core.layout import Lake


def scatter_mark(lake: Lake, scatter_fingerprint: str, run_key: str) -> str:
    """In the spill folder: removing the spills removes it."""
    return storage.join(lake.path("export", scatter_fingerprint, "spill"), "_done", f"{run_key}.json")


def merge_mark(lake: Lake, merge_fingerprint: str) -> str:
    return storage.join(lake.path("export", merge_fingerprint, "merge"), "_done.json")


def lost_files(uris: list[str], mark: str, phase: str) -> IntegrityError | None:
    """After a read of ``uris`` (written by ``phase``) found a file missing: the error to raise, the phase's
    mark ``mark`` removed; None where every file is there (the read failed for another reason)."""
    missing = [u for u in uris if not storage.exists(u)]
    if not missing:
        return None
    storage.remove(mark)
    more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
    return IntegrityError(
        f"export: the {phase}'s file {missing[0]}{more} is missing, though the {phase} was marked done; the mark "
        f"{mark} is removed: run the export again and the {phase} redoes the missing files only"
    )
