"""A user's own Parquet files as a plain-file run's inputs (``inputs`` + ``output_dir``, no lake): which files
(files, folders, globs, as ingest takes its inputs), each one's entry as a lake shard's would be (known by its
size and storage stamp), the output names that must not be one of them, and the one stage whose results an
output folder holds."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from functools import lru_cache

import pyarrow.parquet as pq

from airflow_curation.core import storage
from airflow_curation.core.fingerprint import file_identity
from airflow_curation.core.layout import safe_name
from airflow_curation.core.manifest import ShardEntry
from airflow_curation.core.schema import check_id_text


def file_stem(url: str) -> str:
    """A plain input file's name without ``.parquet``: its unit's id, and the name of its outputs."""
    return os.path.basename(url.rstrip("/")).removesuffix(".parquet")


@lru_cache(maxsize=8)
def file_entries(files: tuple[str, ...]) -> dict[str, ShardEntry]:
    """One entry per file, by its name without ``.parquet`` (what its outputs are named): rows and schema from
    its footer, known by its size and storage stamp. Cached: read once per process."""
    entries: dict[str, ShardEntry] = {}
    for f in files:
        stem = file_stem(f)
        safe_name(stem, "input file name")
        if stem in entries:
            raise ValueError(
                f"two inputs are named {stem}.parquet ({entries[stem].uri}, {f}); their outputs would collide"
            )
        # Known by its storage stamp (one stat), not its content's hash: a rerun of a done run, or a plan of
        # files on an object store, reads no file whole here (the footer only); a unit checks the stamp again.
        size, identity = file_identity(f)
        with storage.open_read(f) as fh:
            pf = pq.ParquetFile(fh)
            check_id_text(pf.schema_arrow, f)
            rows = pf.metadata.num_rows
        entries[stem] = ShardEntry(shard_id=stem, uri=f, rows=rows, bytes=size, checksum=identity)
    return entries


def input_files(specs: Sequence[str], output_dir: str | None = None) -> tuple[str, ...]:
    """The Parquet files a plain-file run reads: each of ``specs`` a file (as given), a folder (the
    ``.parquet`` files under it, recursively) or a glob (its matching files), the last two sorted; hidden
    names and what lies under ``output_dir`` left out (a rerun would read its own results as inputs).

    :raises FileNotFoundError: a folder or glob with no file.
    """
    files: list[str] = []
    for spec in specs:
        found = storage.list_files(spec, ".parquet")
        if found is None:
            files.append(spec)  # a file, or one missing: reading it says so
            continue
        listed = [u for u in found if not (output_dir and _under(u, output_dir))]
        if not listed:
            raise FileNotFoundError(f"no Parquet files under {spec!r}")
        files += listed
    return tuple(dict.fromkeys(files))


def _under(url: str, folder: str) -> bool:
    if storage.is_local(url) and storage.is_local(folder):
        url, folder = os.path.realpath(storage.local_path(url)), os.path.realpath(storage.local_path(folder))
    return url.startswith(folder.rstrip("/") + "/")


def same_file(a: str, b: str) -> bool:
    """Whether two URLs name one file (local paths resolved: links, ``..``, relative to here)."""
    if storage.is_local(a) and storage.is_local(b):
        return os.path.realpath(storage.local_path(a)) == os.path.realpath(storage.local_path(b))
    return a.rstrip("/") == b.rstrip("/")


# The stage whose results a plain-file output folder holds: a second stage into that folder would write its
# results over the first's, file by file, with their names (`<file>.parquet`).
OWNER_FILE = "_curation/owner.json"


def check_output_owner(stage: str, output_dir: str, outputs: Sequence[str]) -> None:
    """Refuse ``output_dir`` when it holds another stage's results, or files of ``outputs``' names that no
    curation run wrote there (a user's own files: they would be written over).

    :raises ValueError: naming the stage or file, before anything is written.
    """
    fs, path = storage.filesystem(output_dir)
    if fs.isfile(path):
        raise ValueError(
            f"{stage}: the output {output_dir} is a file; the results go in a folder (one file per input, named "
            "after it): give a folder"
        )
    marker = storage.join(output_dir, OWNER_FILE)
    if storage.exists(marker):
        owner = storage.read_json(marker).get("stage")
        if owner != stage:
            raise ValueError(
                f"{stage}: {output_dir} holds the results of {owner} ({marker}); each stage's results are named "
                "after their input files, so this one's would be written over them: give it its own output folder"
            )
        return
    if not storage.exists(output_dir):
        return
    if storage.glob(storage.join(output_dir, "_curation", "_manifests", "*", f"{stage}.json")):
        return  # the CLI's runs of this stage, from before folders had an owner file
    names = {os.path.basename(o) for o in outputs}
    there = [u for u in storage.glob(storage.join(output_dir, "*.parquet")) if os.path.basename(u) in names]
    if there:
        raise ValueError(
            f"{stage}: {there[0]} exists and no curation run wrote it ({len(there)} of the results' names are taken "
            f"in {output_dir}); give an empty or new output folder, or remove them"
        )


def claim_output(stage: str, output_dir: str) -> None:
    """Record ``stage`` as the owner of ``output_dir`` (before it writes its first result there): created only
    where no owner is, so of two stages started at once into one folder (both found it free) one is refused.

    :raises ValueError: another stage owns it."""
    marker = storage.join(output_dir, OWNER_FILE)
    if storage.create_new(marker, (json.dumps({"stage": stage}, indent=1) + "\n").encode()):
        return
    owner = storage.read_json(marker).get("stage")
    if owner != stage:
        raise ValueError(
            f"{stage}: {output_dir} was claimed by {owner} ({marker}) while this run started; each stage's "
            "results are named after their input files: give this one its own output folder"
        )
