"""Export's done marks: the file that says a phase (the scatter, the middle pass) is finished for all the
tasks of a run, so no task lists or stats the phase's files to know it; and what a later phase does when a
file such a mark vouched for is gone (deleted by hand, a lifecycle rule) or unreadable (truncated, corrupted):
it removes the mark and fails with the file named, so the rerun redoes the phase's missing or changed files
(their checkpoints no longer match: a changed file is re-hashed) and skips the others."""

from __future__ import annotations

from airflow_curation.core import storage
from airflow_curation.core.integrity import IntegrityError
from airflow_curation.core.layout import Lake
from airflow_curation.core.lsh import UnreadableSpill


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


def unreadable_file(error: UnreadableSpill, uris: list[str], mark: str, phase: str) -> IntegrityError | None:
    """After a read of ``uris`` (written by ``phase``) found one of them unreadable: the error to raise, the
    phase's mark ``mark`` removed; None where the file is not one of ``uris``. Without this every rerun failed
    on the same file, the mark keeping the phase from redoing it."""
    if error.uri not in uris:
        return None
    storage.remove(mark)
    return IntegrityError(
        f"export: {error}; the {phase} was marked done: the mark {mark} is removed: run the export again and the "
        f"{phase} redoes the files that no longer hold what it wrote"
    )
