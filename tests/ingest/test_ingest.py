"""Ingest on real files: every bad-input kind is quarantined with where and why, and nothing is lost."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from airflow_curation.core.checkpoint import CheckpointStore
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest
from airflow_curation.core.quarantine import read_quarantine
from airflow_curation.jobs.spec import JobSpec
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.ingest.stage import IngestStage, ReplaceRefused


def _ingest(lake: Lake, inputs, run_id="r1", **config):
    stage = IngestStage(lake, {"inputs": [str(i) for i in inputs], **config}, run_id)
    return stage, StageRunner(stage).run()


def _read_all(manifest: Manifest) -> pa.Table:
    return pa.concat_tables(pq.read_table(s.uri) for s in manifest.shards)


def _quarantine(lake: Lake) -> pa.Table:
    folder = lake.path("_quarantine", "ingest")
    return pa.concat_tables(
        read_quarantine(os.path.join(folder, f)) for f in sorted(os.listdir(folder)) if not f.startswith(".")
    )


def _jsonl(path, lines: list[bytes]):
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def test_jsonl_roundtrip_ids_and_meta(tmp_path):
    docs = [{"text": f"document number {i} " * 5, "url": f"https://e.x/{i}", "lang": "en"} for i in range(50)]
    src = tmp_path / "in"
    src.mkdir()
    _jsonl(src / "a.jsonl", [json.dumps(d).encode() for d in docs])
    lake = Lake(str(tmp_path / "lake"), "web")
    _, m = _ingest(lake, [src])
    t = _read_all(m)
    assert t.num_rows == 50 and m.rows == 50 and m.status == "complete"
    assert t.column("text").to_pylist() == [d["text"] for d in docs]
    assert len(set(t.column("id").to_pylist())) == 50
    assert all(s == "a.jsonl" for s in t.column("source").to_pylist())
    assert json.loads(t.column("meta")[3].as_py()) == {"url": "https://e.x/3", "lang": "en"}
    # Ids are stable: a second dataset from the same files gets the same ids.
    _, m2 = _ingest(Lake(str(tmp_path / "lake2"), "web"), [src])
    assert _read_all(m2).column("id").to_pylist() == t.column("id").to_pylist()
    # Shards are zstd with statistics, as every later engine expects.
    meta = pq.ParquetFile(m.shards[0].uri).metadata
    assert meta.row_group(0).column(1).compression == "ZSTD"


def test_every_bad_input_kind_is_quarantined_and_counted(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    good = [json.dumps({"text": f"good text {i}", "n": i}).encode() for i in range(10)]
    _jsonl(
        src / "01-mixed.jsonl",
        [
            good[0],
            b'{"text": "unterminated',  # invalid JSON
            b'{"text": "caf\xe9 latin-1"}',  # invalid UTF-8
            b'{"body": "no text field"}',  # missing text
            b'{"text": 42}',  # non-string text
            b'{"text": null}',  # null text
            b'{"text": "   "}',  # empty text
            b'{"text": "\\ud800 lone surrogate"}',  # valid JSON, not encodable text
            b"[1, 2, 3]",  # not an object
            b"",  # blank line: a separator, not a record
            good[1],
        ],
    )
    (src / "02-empty.jsonl").write_bytes(b"")
    # A truncated .gz: 2,000 good records, cut in the middle of the stream.
    full = gzip.compress(b"".join(json.dumps({"text": f"gz record {i} " * 20}).encode() + b"\n" for i in range(2000)))
    (src / "03-truncated.jsonl.gz").write_bytes(full[: len(full) // 2])
    (src / "04-ok.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(b"\n".join(good[2:6]) + b"\n"))
    big = "x" * (50 * 1024 * 1024)  # a 50 MB single document
    (src / "05-huge.jsonl").write_text(
        json.dumps({"text": big}) + "\n" + json.dumps({"text": "after the huge one"}) + "\n"
    )
    # Schema change between Parquet files: extra columns, then a text column of the wrong type.
    pq.write_table(pa.table({"text": ["pq one", "pq two"], "score": [1.0, 2.0]}), src / "06-a.parquet")
    pq.write_table(pa.table({"text": ["pq three"], "score": [3.0], "lang": ["de"]}), src / "07-b.parquet")
    pq.write_table(pa.table({"text": [1, 2, 3]}), src / "08-c.parquet")
    (src / "09-doc.txt").write_text("A whole plain-text document.\nSecond line.\n")
    (src / "10-bad.parquet").write_bytes(b"PAR1 this is not parquet")
    (src / "11-image.png").write_bytes(b"\x89PNG")

    lake = Lake(str(tmp_path / "lake"), "web")
    _, m = _ingest(lake, [src], max_text_bytes=32 * 1024 * 1024)
    acc = m.accounting
    q = _quarantine(lake)
    reasons = q.column("reason").to_pylist()

    kept = _read_all(m)
    texts = set(kept.column("text").to_pylist())
    assert {"good text 0", "good text 1", "after the huge one", "pq one", "pq two", "pq three"} <= texts
    assert "A whole plain-text document.\nSecond line.\n" in texts
    for reason in (
        "invalid_json",
        "invalid_utf8",
        "missing_text",
        "non_string_text",
        "empty_text",
        "not_an_object",
        "empty_file",
        "truncated_input",
        "text_too_large",
        "corrupt_input",
        "unsupported_format",
    ):
        assert reason in reasons, reason
    assert acc["quarantined"]["invalid_utf8"] == 2  # bad bytes and the lone surrogate
    assert acc["quarantined"]["missing_text"] == 2  # no field, and null
    assert acc["quarantined"]["non_string_text"] == 4  # 42, and the 3 int rows of 08-c.parquet
    assert acc["quarantined"]["text_too_large"] == 1
    # The truncated gzip kept what it could read, and the note says where it stopped.
    gz_rows = sum(1 for t in texts if t.startswith("gz record"))
    assert 0 < gz_rows < 2000
    note = q.filter(pa.compute.equal(q.column("reason"), "truncated_input")).to_pylist()[0]
    assert note["location"] == f"after line {gz_rows}" and note["source"].endswith("03-truncated.jsonl.gz")
    # Each record-level entry says file and line, and keeps the raw bytes for debugging.
    bad_json = q.filter(pa.compute.equal(q.column("reason"), "invalid_json")).to_pylist()[0]
    assert bad_json["location"] == "line 2" and bad_json["raw"] == b'{"text": "unterminated\n'
    huge = q.filter(pa.compute.equal(q.column("reason"), "text_too_large")).to_pylist()[0]
    assert huge["raw_bytes"] >= 50 * 1024 * 1024 and len(huge["raw"]) <= 64 * 1024
    # Schema change: the Parquet files' extra columns land in meta, whatever they are.
    metas = {r["text"]: r["meta"] for r in kept.select(["text", "meta"]).to_pylist()}
    assert json.loads(metas["pq three"]) == {"score": 3.0, "lang": "de"}
    # Nothing lost: every row read is kept or quarantined, and the shards hold exactly the kept rows.
    read_rows = 11 - 1 + (gz_rows) + 4 + 2 + 2 + 1 + 3 + 1  # blank line is not a row; the gz rows read
    assert acc["read"] == read_rows
    assert acc["read"] == acc["kept"] + sum(acc["dropped"].values()) + sum(acc["quarantined"].values())
    assert acc["kept"] == kept.num_rows == m.rows


def test_huge_document_kept_under_a_raised_limit(tmp_path):
    src = tmp_path / "huge.jsonl"
    src.write_text(json.dumps({"text": "y" * (50 * 1024 * 1024)}) + "\n")
    _, m = _ingest(Lake(str(tmp_path / "lake"), "web"), [src], max_text_bytes=64 * 1024 * 1024)
    assert m.accounting["kept"] == 1 and len(_read_all(m).column("text")[0].as_py()) == 50 * 1024 * 1024


def test_shards_roll_over_at_target_size_with_small_row_groups(tmp_path):
    src = tmp_path / "in.jsonl"
    _jsonl(src, [json.dumps({"text": f"{i} " + os.urandom(300).hex()}).encode() for i in range(3000)])
    _, m = _ingest(Lake(str(tmp_path / "lake"), "web"), [src], target_shard_bytes=200_000, row_group_rows=250)
    assert len(m.shards) > 3
    assert sum(s.rows for s in m.shards) == 3000
    for s in m.shards[:-1]:
        assert s.bytes >= 200_000 and s.bytes == os.path.getsize(s.uri)
        md = pq.ParquetFile(s.uri).metadata
        assert md.num_row_groups >= 2 and max(md.row_group(i).num_rows for i in range(md.num_row_groups)) <= 250


def test_rerun_does_no_work_and_changed_config_recomputes(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    for f in range(3):
        _jsonl(src / f"{f}.jsonl", [json.dumps({"text": f"file {f} doc {i}"}).encode() for i in range(20)])
    lake = Lake(str(tmp_path / "lake"), "web")
    stage, m1 = _ingest(lake, [src], unit_bytes=1)
    assert [u.status for u in m1.units] == ["done"] * 3
    mtimes = {s.uri: os.stat(s.uri).st_mtime_ns for s in m1.shards}
    _, m2 = _ingest(lake, [src], run_id="r2", unit_bytes=1)
    assert [u.status for u in m2.units] == ["skipped"] * 3
    assert {s.uri: os.stat(s.uri).st_mtime_ns for s in m2.shards} == mtimes
    assert m2.accounting == m1.accounting
    # A changed input file would rewrite complete runs' shards: refused, naming them, unless replace.
    _jsonl(src / "1.jsonl", [json.dumps({"text": f"changed doc {i}"}).encode() for i in range(5)])
    with pytest.raises(ReplaceRefused, match="complete run r1 .* pass --replace"):
        _ingest(lake, [src], run_id="r3", unit_bytes=1)
    assert {s.uri: os.stat(s.uri).st_mtime_ns for s in m1.shards} == mtimes
    # With replace, the changed file redoes that unit only, and the earlier runs are superseded.
    _, m3 = _ingest(lake, [src], run_id="r3", unit_bytes=1, replace=True)
    assert [u.status for u in m3.units] == ["skipped", "done", "skipped"] and m3.rows == 45
    assert m3.supersedes == [lake.manifest_uri("r1", "ingest"), lake.manifest_uri("r2", "ingest")]
    assert Manifest.read(lake.manifest_uri("r1", "ingest")).superseded_by == "r3"
    # A different setting is a different fingerprint: everything is recomputed.
    _, m4 = _ingest(lake, [src], run_id="r4", unit_bytes=1, row_group_rows=7, replace=True)
    assert [u.status for u in m4.units] == ["done"] * 3 and m4.fingerprint != m3.fingerprint


def test_killed_run_resumes_where_it_stopped(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    for f in range(12):
        _jsonl(
            src / f"{f:02d}.jsonl",
            [json.dumps({"text": f"f{f} " + os.urandom(200).hex()}).encode() for _ in range(6000)],
        )
    lake = Lake(str(tmp_path / "lake"), "web")
    spec = JobSpec("ingest", lake.to_dict(), "run1", {"inputs": [str(src)], "unit_bytes": 1})
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(spec.to_json())
    proc = subprocess.Popen(
        [sys.executable, "-m", "airflow_curation.jobs", "run", str(spec_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    stage = IngestStage(lake, spec.config, "run1")
    store = CheckpointStore(stage.checkpoints.directory)
    deadline = time.time() + 120
    while time.time() < deadline and len(store.scan()[0]) < 2:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = {u: store.load(u).finished_at for u in store.scan()[0]}
    assert 2 <= len(done_before) < 12, "the job should have been killed part-way"

    m = StageRunner(IngestStage(lake, spec.config, "run2")).run()
    statuses = {u.unit_id: u.status for u in m.units}
    assert {u for u, s in statuses.items() if s == "skipped"} == set(done_before)
    assert all(store.load(u).finished_at == t for u, t in done_before.items())
    assert m.rows == 12 * 6000 and m.accounting["read"] == 12 * 6000
    ids = _read_all(m).column("id").to_pylist()
    assert len(ids) == len(set(ids)) == 12 * 6000
    # No temporary files or stray shards survive the kill.
    shard_files = sorted(f for f in os.listdir(lake.path("shards")))
    assert shard_files == sorted(s.uri.rsplit("/", 1)[-1] for s in m.shards)


def test_process_pool_gives_the_same_result(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    for f in range(4):
        _jsonl(src / f"{f}.jsonl", [json.dumps({"text": f"{f}-{i}"}).encode() for i in range(100)])
    _, serial = _ingest(Lake(str(tmp_path / "a"), "web"), [src], unit_bytes=1)
    _, pooled = _ingest(Lake(str(tmp_path / "b"), "web"), [src], unit_bytes=1, workers=2)
    assert serial.fingerprint == pooled.fingerprint
    assert _read_all(serial).to_pylist() == _read_all(pooled).to_pylist()


def test_own_ids_and_line_mode_text(tmp_path):
    src = tmp_path / "ids.jsonl"
    _jsonl(src, [b'{"doc_id": "a", "text": "alpha"}', b'{"text": "no id"}', b'{"doc_id": "c", "text": "gamma"}'])
    _, m = _ingest(Lake(str(tmp_path / "lake"), "web"), [src], id_field="doc_id")
    assert _read_all(m).column("id").to_pylist() == ["a", "c"]
    assert m.accounting["quarantined"] == {"missing_id": 1}
    txt = tmp_path / "lines.txt"
    txt.write_text("one\n\ntwo\nthree\n")
    _, m2 = _ingest(Lake(str(tmp_path / "lake2"), "web"), [txt], text_mode="line")
    assert _read_all(m2).column("text").to_pylist() == ["one", "two", "three"]


def test_missing_input_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        _ingest(Lake(str(tmp_path / "lake"), "web"), [tmp_path / "nope"])
    with pytest.raises(ValueError, match="unknown settings"):
        IngestStage(Lake(str(tmp_path), "web"), {"inputs": ["x"], "txt_field": "body"}, "r")
