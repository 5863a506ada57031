"""Incremental dedup across snapshots: three dated snapshots with planted cross-date duplicates, exact
expected marks, agreement with a full recompute, reruns (earlier dates only, idempotent), partition counts
that differ between snapshots, opting out, and a corrupted earlier index."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_curation.core import storage, uris
from airflow_curation.core.integrity import IntegrityError
from airflow_curation.core.layout import Lake
from airflow_curation.core.lsh import partition_of, read_nested_partition, read_partition, write_partitioned
from airflow_curation.core.manifest import Manifest, ShardEntry
from airflow_curation.core.shards import write_parquet
from airflow_curation.stages.base import StageFailed, StageRunner
from airflow_curation.stages.dedup import snapshots
from airflow_curation.stages.dedup import stage as dedup_stage
from airflow_curation.stages.dedup.stage import DedupStage

from .corpus import exact_jaccard_matrix, handbook_docs

DATES = ("2026-01-01", "2026-01-02", "2026-01-03")


def _edit(text: str, k: int) -> str:
    """A near copy: ``k`` words replaced in a long page (Jaccard of 5-gram sets well above 0.9)."""
    words = text.split()
    rng = random.Random(k)
    for i in rng.sample(range(len(words)), k):
        words[i] = f"edited{i}"
    return " ".join(words)


@pytest.fixture(scope="module")
def pages() -> list[tuple[str, str]]:
    """Long handbook pages, pairwise unrelated (Jaccard < 0.3), enough for three snapshots."""
    docs = [(i, t) for i, t in handbook_docs() if len(t.split()) > 1500]
    jac = exact_jaccard_matrix([t for _, t in docs])
    chosen: list[int] = []
    for k in range(len(docs)):
        if all(jac[k, j] < 0.3 for j in chosen):
            chosen.append(k)
        if len(chosen) == 16:
            break
    assert len(chosen) == 16
    return [docs[k] for k in chosen]


def plant(pages):
    """The three snapshots (two shards each) and the expected cross-date marks:
    id -> (prior_snapshot, prior_id, exact)."""
    t = dict(pages)
    names = [i for i, _ in pages]
    a = names[:7]  # first seen on day 1
    b = names[7:12]  # first seen on day 2
    c = names[12:16]  # first seen on day 3
    # a near pair inside day 1; the copy is the 8th row, so it lands after a1 (shard 1, row 3 > row 0)
    d1 = [(f"d1-{n}", t[n]) for n in a] + [("d1-a1-copy", _edit(t[a[1]], 5))]
    d2 = [(f"d2-{n}", t[n]) for n in b] + [
        ("d2-near-a3", _edit(t[a[3]], 6)),  # near copy of day 1
        ("d2-exact-a5", t[a[5]]),  # exact copy of day 1
        ("d2-copy-of-a1-copy", _edit(t[a[1]], 5)),  # exact copy of day 1's duplicate: its first is d1-a1
    ]
    d3 = [(f"d3-{n}", t[n]) for n in c] + [
        ("d3-near-b2", _edit(t[b[2]], 7)),  # near copy of day 2
        ("d3-near-d2-near-a3", _edit(_edit(t[a[3]], 6), 3)),  # chain: its first is day 1's a3
        ("d3-exact-a0", "  " + t[a[0]].upper() + " "),  # same after normalisation: exact
        ("d3-pair-x", _edit(t[a[4]], 4)),  # a pair inside day 3 ...
        ("d3-pair-y", _edit(_edit(t[a[4]], 4), 2)),  # ... of which both are copies of day 1's a4
    ]
    expected = {
        "d2-near-a3": ("2026-01-01", f"d1-{a[3]}", False),
        "d2-exact-a5": ("2026-01-01", f"d1-{a[5]}", True),
        "d2-copy-of-a1-copy": ("2026-01-01", f"d1-{a[1]}", True),
        "d3-near-b2": ("2026-01-02", f"d2-{b[2]}", False),
        "d3-near-d2-near-a3": ("2026-01-01", f"d1-{a[3]}", False),
        "d3-exact-a0": ("2026-01-01", f"d1-{a[0]}", True),
        "d3-pair-x": ("2026-01-01", f"d1-{a[4]}", False),
        "d3-pair-y": ("2026-01-01", f"d1-{a[4]}", False),
    }
    return {DATES[0]: d1, DATES[1]: d2, DATES[2]: d3}, expected


def _snapshot_lake(root, date, docs) -> Lake:
    """One snapshot: two shards and a complete ingest manifest (rows interleaved across shards)."""
    lake = Lake(str(root), "web", date)
    entries = []
    for k in range(2):
        part = docs[k::2]
        sid = f"part-{k:05d}"
        table = pa.table(
            {
                "id": [i for i, _ in part],
                "text": [x for _, x in part],
                "source": ["s"] * len(part),
                "meta": [None] * len(part),
            }
        )
        n, ck = write_parquet(lake.shard_uri(sid), table, row_group_rows=4)
        entries.append(ShardEntry(shard_id=sid, uri=lake.shard_uri(sid), rows=len(part), bytes=n, checksum=ck))
    Manifest(
        dataset="web",
        stage="ingest",
        run_id="r",
        fingerprint="f",
        lake=lake.to_dict(),
        shards=entries,
        status="complete",
    ).write(lake.manifest_uri("r", "ingest"))
    return lake


def _dedup(lake: Lake, run_id: str = "r", **config) -> tuple[Manifest, dict[str, dict], DedupStage]:
    config = {"across_snapshots": True, **config}
    stage = DedupStage(lake, {"input_manifest": lake.manifest_uri("r", "ingest"), **config}, run_id)
    manifest = StageRunner(stage).run()
    rows = {}
    for s in manifest.shards:
        for row in pq.read_table(s.attrs["dedup"]).to_pylist():
            rows[row["id"]] = row
    return manifest, rows, stage


@pytest.fixture(scope="module")
def three(pages, tmp_path_factory):
    root = tmp_path_factory.mktemp("incr") / "lake"
    days, expected = plant(pages)
    lakes = {d: _snapshot_lake(root, d, docs) for d, docs in days.items()}
    results = {d: _dedup(lakes[d]) for d in DATES}
    return root, days, expected, lakes, results


def test_cross_date_duplicates_are_marked_in_the_later_snapshot(three):
    _, days, expected, _, results = three
    for date in DATES:
        manifest, rows, stage = results[date]
        assert manifest.status == "complete"
        assert [p["snapshot"] for p in stage.config["prior_indexes"]] == [d for d in DATES if d < date]
        for doc_id, _ in days[date]:
            row = rows[doc_id]
            want = expected.get(doc_id)
            got = (row["prior_snapshot"], row["prior_id"], row["exact_duplicate"]) if row["prior_snapshot"] else None
            assert got == want, doc_id
            if want:
                assert row["is_duplicate"] and row["near_duplicate"] == (not want[2])
        acc = manifest.accounting
        assert acc["read"] == len(days[date]) == acc["kept"] + sum(acc["dropped"].values())
    # inside day 1 only the planted pair; on day 3 the pair's keeper is a duplicate too (of day 1)
    rows1 = results[DATES[0]][1]
    assert [i for i, r in rows1.items() if r["is_duplicate"]] == ["d1-a1-copy"]
    rows3 = results[DATES[2]][1]
    assert rows3["d3-pair-x"]["cluster_id"] == rows3["d3-pair-y"]["cluster_id"]
    assert {i for i, r in rows3.items() if r["is_duplicate"]} == {i for i in expected if i.startswith("d3-")}


def test_agrees_with_a_full_recompute_over_all_snapshots(three, tmp_path):
    """Our own dedup over the three days as one dataset (in date order) marks the same later rows."""
    _, _, _, _, results = three
    files = []
    for date in DATES:
        for s in results[date][0].shards:
            files.append(s.uri)
    # plain-file inputs are named by their stem: copy them under distinct names
    named = []
    for k, f in enumerate(files):
        dst = str(tmp_path / f"f{k}.parquet")
        storage.write_bytes(dst, storage.read_bytes(f))
        named.append(dst)
    full = DedupStage(Lake(str(tmp_path / "l"), "all"), {"inputs": named, "output_dir": str(tmp_path / "o")}, "r")
    StageRunner(full).run()
    recomputed = {}
    for k in range(len(named)):
        for row in pq.read_table(str(tmp_path / "o" / f"f{k}.parquet")).to_pylist():
            recomputed[row["id"]] = row["is_duplicate"]
    incremental = {i: r["is_duplicate"] for d in DATES for i, r in results[d][1].items()}
    assert incremental == recomputed


def test_rerun_of_an_earlier_date_probes_only_earlier_dates_and_changes_nothing(three):
    _, _, _, lakes, results = three
    manifest2, rows2, stage2 = results[DATES[1]]
    again, rows, stage = _dedup(lakes[DATES[1]], run_id="rerun")  # day 3 exists now
    assert [p["snapshot"] for p in stage.config["prior_indexes"]] == [DATES[0]]
    assert stage.fingerprint == stage2.fingerprint
    assert all(u.status == "skipped" for u in again.units)
    assert rows == rows2
    # the index it rewrites is byte-identical, so day 3's fingerprint still holds
    _, _, stage3 = results[DATES[2]]
    again3, rows3, s3 = _dedup(lakes[DATES[2]], run_id="rerun")
    assert s3.fingerprint == stage3.fingerprint and all(u.status == "skipped" for u in again3.units)
    assert rows3 == results[DATES[2]][1]


def test_other_partition_counts_and_opting_out(pages, tmp_path):
    days, expected = plant(pages)
    lakes = {d: _snapshot_lake(tmp_path / "lake", d, docs) for d, docs in days.items()}
    got = {}
    for date, parts in zip(DATES, (1, 8, 2)):  # every snapshot with its own (power-of-two) partition count
        _, rows, _ = _dedup(lakes[date], partitions=parts)
        got.update({i: (r["prior_snapshot"], r["prior_id"], r["exact_duplicate"]) for i, r in rows.items()})
    assert {i: v for i, v in got.items() if v[0]} == expected
    _, rows, stage = _dedup(lakes[DATES[2]], run_id="off", across_snapshots=False)
    assert stage.config["prior_indexes"] == [] and "prior_snapshot" not in next(iter(rows.values()))
    # only the pair inside day 3 remains; nothing points at an earlier date
    assert [i for i, r in rows.items() if r["is_duplicate"]] == ["d3-pair-x"]


def test_a_corrupted_earlier_index_fails_the_later_snapshot_clearly(pages, tmp_path):
    days, _ = plant(pages)
    lakes = {d: _snapshot_lake(tmp_path / "lake", d, docs) for d, docs in days.items()}
    _dedup(lakes[DATES[0]])
    index = storage.read_json(snapshots.index_uri(lakes[DATES[0]], snapshots.index_key(_dedup_params(lakes))))
    spill = uris.resolve(index["shards"][0]["bands"]["uri"], lakes[DATES[0]].root)  # stored relative to the root
    data = bytearray(storage.read_bytes(spill))
    data[len(data) // 2] ^= 0xFF
    storage.write_bytes(spill, bytes(data))
    with pytest.raises((IntegrityError, StageFailed), match="checksum"):
        _dedup(lakes[DATES[1]])


def _dedup_params(lakes):
    lake = lakes[DATES[0]]
    return DedupStage(lake, {"input_manifest": lake.manifest_uri("r", "ingest")}, "x").params


def test_nested_partitions_read_the_same_rows(tmp_path):
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 2**63, 5000, dtype=np.uint64)
    nodes = np.arange(keys.size, dtype=np.uint64)
    cols = {"bucket": np.uint64, "node": np.uint64}
    for file_parts in (1, 2, 8, 32):
        uri = str(tmp_path / f"f{file_parts}.parquet")
        write_partitioned(uri, {"bucket": keys, "node": nodes}, partition_of(keys, file_parts))
        for parts in (1, 4, 8, 64):
            for p in (0, parts - 1):
                got = read_nested_partition([uri], p, parts, file_parts, cols, "bucket")
                want = nodes[partition_of(keys, parts) == p]
                assert sorted(got["node"].tolist()) == want.tolist()
        assert read_partition([uri], 0, cols)["node"].size == (partition_of(keys, file_parts) == 0).sum()
    with pytest.raises(ValueError, match="powers of two"):
        read_nested_partition([uri], 0, 3, 32, cols, "bucket")


def test_killed_during_its_attrs_a_later_snapshot_resumes_to_the_same_marks(three, tmp_path):
    """SIGKILL (``CURATION_FAULT``) after the probe, while writing the second shard's attrs; the rerun resumes
    (the probe's result is reused) and gives the marks of a clean run."""
    import os
    import subprocess
    import sys

    from airflow_curation.jobs.spec import JobSpec

    _, days, _, _, results = three
    # the same three days in a new lake; days 1 and 2 deduplicated as before, day 3 as a job that is killed
    for date in DATES:
        _snapshot_lake(tmp_path / "lake", date, days[date])
        if date != DATES[2]:
            _dedup(Lake(str(tmp_path / "lake"), "web", date))
    lake = Lake(str(tmp_path / "lake"), "web", DATES[2])
    config = {"input_manifest": lake.manifest_uri("r", "ingest"), "across_snapshots": True}
    spec = JobSpec("dedup", lake.to_dict(), "k", config)
    path = tmp_path / "spec.json"
    path.write_text(spec.to_json())
    env = {**os.environ, "CURATION_FAULT": "dedup.before_attrs@2"}
    cmd = [sys.executable, "-m", "airflow_curation.jobs", "run", str(path)]
    killed = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert killed.returncode == -9, killed.stderr[-2000:]
    env.pop("CURATION_FAULT")
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    manifest = Manifest.read(lake.manifest_uri("k", "dedup"))
    assert manifest.status == "complete"
    assert [u.status for u in manifest.units].count("skipped") == 1  # the shard done before the kill
    rows = {}
    for s in manifest.shards:
        rows.update({r["id"]: r for r in pq.read_table(s.attrs["dedup"]).to_pylist()})
    assert rows == results[DATES[2]][1]  # every column of every row, as in the clean run


def test_a_probe_file_gone_after_its_mark_fails_named_and_the_rerun_probes_again(three, tmp_path):
    """A file of the done probe against earlier snapshots deleted while phase 3 was still to do: every unit that
    read it failed, and so did every rerun (the probe's ``_SUCCESS.json`` kept it from being redone). The unit now
    removes the probe's mark with the error naming the file; the next run probes again, to the clean run's marks."""
    import os
    import shutil

    from airflow_curation.core import storage, uris
    from airflow_curation.stages.base import StageFailed

    _, days, _, _, results = three
    for date in DATES[:2]:
        _snapshot_lake(tmp_path / "lake", date, days[date])
        _dedup(Lake(str(tmp_path / "lake"), "web", date))
    lake = _snapshot_lake(tmp_path / "lake", DATES[1], days[DATES[1]])
    shutil.rmtree(_dedup(lake)[2].checkpoints.directory)  # phase 3 to do again; the probe is done
    (done,) = [u for u in storage.glob(lake.path("dedup", "*", "prior-*", "_SUCCESS.json"))]
    victim = uris.resolve(storage.read_json(done)["uris"][0], lake.root)
    os.remove(victim)
    with pytest.raises(StageFailed, match=f"the global step's file {victim} is missing.*run dedup again"):
        _dedup(lake)
    assert not os.path.exists(done)
    manifest, rows, _ = _dedup(lake)
    assert manifest.status == "complete" and os.path.exists(victim)
    assert rows == results[DATES[1]][1]  # every column of every row, as in the clean run


@pytest.mark.parametrize("out_partitions", [256, 1])
def test_past_memory_each_snapshot_marks_the_same_rows(three, tmp_path, monkeypatch, out_partitions):
    """With a budget that splits the global phase into many LSH partitions (whose labels are then gathered
    by output partition), every snapshot's rows, prior matches included, are the unconstrained run's; also
    where every shard shares one output partition (each reads its own batch of the labels and priors)."""
    monkeypatch.setattr(dedup_stage, "MAX_OUT_PARTITIONS", out_partitions)
    _, days, _, _, results = three
    lakes = {d: _snapshot_lake(tmp_path / "lake", d, docs) for d, docs in days.items()}
    for date in DATES:
        _, rows, stage = _dedup(lakes[date], memory_budget=2048)
        assert stage._global["partitions"] > 1 and stage._global["gathered"]
        assert rows == results[date][1], date


def test_a_parquet_glob_over_the_lake_reads_only_parquet(three, tmp_path):
    """DuckDB's and Daft's ``**/*.parquet`` over a lake (or an output folder) read every file so named: dedup's
    spill, edges, labels, prior index and matches are Arrow IPC and must not be named ``.parquet`` (a glob
    failed on them with 'No magic bytes found')."""
    import duckdb

    _, days, _, _, _ = three
    root = tmp_path / "lake"
    lakes = {d: _snapshot_lake(root, d, docs) for d, docs in days.items()}
    for date in DATES:  # a budget that splits the global phase: component rounds, gathered labels, priors
        _dedup(lakes[date], memory_budget=2048)
    named = sorted(root.rglob("*.parquet"))
    for f in named:
        pq.ParquetFile(f)  # raises on a file that is not Parquet
    assert len(named) >= 2 * 2 * len(DATES), named  # each snapshot's two shards and their attrs
    kinds = {p.parent.name for p in root.rglob("*.arrow")}
    assert {"spill", "edges", "exact", "labels", "prior", "match"} <= kinds, kinds
    rows = duckdb.sql(f"select count(*) from read_parquet('{root}/**/*.parquet', union_by_name=true)").fetchall()[0][0]
    assert rows > 0


def test_an_earlier_date_not_yet_deduplicated_is_named_and_a_rerun_after_it_catches_up(three, tmp_path, caplog):
    """Dates run side by side (a backfill, two active runs): the later date's dedup can run before the earlier
    one's index exists. It used to probe what it found without a word; it now names the earlier snapshots it
    could not probe (log and manifest), and a rerun once they finished marks what the in-order run marks."""
    _, days, _, _, results = three
    root = tmp_path / "lake"
    lakes = {d: _snapshot_lake(root, d, docs) for d, docs in days.items()}
    _dedup(lakes[DATES[0]])
    with caplog.at_level("WARNING", logger="airflow_curation.stages.dedup.stage"):
        early, rows, stage = _dedup(lakes[DATES[2]], run_id="early")  # DATES[1] ingested, not deduplicated
    assert early.config["unprobed_snapshots"] == [DATES[1]]
    assert [p["snapshot"] for p in early.config["prior_indexes"]] == [DATES[0]]
    assert f"the earlier snapshots {DATES[1]} have no finished dedup index" in caplog.text
    assert rows != results[DATES[2]][1]  # the documents of DATES[1] were not probed
    _dedup(lakes[DATES[1]])
    again, rows, stage2 = _dedup(lakes[DATES[2]], run_id="again")
    assert again.config["unprobed_snapshots"] == [] and stage2.fingerprint != stage.fingerprint
    assert rows == results[DATES[2]][1]
