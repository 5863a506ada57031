"""Trust in what a rerun skips and what a stage reads (issue 9: items 3, 5, 7, 8, 9, 10).

Real stages on a small lake: outputs keyed by configuration, outputs re-verified, row books checked
across stages, stale temp files removed, one run per stage and snapshot, absolute lake roots.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_curation.core import storage
from airflow_curation.core.filters import apply_rules, resolve_rules
from airflow_curation.core.integrity import IntegrityError, chain_problem, verify_file
from airflow_curation.core.layout import Lake
from airflow_curation.core.lease import Lease, LeaseBusy
from airflow_curation.core.manifest import Manifest
from airflow_curation.core.shards import column_names, read_shard, write_parquet
from airflow_curation.core.signals import compute_signals
from airflow_curation.stages.base import StageFailed, StageRunner
from airflow_curation.stages.dedup.stage import DedupStage
from airflow_curation.stages.ingest.stage import IngestStage
from airflow_curation.stages.preprocess.stage import PreprocessStage

WORDS = (
    "the river runs past old stone walls where children play and merchants sell bread fish "
    "cloth lamps while evening light falls on quiet roofs of the town"
).split()


def _doc(i: int) -> str:
    # Deterministic prose-like text of varied length; every 7th is a near copy of the one before.
    n = 20 + (i * 37) % 180
    words = [WORDS[(i * 13 + k * 7 + k * k) % len(WORDS)] for k in range(n)]
    return " ".join(words) + "."


@pytest.fixture
def ingested(tmp_path) -> tuple[Lake, str]:
    raw = tmp_path / "raw"
    raw.mkdir()
    for f in range(3):
        lines = [json.dumps({"text": _doc(f * 40 + i)}) for i in range(40)]
        lines += [json.dumps({"text": _doc(f * 40)})]  # an exact duplicate inside each file
        (raw / f"part{f}.jsonl").write_text("\n".join(lines) + "\n")
    lake = Lake(str(tmp_path / "lake"), "web", "2026-12-01")
    stage = IngestStage(lake, {"inputs": [str(raw)], "unit_bytes": 1}, "ing")
    manifest = StageRunner(stage).run()
    assert manifest.status == "complete" and len(manifest.shards) == 3
    return lake, stage.manifest_uri


def _preprocess(lake: Lake, ingest_uri: str, run_id: str, **cfg) -> tuple[PreprocessStage, Manifest]:
    stage = PreprocessStage(lake, {"input_manifest": ingest_uri, "mapper": "local", **cfg}, run_id)
    return stage, StageRunner(stage).run()


# --- item 3: outputs keyed by configuration; a missing output is redone ---------------------------------


def test_rerun_of_an_earlier_config_does_not_trust_another_configs_files(ingested):
    lake, ingest_uri = ingested
    _, c4 = _preprocess(lake, ingest_uri, "p1", preset="c4")
    _, gopher = _preprocess(lake, ingest_uri, "p2", preset="gopher")
    stage, again = _preprocess(lake, ingest_uri, "p3", preset="c4")
    assert [u.status for u in again.units] == ["skipped"] * 3
    for entry in again.shards:
        attrs = pq.read_table(entry.attrs["preprocess"])
        expected = apply_rules(compute_signals(read_shard(entry.uri).column("text")), resolve_rules("c4"))
        assert attrs.column("keep").equals(expected.column("keep")), "the c4 rerun reads gopher decisions"
    paths = {s.attrs["preprocess"] for s in c4.shards} | {s.attrs["preprocess"] for s in gopher.shards}
    assert len(paths) == 6 and all(stage.fingerprint in s.attrs["preprocess"] for s in again.shards)


def test_a_deleted_attrs_file_makes_the_rerun_redo_that_unit_and_dedup_works(ingested):
    lake, ingest_uri = ingested
    _, first = _preprocess(lake, ingest_uri, "p1")
    os.remove(first.shards[1].attrs["preprocess"])
    stage, again = _preprocess(lake, ingest_uri, "p2")
    assert [u.status for u in again.units] == ["skipped", "done", "skipped"]
    assert os.path.exists(again.shards[1].attrs["preprocess"])
    dedup = StageRunner(DedupStage(lake, {"input_manifest": stage.manifest_uri}, "d1")).run()
    assert dedup.status == "complete" and dedup.accounting["read"] == first.accounting["read"]


# --- item 5: upstream outputs are re-verified ----------------------------------------------------------


def test_a_flipped_byte_in_a_shard_fails_its_preprocess_unit_clearly_without_retries(ingested, flip_byte):
    lake, ingest_uri = ingested
    bad = Manifest.read(ingest_uri).shards[0]
    flip_byte(bad.uri)
    stage = PreprocessStage(
        lake, {"input_manifest": ingest_uri, "mapper": "local", "max_attempts": 3, "max_failed_fraction": 0.5}, "p1"
    )
    manifest = StageRunner(stage).run()  # one of three units may fail
    failed = [u for u in manifest.units if u.status == "failed"]
    assert [u.unit_id for u in failed] == [bad.shard_id]
    assert "IntegrityError" in failed[0].error and bad.uri in failed[0].error
    assert stage.checkpoints.failure(bad.shard_id)["attempt"] == 1  # corruption is not retried
    # its rows are counted, not lost: read = every row the upstream manifest hands on
    assert manifest.accounting["quarantined"] == {"failed_unit": bad.rows}
    assert chain_problem(manifest, Manifest.read(ingest_uri)) is None


def test_a_flipped_byte_in_preprocess_attrs_fails_dedup(ingested, flip_byte):
    lake, ingest_uri = ingested
    stage, pre = _preprocess(lake, ingest_uri, "p1")
    uri = pre.shards[2].attrs["preprocess"]
    flip_byte(uri)
    # Dedup reads the attrs' footer while planning: a flip there fails the plan, one in the data fails the
    # unit that reads it; either way the error is the integrity check's, naming the file.
    with pytest.raises((StageFailed, IntegrityError), match=r"part-00002-000\.parquet has checksum"):
        StageRunner(DedupStage(lake, {"input_manifest": stage.manifest_uri}, "d1")).run()


def test_a_corrupted_footer_is_an_integrity_error_where_a_checksum_was_recorded(tmp_path):
    path = str(tmp_path / "a.parquet")
    _, checksum = write_parquet(path, pa.table({"id": ["a", "b"], "keep": [True, False]}))
    assert column_names(path, checksum) == ["id", "keep"]
    footer_len = int.from_bytes(open(path, "rb").read()[-8:-4], "little")
    with open(path, "r+b") as f:  # overwrite the footer's start: the schema no longer parses
        f.seek(os.path.getsize(path) - 8 - footer_len)
        f.write(b"\xff" * 16)
    with pytest.raises(IntegrityError, match="a.parquet has checksum .* but its manifest recorded"):
        column_names(path, checksum, "attrs")
    with pytest.raises(Exception) as raised:  # nothing recorded: the reader's own error, not a false verdict
        column_names(path)
    assert not isinstance(raised.value, IntegrityError)


def test_verify_file(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"abc")
    good = "xxh64:" + __import__("xxhash").xxh64(b"abc").hexdigest()
    verify_file(str(p), good)
    verify_file(str(p), None)  # nothing recorded: nothing to compare
    with pytest.raises(IntegrityError, match="corrupted or replaced"):
        verify_file(str(p), "xxh64:0000000000000000")
    with pytest.raises(IntegrityError, match="missing"):
        verify_file(str(tmp_path / "gone"), good)


# --- item 9: read comes from the upstream manifest; books checked across stages --------------------------


def test_a_unit_that_reads_fewer_rows_than_upstream_lists_fails(ingested):
    lake, ingest_uri = ingested
    upstream = Manifest.read(ingest_uri)
    upstream.shards[0].rows += 1  # the upstream says one row more than the shard holds: a lost row
    upstream.write(ingest_uri)
    stage = PreprocessStage(lake, {"input_manifest": ingest_uri, "mapper": "local"}, "p1")
    with pytest.raises(StageFailed, match="upstream manifest lists"):
        StageRunner(stage).run()


def test_chain_check_catches_rows_lost_between_stages(ingested):
    lake, ingest_uri = ingested
    stage, pre = _preprocess(lake, ingest_uri, "p1")
    upstream = Manifest.read(ingest_uri)
    assert chain_problem(pre, upstream) is None
    assert pre.accounting["read"] == upstream.accounting["kept"]  # upstream kept == downstream read
    pre.accounting["read"] -= 5
    pre.accounting["kept"] -= 5
    assert "lost or invented" in chain_problem(pre, upstream)


def test_the_gate_fails_on_books_that_disagree_with_upstream(ingested):
    pytest.importorskip("airflow")
    from airflow_curation.triggers.shard_checkpoint import CheckpointWatcher, decide

    lake, ingest_uri = ingested
    stage, pre = _preprocess(lake, ingest_uri, "p1")
    assert decide(CheckpointWatcher(stage.manifest_uri).look())["status"] == "done"
    data = json.loads(open(stage.manifest_uri).read())
    data["accounting"]["read"] += 3
    data["accounting"]["kept"] += 3
    open(stage.manifest_uri, "w").write(json.dumps(data))
    event = decide(CheckpointWatcher(stage.manifest_uri).look())
    assert event["status"] == "failed" and "row accounting" in event["reason"]


# --- item 8: stale temps ---------------------------------------------------------------------------------


def test_a_rerun_removes_temps_of_dead_writers_and_keeps_live_ones(ingested):
    lake, ingest_uri = ingested
    stage, _ = _preprocess(lake, ingest_uri, "p1")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = storage._host()
    attrs_dir = os.path.dirname(Manifest.read(stage.manifest_uri).shards[0].attrs["preprocess"])
    stale = [
        os.path.join(lake.path("shards"), f".part-x.parquet.tmp-{host}-{dead.pid}-abcdef012345"),
        os.path.join(attrs_dir, f".part-y.parquet.tmp-{host}-{dead.pid}-abcdef012345"),
    ]
    live = os.path.join(attrs_dir, f".part-z.parquet.tmp-{host}-{os.getpid()}-abcdef012345")
    for p in (*stale, live):
        open(p, "wb").write(b"partial")
    _preprocess(lake, ingest_uri, "p2")
    assert not any(os.path.exists(p) for p in stale)
    assert os.path.exists(live)


def test_temp_names_carry_their_writer():
    with storage.atomic_open("/tmp/unused-by-test") as f:
        name = os.path.basename(f.name)
    assert storage._writer_of(name) == (storage._host(), os.getpid())
    os.remove("/tmp/unused-by-test")


# --- item 7: one run per stage and snapshot ---------------------------------------------------------------


def test_a_second_run_refuses_clearly_while_a_live_run_holds_the_lease(ingested):
    lake, ingest_uri = ingested
    stage, _ = _preprocess(lake, ingest_uri, "p1")
    with Lease(lake.path("_locks", "dedup.lease"), "a dedup"):
        with pytest.raises(LeaseBusy, match=f"dedup on {lake.base} is already running .*pid {os.getpid()}"):
            StageRunner(DedupStage(lake, {"input_manifest": stage.manifest_uri}, "d1")).run()


def test_a_dead_holders_lease_is_taken_over(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    uri = str(tmp_path / "x.lease")
    open(uri, "w").write(
        json.dumps({"token": "t", "host": storage.socket.gethostname(), "pid": dead.pid, "heartbeat": 1e12})
    )
    with Lease(uri, "x"):
        assert json.load(open(uri))["pid"] == os.getpid()
    assert open(uri).read() == ""  # released: no holder named


def test_a_killed_holder_releases_the_lease_at_once(tmp_path):
    uri = str(tmp_path / "x.lease")
    script = (
        "import sys, time; from airflow_curation.core.lease import Lease; Lease(sys.argv[1], 'x').acquire(); "
        "print('held', flush=True); time.sleep(600)"
    )
    holder = subprocess.Popen([sys.executable, "-c", script, uri], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(LeaseBusy, match=f"pid {holder.pid}"):
        Lease(uri, "x").acquire()
    holder.kill()
    holder.wait()
    with Lease(uri, "x"):
        pass


def test_a_waiting_run_gets_the_lease_when_the_holder_releases(tmp_path):
    uri = str(tmp_path / "x.lease")
    holder = Lease(uri, "x").acquire()
    threading.Timer(1.0, holder.release).start()
    with Lease(uri, "x", wait_s=30):
        pass


def test_two_concurrent_dedups_on_one_lake_both_finish_with_the_same_clusters(ingested, tmp_path):
    lake, ingest_uri = ingested
    stage, _ = _preprocess(lake, ingest_uri, "p1")
    procs = []
    for k in range(2):
        spec = {
            "spec_version": 1,
            "stage": "dedup",
            "run_id": f"d{k}",
            "lake": lake.to_dict(),
            "config": {"input_manifest": stage.manifest_uri, "lease_wait_s": 300},
        }
        path = tmp_path / f"spec{k}.json"
        path.write_text(json.dumps(spec))
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "airflow_curation.jobs", "run", str(path)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    tables = [
        [pq.read_table(s.attrs["dedup"]) for s in Manifest.read(lake.manifest_uri(f"d{k}", "dedup")).shards]
        for k in range(2)
    ]
    assert all(a.equals(b) for a, b in zip(*tables))


# --- item 10 ------------------------------------------------------------------------------------------


def test_a_relative_lake_root_is_stored_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lake = Lake("lake", "web")
    assert lake.root == str(tmp_path / "lake") and lake.to_dict()["root"] == str(tmp_path / "lake")
    assert Lake("file://" + str(tmp_path / "l2"), "web").root == str(tmp_path / "l2")
    assert Lake("s3://bucket/lake", "web").root == "s3://bucket/lake"
