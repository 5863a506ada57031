"""Manifest format 2: a small head, and unit and shard pages that a task of an array reads only the part of
that holds its own positions (issue 20, item 2: "a task reads only its slice")."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from airflow_curation.core import storage
from airflow_curation.core.integrity import IntegrityError
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import (
    FORMAT_VERSION,
    PAGE_ENTRIES,
    Manifest,
    ManifestError,
    ManifestHead,
    ManifestPageError,
    ShardEntry,
    UnitEntry,
    group_of,
    group_range,
)
from airflow_curation.core.shards import write_parquet
from airflow_curation.jobs.progress import CheckpointWatcher, unfinished_groups
from airflow_curation.stages.attrs import AttrsStage
from airflow_curation.stages.base import StageRunner

S = 2 * PAGE_ENTRIES + 2  # three pages: full, full, two entries


def _block(entries: list, index: int, count: int) -> list:
    block = group_range(len(entries), index, count)
    return entries[block.start : block.stop]


def _manifest(n: int = S, status: str = "complete") -> Manifest:
    return Manifest(
        dataset="web",
        stage="ingest",
        run_id="r1",
        fingerprint="abcd" * 4,
        lake={"root": "/lake", "dataset": "web", "snapshot": None},
        units=[
            UnitEntry(f"u{i:04d}", [f"/raw/{i}.jsonl"], f"xxh64:{i:016x}", status="failed" if i == 3 else "done")
            for i in range(n)
        ],
        shards=[
            ShardEntry(f"s{i:04d}", f"/lake/web/shards/s{i:04d}.parquet", rows=i, bytes=10 * i, checksum=f"c{i}")
            for i in range(n)
        ],
        status=status,
        accounting={"read": 7},
    )


def _flip_page(head: ManifestHead, kind: str, page: int) -> str:
    """Change one byte inside page ``page`` of the ``kind`` pages file; returns that file's path."""
    meta = head.data["index"][kind]
    path = storage.join(os.path.dirname(head.uri), meta["file"])
    offset = sum(meta["lengths"][:page]) + meta["lengths"][page] // 2
    data = bytearray(open(path, "rb").read())
    data[offset] ^= 0x01
    open(path, "wb").write(bytes(data))
    return path


def test_the_head_is_small_and_the_whole_manifest_reads_back(tmp_path):
    uri = str(tmp_path / "_manifests" / "r1" / "ingest.json")
    m = _manifest()
    m.write(uri)
    assert Manifest.read(uri) == m
    head = json.loads(open(uri).read())
    assert "units" not in head and "shards" not in head  # the lists live in the pages
    h = ManifestHead.read(uri)
    assert (h.unit_count, h.shard_count, h.rows, h.bytes) == (S, S, m.rows, m.bytes)
    assert h.unit_statuses == {"done": S - 1, "failed": 1} and h.failed_units == ["u0003"]
    assert h.summary() == m.summary(uri)
    # Pages sit in a folder of their own: a listing of the run's manifests (*.json) does not see them.
    assert sorted(os.listdir(tmp_path / "_manifests" / "r1")) == ["ingest.index", "ingest.json"]


@pytest.mark.parametrize("count", [1, 2, 3, PAGE_ENTRIES, S - 1, S, S + 5])
def test_a_group_gets_exactly_its_positions(tmp_path, count):
    uri = str(tmp_path / "m.json")
    m = _manifest()
    m.write(uri)
    h = ManifestHead.read(uri)
    for index in range(count):
        assert h.shards(index, count) == _block(m.shards, index, count)
        assert h.units(index, count) == _block(m.units, index, count)
    # The blocks cover every position once, in order, within one entry of each other in size.
    blocks = [group_range(S, i, count) for i in range(count)]
    assert [p for b in blocks for p in b] == list(range(S))
    assert max(map(len, blocks)) - min(map(len, blocks)) <= 1
    assert [group_of(p, count, S) for p in range(S)] == [i for i, b in enumerate(blocks) for _ in b]


