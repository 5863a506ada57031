"""A task of a dedup array plans from its slice (issue 20: "a task reads only its slice"): once the global
phase of a plan is done, group ``i`` of ``n`` reads the upstream manifest's pages of its own block and the
run key the whole plan left, and gets the same units, checksums and labels as the whole plan."""

from __future__ import annotations

import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_curation.core import storage
from airflow_curation.core.layout import Lake
from airflow_curation.core.lease import Lease
from airflow_curation.core.manifest import (
    PAGE_ENTRIES,
    Manifest,
    ManifestHead,
    ManifestPageError,
    ShardEntry,
    group_range,
)
from airflow_curation.core.shards import write_parquet
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.dedup.stage import DedupStage

S = 2 * PAGE_ENTRIES + 2  # three pages of shards


def _flip_page(head: ManifestHead, kind: str, page: int) -> None:
    """Change one byte inside page ``page`` of the ``kind`` pages file: a read of it raises."""
    meta = head.data["index"][kind]
    path = storage.join(os.path.dirname(head.uri), meta["file"])
    offset = sum(meta["lengths"][:page]) + meta["lengths"][page] // 2
    data = bytearray(open(path, "rb").read())
    data[offset] ^= 0x01
    open(path, "wb").write(bytes(data))


@pytest.fixture
def lake(nd_corpus, tmp_path) -> tuple[Lake, str]:
    """S shards of the near-duplicate corpus (rows spread over all of them, so clusters cross shards), each
    with preprocess attrs whose checksum the complete upstream manifest records."""
    ids, texts, _ = nd_corpus
    lake = Lake(str(tmp_path / "lake"), "ds")
    entries = []
    for k in range(S):
        sid = f"part-{k:05d}"
        t = pa.table({"id": ids[k::S], "text": texts[k::S]})
        n, ck = write_parquet(lake.shard_uri(sid), t)
        _, keep_ck = write_parquet(
            lake.attrs_uri("preprocess", sid), pa.table({"id": ids[k::S], "keep": [True] * t.num_rows})
        )
        entries.append(
            ShardEntry(
                sid,
                lake.shard_uri(sid),
                rows=t.num_rows,
                bytes=n,
                checksum=ck,
                attrs={"preprocess": lake.attrs_uri("preprocess", sid)},
                attrs_checksums={"preprocess": keep_ck},
            )
        )
    m = Manifest(
        dataset="ds",
        stage="preprocess",
        run_id="r1",
        fingerprint="f",
        lake=lake.to_dict(),
        shards=entries,
        status="complete",
    )
    return lake, m.write(lake.manifest_uri("r1", "preprocess"))


def _stage(lake: Lake, uri: str) -> DedupStage:
    return DedupStage(lake, {"input_manifest": uri}, "r2")


def test_a_group_plans_from_its_pages_once_the_global_phase_is_done(lake):
    lake, uri = lake
    whole = StageRunner(_stage(lake, uri)).run()
    assert whole.status == "complete" and len(whole.units) == S
    labels = {s.shard_id: pq.read_table(s.attrs["dedup"]) for s in whole.shards}
    assert sum(t.column("near_duplicate").to_pylist().count(True) for t in labels.values()) > 0  # clusters cross shards
    count, index = 3, 2  # group 2 holds positions 86..129: shard pages 1 and 2 only
    head = ManifestHead.read(uri)
    _flip_page(head, "shards", 0)  # a task of group 2 that read the whole run would fail on this page
    for sid in (f"part-{k:05d}" for k in range(10)):  # nor does it open other shards' files
        os.remove(lake.attrs_uri("preprocess", sid))
    group = StageRunner(_stage(lake, uri)).run(shard_group=(index, count))
    block = group_range(S, index, count)
    assert [(u.unit_id, u.input_checksum, u.rows) for u in group.units] == [
        (u.unit_id, u.input_checksum, u.rows) for u in whole.units[block.start : block.stop]
    ]
    assert {u.status for u in group.units} == {"skipped"}  # the whole run's checkpoints match: same keys
    with pytest.raises(ManifestPageError, match="page 0"):  # the whole plan does read that page
        _stage(lake, uri).plan()


def test_a_group_task_runs_phase_3_of_its_block_alone(lake):
    """With the global phase done but no phase-3 checkpoints (a task that starts after the barrier), the group
    writes the same labels for its shards as the whole run."""
    lake, uri = lake
    whole = StageRunner(_stage(lake, uri)).run()
    labels = {s.shard_id: pq.read_table(s.attrs["dedup"]).to_pylist() for s in whole.shards}
    shutil.rmtree(_stage(lake, uri).checkpoints.directory)  # phase 3 not done; phases 1 and 2 are
    head = ManifestHead.read(uri)
    _flip_page(head, "shards", 2)  # group 1 holds positions 43..85: pages 0 and 1
    group = StageRunner(_stage(lake, uri)).run(shard_group=(1, 3))
    block = group_range(S, 1, 3)
    assert [s.shard_id for s in group.shards] == [s.shard_id for s in whole.shards[block.start : block.stop]]
    for s in group.shards:
        assert pq.read_table(s.attrs["dedup"]).to_pylist() == labels[s.shard_id]


