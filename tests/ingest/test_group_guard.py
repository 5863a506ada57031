"""A task of an ingest array checks earlier runs from its slice (issue 20: "a task reads only its slice"):
the check that refuses to overwrite a complete run's shards reads, for a group other than 0, only that run's
head and its unit pages at the group's positions; a conflict there is refused as the whole check refuses it,
and under ``replace`` the whole check runs and supersedes."""

from __future__ import annotations

import json
import os

import pytest

from airflow_curation.core import storage
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import PAGE_ENTRIES, ManifestHead
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.ingest.stage import IngestStage, ReplaceRefused

FILES = 2 * PAGE_ENTRIES + 2  # one unit per file (unit_bytes=1): three unit pages


def _flip_page(head: ManifestHead, kind: str, page: int) -> None:
    """Change one byte inside page ``page`` of the ``kind`` pages file: a read of it fails."""
    meta = head.data["index"][kind]
    path = storage.join(os.path.dirname(head.uri), meta["file"])
    offset = sum(meta["lengths"][:page]) + meta["lengths"][page] // 2
    data = bytearray(open(path, "rb").read())
    data[offset] ^= 0x01
    open(path, "wb").write(bytes(data))


def _write(path, text: str) -> None:
    path.write_text(json.dumps({"text": text}) + "\n")


@pytest.fixture
def earlier(tmp_path) -> tuple[Lake, object, str]:
    """A complete ingest run r1 of FILES one-document files, one unit each."""
    src = tmp_path / "in"
    src.mkdir()
    for f in range(FILES):
        _write(src / f"{f:04d}.jsonl", f"file {f}")
    lake = Lake(str(tmp_path / "lake"), "web")
    StageRunner(_stage(lake, src, "r1")).run()
    return lake, src, lake.manifest_uri("r1", "ingest")


def _stage(lake: Lake, src, run_id: str, **config) -> IngestStage:
    return IngestStage(lake, {"inputs": [str(src)], "unit_bytes": 1, **config}, run_id)


def _corrupt_all_but_the_last_two_unit_pages(uri: str) -> None:
    head = ManifestHead.read(uri)
    _flip_page(head, "units", 0)  # group 2 of 3 (positions 86..129) needs unit pages 1 and 2 only
    for page in range(3):
        _flip_page(head, "shards", page)  # and no shard page


def test_a_group_finds_a_conflict_in_its_block_from_its_pages_only(earlier):
    lake, src, uri = earlier
    _write(src / "0100.jsonl", "changed")  # position 100: group 2 of 3
    _corrupt_all_but_the_last_two_unit_pages(uri)
    # Had it read page 0 (the whole run), the unreadable manifest would pin nothing and no conflict be found.
    with pytest.raises(ReplaceRefused, match="complete run r1 .* 1 of its units' shards"):
        StageRunner(_stage(lake, src, "r2")).run(shard_group=(2, 3))


def test_a_group_without_a_conflict_runs_and_the_last_group_checks_the_tail(earlier):
    lake, src, uri = earlier
    for f in range(FILES - 3, FILES):  # the earlier run's last three units are not in this plan
        os.remove(src / f"{f:04d}.jsonl")
    m = StageRunner(_stage(lake, src, "r2")).run(shard_group=(1, 3))  # positions 42..83: nothing changed
    assert {u.status for u in m.units} == {"skipped"} and len(m.units) == 42
    with pytest.raises(ReplaceRefused, match="3 of its units' shards"):
        StageRunner(_stage(lake, src, "r2")).run(shard_group=(2, 3))  # positions 84..126, and 127..129 of r1


def test_under_replace_a_group_with_a_conflict_supersedes_as_the_whole_run_does(earlier):
    lake, src, uri = earlier
    _write(src / "0100.jsonl", "changed")
    m = StageRunner(_stage(lake, src, "r2", replace=True)).run(shard_group=(2, 3))
    assert [u.status for u in m.units if u.status == "done"] == ["done"]  # the changed file's unit only
    head = ManifestHead.read(uri)
    assert head.status == "superseded" and head.superseded_by == "r2"