class _ReadCounter:
    """Counts what the manifest reader fetches from pages files (bytes, and reads)."""

    def __init__(self, monkeypatch) -> None:
        import airflow_curation.core.manifest as mod

        self.bytes = 0
        self.calls = 0
        real = mod._read_ranges

        def counted(url, ranges, manifest_uri):
            out = real(url, ranges, manifest_uri)
            self.bytes += sum(len(b) for b in out)
            self.calls += 1
            return out

        monkeypatch.setattr(mod, "_read_ranges", counted)


@pytest.mark.parametrize("count", [16, 100, 2048])
def test_a_group_reads_the_bytes_of_its_block_not_of_the_run(tmp_path, monkeypatch, count):
    """What a task reads grows with its own units: at most its block's pages plus the two it shares with
    its neighbours, in one read; all groups together read the file about once, not ``count`` times."""
    n = 32 * PAGE_ENTRIES
    uri = str(tmp_path / "m.json")
    m = _manifest(n)
    m.write(uri)
    h = ManifestHead.read(uri)
    lengths = h.data["index"]["shards"]["lengths"]
    file_bytes, page_max = sum(lengths), max(lengths)
    reads = _ReadCounter(monkeypatch)
    total = 0
    for index in range(count):
        before = reads.bytes
        assert h.shards(index, count) == _block(m.shards, index, count)
        got = reads.bytes - before
        pages = -(-len(group_range(n, index, count)) // PAGE_ENTRIES) + 1
        assert got <= pages * page_max, (index, got, pages)
        total += got
    assert reads.calls == count  # one ranged read per group
    assert total <= file_bytes + count * page_max


def test_a_group_reads_only_the_pages_of_its_positions(tmp_path):
    uri = str(tmp_path / "m.json")
    m = _manifest()
    m.write(uri)
    h = ManifestHead.read(uri)
    # Group 5 of S touches only page 0: the other pages of both lists may be anything.
    paths = {kind: [_flip_page(h, kind, page) for page in (1, 2)][0] for kind in ("units", "shards")}
    assert h.shards(5, S) == [m.shards[5]] and h.units(5, S) == [m.units[5]]
    with pytest.raises(ManifestPageError) as e:
        Manifest.read(uri)  # the whole manifest: it meets the first bad page
    assert f"page 1 of {paths['units']}" in str(e.value)


def test_a_corrupted_page_is_an_integrity_error_naming_the_file(tmp_path):
    uri = str(tmp_path / "m.json")
    m = _manifest()
    m.write(uri)
    h = ManifestHead.read(uri)
    path = _flip_page(h, "shards", 2)
    assert h.shards(1, S) == [m.shards[1]]  # page 0: untouched
    with pytest.raises(ManifestPageError) as e:
        h.shards(2 * PAGE_ENTRIES, S)
    assert isinstance(e.value, IntegrityError) and isinstance(e.value, ManifestError)
    assert path in str(e.value) and "page 2" in str(e.value) and "checksum" in str(e.value)
    # A truncated pages file and a missing one: clear errors naming the file.
    open(path, "r+b").truncate(os.path.getsize(path) - 3)
    with pytest.raises(ManifestPageError, match="truncated"):
        ManifestHead.read(uri).shards(2 * PAGE_ENTRIES, S)
    os.unlink(path)
    with pytest.raises(ManifestError, match="pages file .* is missing"):
        ManifestHead.read(uri).shards()


def test_pages_on_an_object_store(tmp_path):
    uri = f"memory://lake-{tmp_path.name}/_manifests/r1/ingest.json"  # no local paths, no rename
    m = _manifest()
    m.write(uri)
    assert Manifest.read(uri) == m
    assert ManifestHead.read(uri).shards(3, 50) == _block(m.shards, 3, 50)


def test_a_manifest_of_format_1_still_reads(tmp_path):
    m = _manifest()
    uri = str(tmp_path / "old.json")
    storage.write_json(uri, {**m.to_dict(), "format_version": 1})  # what runs before the split wrote
    back = Manifest.read(uri)
    assert back.units == m.units and back.shards == m.shards and back.format_version == 1
    h = ManifestHead.read(uri)
    assert (h.unit_count, h.shard_count, h.rows, h.status) == (S, S, m.rows, "complete")
    assert h.shards(4, 7) == _block(m.shards, 4, 7)
    back.write(uri)  # rewritten: format 2 from then on
    assert json.loads(open(uri).read())["format_version"] == FORMAT_VERSION and Manifest.read(uri).shards == m.shards


def test_each_write_is_a_new_generation_and_the_previous_one_is_kept(tmp_path):
    uri = str(tmp_path / "m.json")
    m = _manifest()
    m.write(uri)
    before = ManifestHead.read(uri)  # a reader between two writes
    m.status = "failed"
    m.write(uri)
    assert before.shards(0, 1) == m.shards  # the generation it names is still there
    m.write(uri)
    assert len(os.listdir(tmp_path / "m.index")) == 4  # two generations, two files each
    with pytest.raises(ManifestError, match="missing"):
        before.shards(0, 1)  # two writes later its generation is gone: read the head again
    assert ManifestHead.read(uri).status == "failed"


# --- the stage runner: a task of an array plans its own units from its slice of the upstream manifest -----


class LengthStage(AttrsStage):
    """The smallest attrs stage: the length of each text."""

    name = "lengthtest"

    def compute(self, table: pa.Table) -> pa.Table:
        return pa.table({"chars": pc.utf8_length(table.column("text"))})


@pytest.fixture
def upstream(tmp_path) -> tuple[Lake, str, Manifest]:
    """A complete upstream manifest of S real one-row shards."""
    lake = Lake(str(tmp_path / "lake"), "web", "2026-12-02")
    shards = []
    for i in range(S):
        uri = lake.shard_uri(f"s{i:04d}")
        nbytes, checksum = write_parquet(uri, pa.table({"id": [f"d{i}"], "text": ["x" * i]}))
        shards.append(ShardEntry(f"s{i:04d}", uri, rows=1, bytes=nbytes, checksum=checksum, unit_id=f"s{i:04d}"))
    m = Manifest(
        dataset="web",
        stage="ingest",
        run_id="up",
        fingerprint="0" * 16,
        lake=lake.to_dict(),
        units=[UnitEntry(s.shard_id, [s.uri], s.checksum, status="done") for s in shards],
        shards=shards,
        status="complete",
        accounting={"read": S, "kept": S},
    )
    uri = m.write(lake.manifest_uri("up", "ingest"))
    return lake, uri, m


def _stage(lake: Lake, upstream_uri: str) -> LengthStage:
    return LengthStage(lake, {"input_manifest": upstream_uri, "stream": False}, "r1")


def test_a_group_task_plans_from_its_slice_only(upstream):
    lake, uri, _ = upstream
    whole = _stage(lake, uri).plan()
    count = 3  # group 2 holds positions 86..129: pages 1 and 2
    head = ManifestHead.read(uri)
    _flip_page(head, "shards", 0)
    _flip_page(head, "units", 1)  # a task never reads the upstream's units either
    m = StageRunner(_stage(lake, uri)).run(shard_group=(2, count))
    assert [(u.unit_id, u.input_checksum, u.rows) for u in m.units] == [
        (u.unit_id, u.input_checksum, u.rows) for u in _block(whole, 2, count)
    ]
    assert {u.status for u in m.units} == {"done"} and len(m.units) == S - 86
    assert [s.shard_id for s in m.shards] == [f"s{i:04d}" for i in range(86, S)]
    assert m.shards[1].attrs["lengthtest"] and m.accounting["read"] == S - 86
    with pytest.raises(ManifestPageError, match="page 0"):  # the whole plan does read that page
        _stage(lake, uri).plan()


def test_groups_give_the_units_and_shards_of_a_whole_run(upstream):
    lake, uri, up = upstream
    whole = _stage(lake, uri).plan()
    count = 3
    for index in range(count):
        m = StageRunner(_stage(lake, uri)).run(shard_group=(index, count))
        assert [u.unit_id for u in m.units] == [u.unit_id for u in _block(whole, index, count)]
        assert [u.input_checksum for u in m.units] == [u.input_checksum for u in _block(whole, index, count)]
        assert [s.shard_id for s in m.shards] == [s.shard_id for s in _block(up.shards, index, count)]
    stage = _stage(lake, uri)
    assert unfinished_groups(stage.manifest_uri, count) == []
    final = StageRunner(stage).run(collect=True)
    assert final.status == "complete" and [s.shard_id for s in final.shards] == [s.shard_id for s in up.shards]
    assert final.accounting["read"] == S and {u.status for u in final.units} == {"skipped"}


def test_the_gate_looks_at_an_ended_run_through_its_head(upstream):
    lake, uri, up = upstream
    stage = _stage(lake, uri)
    final = StageRunner(stage).run()
    look = CheckpointWatcher(stage.manifest_uri).look()
    assert (look.done, look.total, look.rows, look.shards, look.bytes) == (S, S, final.rows, S, final.bytes)
    assert look.complete and look.books is None
    # The final look needs neither the run's pages nor its upstream's, only both heads.
    for name in ("up", "r1"):
        folder = os.path.dirname(lake.manifest_uri(name, "x"))
        for sub in os.listdir(folder):
            if sub.endswith(".index"):
                for f in os.listdir(os.path.join(folder, sub)):
                    os.unlink(os.path.join(folder, sub, f))
    again = CheckpointWatcher(stage.manifest_uri).look()
    assert (again.done, again.rows, again.complete, again.books) == (S, final.rows, True, None)
    # The books still come from the heads: an upstream that hands on one row more fails the gate.
    head = json.loads(open(uri).read())
    head["totals"]["rows"] += 1
    storage.write_json(uri, head)
    assert "lost or invented" in CheckpointWatcher(stage.manifest_uri).look().books


def test_a_group_task_reads_an_upstream_manifest_of_format_1(upstream):
    lake, uri, up = upstream
    storage.write_json(uri, {**up.to_dict(), "format_version": 1})  # written before the split
    stage = _stage(lake, uri)
    whole = stage.plan()
    assert [u.unit_id for u in _stage(lake, uri).plan_group(2, 7)] == [u.unit_id for u in _block(whole, 2, 7)]


def test_a_streaming_group_task_reads_and_runs_only_its_block_of_upstream_units(upstream, monkeypatch):
    """While the upstream run goes (manifest planned, records appearing), task i of n streams the upstream units
    of block i only: it reads only the unit pages that hold them (never the run's other pages) and runs their
    shards, leaving the other blocks to the other tasks (each used to read the whole manifest and run all)."""
    from dataclasses import asdict

    from airflow_curation.core.checkpoint import CheckpointRecord

    lake, uri, up = upstream
    planned = Manifest(**{**up.__dict__, "status": "planned", "shards": [], "units": list(up.units)})
    planned.write(uri)
    store = lake.checkpoints(up.stage, up.fingerprint)
    for unit, shard in zip(up.units, up.shards):
        store.commit(CheckpointRecord(unit.unit_id, up.stage, up.fingerprint, unit.input_checksum, [asdict(shard)]))
    _flip_page(ManifestHead.read(uri), "units", 2)  # group 0 of 2 (positions 0..64) never reads page 2
    reads = _ReadCounter(monkeypatch)
    stage = LengthStage(lake, {"input_manifest": uri, "upstream_wait_s": 0, "stream_poll_s": 0.01}, "r1")
    assert stage._stream_upstream(uri, (0, 2)) is True  # no new upstream shard: it stops waiting
    block = [u.unit_id for u in _block(up.units, 0, 2)]
    done, _ = stage.checkpoints.scan()
    assert done == set(block)
    lengths = ManifestHead.read(uri).data["index"]["units"]["lengths"]
    assert reads.bytes == lengths[0] + lengths[1]  # its two pages, once (the head's index did not change)


# --- a gate's look while the run goes: what changed, from the tasks' tallies, not every record ---------------


class _NoRecords:
    """Fails any read of the checkpoint folder (a listing, a record, a failure marker): what a gate's look at
    a running stage did per look before tallies."""

    def __init__(self, monkeypatch) -> None:
        from airflow_curation.core.checkpoint import CheckpointStore

        def refuse(*args, **kwargs):
            raise AssertionError("the gate read the checkpoint folder")

        for name in ("scan", "load", "is_done", "failure"):
            monkeypatch.setattr(CheckpointStore, name, refuse)


def _tally_reads(monkeypatch) -> list[str]:
    """Paths of the files the gate fetches (``fs.cat``: tallies, never records)."""
    from fsspec.implementations.local import LocalFileSystem

    got: list[str] = []
    real = LocalFileSystem.cat

    def cat(self, path, *args, **kwargs):
        got.extend([path] if isinstance(path, str) else path)
        return real(self, path, *args, **kwargs)

    monkeypatch.setattr(LocalFileSystem, "cat", cat)
    return got


def test_a_gate_look_while_the_run_goes_reads_the_tallies_that_changed(upstream, monkeypatch):
    """Two of three groups done, the run still planned: a fresh gate counts their units, rows and shards, and
    logs each unit's line, without listing or reading the checkpoint folder; its next look reads nothing
    until a task ends more units, and then only that task's tally files."""
    lake, uri, _ = upstream
    stage = _stage(lake, uri)
    done = [StageRunner(_stage(lake, uri)).run(shard_group=(i, 3)) for i in (0, 1)]
    records = {u: r for u, r in ((u, stage.checkpoints.load(u)) for u in stage.checkpoints.scan()[0])}
    expected = [u.unit_id for m in done for u in m.units]
    with monkeypatch.context() as m:
        _NoRecords(m)
        reads = _tally_reads(m)
        watcher = CheckpointWatcher(stage.manifest_uri)
        look = watcher.look()
        assert look.manifest_status == "planned" and not look.complete
        assert (look.done, look.total, look.failed) == (len(expected), S, 0)
        assert look.rows == sum(s.rows for m in done for s in m.shards) == len(expected)
        assert look.shards == len(expected) and look.bytes == sum(s.bytes for m in done for s in m.shards)
        assert sorted(watcher.new_units) == sorted(expected)
        assert all(watcher.new_units[u]["accounting"] == records[u].accounting for u in expected)
        first = len(reads)
        assert first == 2  # one tally a task here (43 units each, a chunk holds 64)
        again = watcher.look()
        assert (again.done, watcher.new_units, len(reads)) == (look.done, {}, first)
    StageRunner(_stage(lake, uri)).run(shard_group=(2, 3))
    with monkeypatch.context() as m:
        _NoRecords(m)
        reads = _tally_reads(m)
        last = watcher.look()
        assert (last.done, last.total, len(reads)) == (S, S, 1)
        assert sorted(watcher.new_units) == [f"s{i:04d}" for i in range(86, S)]
    final = StageRunner(_stage(lake, uri)).run(collect=True)
    closed = watcher.look()  # the final manifest: its head
    assert closed.complete and (closed.done, closed.rows) == (S, final.rows)


class FailingLengthStage(LengthStage):
    def process_unit(self, unit):
        if unit.unit_id == "s0005":
            raise ValueError("boom")
        return super().process_unit(unit)


def test_a_failed_unit_counts_at_once_and_a_reopen_clears_it(upstream):
    """A unit that failed counts against the budget in the next look (its task's tally says so); once
    ``jobs reopen`` reopens it for a relaunch, the gate waits for it again instead of failing on it."""
    from airflow_curation.jobs.progress import reopen
    from airflow_curation.stages.base import StageFailed

    lake, uri, _ = upstream
    cfg = {"input_manifest": uri, "stream": False, "max_attempts": 1}
    with pytest.raises(StageFailed, match="s0005"):
        StageRunner(FailingLengthStage(lake, cfg, "r1")).run(shard_group=(0, 2))
    stage = FailingLengthStage(lake, cfg, "r1")
    kept = CheckpointWatcher(stage.manifest_uri)  # a gate that goes on looking across the relaunch
    look = kept.look()
    assert (look.failed, look.failed_units, look.done) == (1, ["s0005"], S // 2 - 1)
    assert look.over_budget
    # (a group does not write the manifest: the unit's error is in its failure marker and its tally)
    assert reopen(stage.manifest_uri) == {"s0005": "not finished", **_pending(S // 2, S)}
    for watcher in (CheckpointWatcher(stage.manifest_uri), kept):
        look = watcher.look()
        assert (look.failed, look.done, look.manifest_status) == (0, S // 2 - 1, "planned")


def _pending(start: int, stop: int) -> dict[str, str]:
    return {f"s{i:04d}": "not finished" for i in range(start, stop)}


def test_a_manifest_of_a_newer_format_is_refused_by_name(tmp_path):
    """A reader older than the writer says so (a shard entry's new fields would otherwise fail as a TypeError)."""
    m = _manifest(3)
    uri = str(tmp_path / "m.json")
    m.write(uri)
    head = json.loads(open(uri).read())
    storage.write_json(uri, {**head, "format_version": FORMAT_VERSION + 1})
    with pytest.raises(ManifestError, match=r"format_version .* not supported .*written by a newer airflow-curation"):
        Manifest.read(uri)


def test_a_page_is_named_by_its_entries_not_by_their_key_order(tmp_path):
    """A unit done in this run and one skipped (its record loaded from its checkpoint) hand on equal entries
    whose dicts hold their keys in another order. The pages' checksums name the run to downstream stages
    (export's scatter key, mix's plan file): they differed, so a rerun that skipped units made export scatter
    under a new key and leave the old key's mark behind."""
    fresh = _manifest(3)
    loaded = replace(_manifest(3), created_at=fresh.created_at)
    for s in fresh.shards:
        s.attrs = {"preprocess": "/lake/a/p.parquet", "mix": "/lake/a/m.parquet"}
        s.files = {"packed": {"uri": "/lake/p.parquet", "checksum": "xxh64:1", "bytes": 5}}
    for s in loaded.shards:
        s.attrs = {"mix": "/lake/a/m.parquet", "preprocess": "/lake/a/p.parquet"}
        s.files = {"packed": {"bytes": 5, "checksum": "xxh64:1", "uri": "/lake/p.parquet"}}
    assert fresh == loaded
    a, b = (ManifestHead.read(m.write(str(tmp_path / f"{k}.json"))) for k, m in (("a", fresh), ("b", loaded)))
    for kind in ("units", "shards"):
        assert a.data["index"][kind]["checksums"] == b.data["index"][kind]["checksums"]


def test_a_group_task_reads_the_upstream_head_once(upstream, monkeypatch):
    """The wait for a complete upstream and the plan's entries share one read of its head (on an object store
    each read is a GET, tens of ms: the plan's whole budget at 50,000 shards is 50 ms)."""
    from airflow_curation.core import manifest as manifest_module

    lake, uri, _ = upstream
    reads: list[str] = []
    real = manifest_module.storage.read_json

    def counting(url, *a, **k):
        reads.append(url)
        return real(url, *a, **k)

    monkeypatch.setattr(manifest_module.storage, "read_json", counting)
    m = StageRunner(_stage(lake, uri)).run(shard_group=(2, 3))
    assert {u.status for u in m.units} == {"done"}
    assert reads.count(uri) == 1, reads