@pytest.mark.parametrize("damage", ["deleted", "truncated"])
def test_a_global_phase_file_gone_after_its_mark_fails_named_and_the_rerun_redoes_the_phase(lake, damage):
    """A labels file of a done global phase deleted (by hand, a lifecycle rule) or truncated while phase 3 is still
    to do (a killed task, a late one): every phase-3 unit that read it failed, and so did every rerun, since the
    phase's ``_SUCCESS.json`` kept it from being redone. The unit now removes that mark with the error naming the
    file; the next run redoes the phase from phase 1's checkpointed spill and writes the same labels."""
    from airflow_curation.core import uris
    from airflow_curation.stages.base import StageFailed

    lake, uri = lake
    whole = StageRunner(_stage(lake, uri)).run()
    labels = {s.shard_id: pq.read_table(s.attrs["dedup"]).to_pylist() for s in whole.shards}
    shutil.rmtree(_stage(lake, uri).checkpoints.directory)  # phase 3 to do again; phases 1 and 2 are done
    (done,) = storage.glob(lake.path("dedup", "*", "_SUCCESS.json"))
    victim = uris.resolve(storage.read_json(done)["labels"][0], lake.root)
    if damage == "deleted":
        os.remove(victim)
    else:
        data = open(victim, "rb").read()
        open(victim, "wb").write(data[: len(data) // 2])
    how = "missing" if damage == "deleted" else "unreadable"
    with pytest.raises(StageFailed, match=f"the global step's file {victim} is {how}.*run dedup again"):
        StageRunner(_stage(lake, uri)).run()
    assert not os.path.exists(done)
    again = StageRunner(_stage(lake, uri)).run()
    assert again.status == "complete"
    assert {s.shard_id: pq.read_table(s.attrs["dedup"]).to_pylist() for s in again.shards} == labels


def test_before_the_global_phase_the_task_that_does_it_plans_the_whole_run(lake):
    lake, uri = lake
    group = StageRunner(_stage(lake, uri)).run(shard_group=(1, 3))
    block = group_range(S, 1, 3)
    assert [u.unit_id for u in group.units] == [f"part-{k:05d}" for k in block]
    assert {u.status for u in group.units} == {"done"}
    assert len(storage.glob(lake.path("dedup", "*", "spill", "*.bands.arrow"))) == S  # it signed every shard


def test_a_task_that_waits_for_the_global_phase_signs_its_block_and_plans_from_its_pages(lake, monkeypatch):
    """A task that starts before the global phase is done signs its own block (from its pages) and waits for
    the lease; when another task did the phase meanwhile, it plans from its pages too: only the task that does
    the phase plans the whole run. Every task that started before the barrier planned the whole run before
    (O(shards) a task: 50,000 tasks x 0.7 s of manifest at the plan)."""
    lake, uri = lake
    count, index = 3, 2  # group 2 holds positions 86..129: shard pages 1 and 2 only
    block = group_range(S, index, count)
    wholes: list[int] = []
    real_whole = DedupStage._plan_whole
    monkeypatch.setattr(DedupStage, "_plan_whole", lambda self, lease: (wholes.append(1), real_whole(self, lease))[1])
    signed_first: list[set] = []
    real_enter = Lease.__enter__

    def another_task_first(self):
        if not signed_first:  # the first wait on the lease: group 0 of the array does the phase meanwhile
            spills = storage.glob(lake.path("dedup", "*", "spill", "*.bands.arrow"))
            signed_first.append({os.path.basename(p).split(".")[0] for p in spills})
            StageRunner(_stage(lake, uri)).run(shard_group=(0, count))
            _flip_page(ManifestHead.read(uri), "shards", 0)  # a whole plan from now on fails on this page
        return real_enter(self)

    monkeypatch.setattr(Lease, "__enter__", another_task_first)
    group = StageRunner(_stage(lake, uri)).run(shard_group=(index, count))
    assert signed_first == [{f"part-{k:05d}" for k in block}]  # its own block, before the lease
    assert len(wholes) == 1  # group 0's plan; this task's came from its pages
    assert [u.unit_id for u in group.units] == [f"part-{k:05d}" for k in block]
    assert {u.status for u in group.units} == {"done"}
    planned = Manifest.read(_stage(lake, uri).manifest_uri).units  # group 0's whole plan, as it wrote it
    assert [(u.unit_id, u.inputs, u.input_checksum) for u in group.units] == [
        (u.unit_id, u.inputs, u.input_checksum) for u in planned[block.start : block.stop]
    ]


def _opened(monkeypatch) -> list[str]:
    """Every file opened for reading through the lake's storage from now on (footers included)."""
    opened: list[str] = []
    real = storage.open_read

    def counting(uri, *args, **kwargs):
        opened.append(str(uri))
        return real(uri, *args, **kwargs)

    monkeypatch.setattr(storage, "open_read", counting)
    return opened


def test_a_group_plan_opens_no_attrs_footer(lake, monkeypatch):
    """Which attrs a shard reads (the keep column, the cleaned text) is in its attrs files' footers; the whole
    plan records it with the run key, so a group's plan opens none of them (two footers a shard before)."""
    lake, uri = lake
    whole = StageRunner(_stage(lake, uri)).run()
    opened = _opened(monkeypatch)
    units = _stage(lake, uri).plan_group(1, 3)
    block = group_range(S, 1, 3)
    assert [(u.unit_id, u.inputs, u.input_checksum) for u in units] == [
        (u.unit_id, u.inputs, u.input_checksum) for u in whole.units[block.start : block.stop]
    ]
    assert not [f for f in opened if "/attrs/" in f], opened
    monkeypatch.undo()  # a key file without the record (older code): the footers are read, same units
    key = next(iter(storage.glob(lake.path("dedup", "plans", "*.json"))))
    storage.write_json(key, {k: v for k, v in storage.read_json(key).items() if k != "reads"})
    opened = _opened(monkeypatch)
    again = _stage(lake, uri).plan_group(1, 3)
    assert [(u.unit_id, u.input_checksum) for u in again] == [(u.unit_id, u.input_checksum) for u in units]
    assert len([f for f in opened if "/attrs/preprocess/" in f]) >= len(block)


def test_group_plans_of_shards_whose_attrs_differ_match_the_whole_plan(tmp_path, monkeypatch):
    """Shards whose preprocess attrs have the keep column or not, and the cleaned text or not (runs of each):
    every group's plan, from the recorded runs, gives the whole plan's inputs and checksums."""
    lake = Lake(str(tmp_path / "lake"), "ds")
    layouts = [{"keep"}] * 3 + [set()] * 2 + [{"keep", "clean_text"}] * 4 + [{"clean_text"}] + [{"keep"}] * 2
    entries = []
    for k, cols in enumerate(layouts):
        sid = f"part-{k:05d}"
        ids = [f"{sid}-{i}" for i in range(3)]
        texts = [f"document {k} number {i} of a shard of the test lake" for i in range(3)]
        n, ck = write_parquet(lake.shard_uri(sid), pa.table({"id": ids, "text": texts}))
        cols_ = {"id": ids} | ({"keep": [True] * 3} if "keep" in cols else {"lang": ["en"] * 3})
        cols_ |= {"clean_text": texts} if "clean_text" in cols else {}
        _, ack = write_parquet(lake.attrs_uri("preprocess", sid), pa.table(cols_))
        entries.append(
            ShardEntry(
                sid,
                lake.shard_uri(sid),
                3,
                n,
                ck,
                attrs={"preprocess": lake.attrs_uri("preprocess", sid)},
                attrs_checksums={"preprocess": ack},
            )
        )
    m = Manifest("ds", "preprocess", "r1", "f", lake.to_dict(), shards=entries, status="complete")
    uri = m.write(lake.manifest_uri("r1", "preprocess"))
    whole = StageRunner(_stage(lake, uri)).run()
    kinds = {("+-@" not in u.input_checksum, "+text:" in u.input_checksum) for u in whole.units}
    assert kinds == {(True, False), (False, False), (True, True), (False, True)}  # (keep, text): all four
    opened = _opened(monkeypatch)
    for count in (1, 2, 5, len(layouts)):
        got = [u for i in range(count) for u in _stage(lake, uri).plan_group(i, count)]
        assert [(u.unit_id, u.inputs, u.input_checksum) for u in got] == [
            (u.unit_id, u.inputs, u.input_checksum) for u in whole.units
        ]
    assert not [f for f in opened if "/attrs/" in f], opened


def test_a_group_task_reads_the_upstream_head_once(lake, monkeypatch):
    """Once the global phase is done, a task's plan reads the upstream head once (its wait, the run key's name,
    the block's position and its pages' entries share it): on an object store each read is a GET."""
    from airflow_curation.core import manifest as manifest_module

    lake, uri = lake
    StageRunner(_stage(lake, uri)).run()
    reads: list[str] = []
    real = manifest_module.storage.read_json
    monkeypatch.setattr(
        manifest_module.storage, "read_json", lambda url, *a, **k: (reads.append(url), real(url, *a, **k))[1]
    )
    group = StageRunner(_stage(lake, uri)).run(shard_group=(2, 3))
    assert {u.status for u in group.units} == {"skipped"}
    assert reads.count(uri) == 1, reads
