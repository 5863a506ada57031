"""Checkpoint store: a unit is done exactly when a record with matching checksum and fingerprint exists."""

import os

from airflow_curation.core.checkpoint import CheckpointRecord, CheckpointStore


def _rec(unit="u1", checksum="xxh64:aa", fp="fp1", **kw) -> CheckpointRecord:
    return CheckpointRecord(
        unit_id=unit,
        stage="ingest",
        fingerprint=fp,
        input_checksum=checksum,
        outputs=[{"shard_id": unit, "uri": f"/x/{unit}.parquet", "rows": 3, "bytes": 9, "checksum": "c"}],
        accounting={"read": 3, "kept": 3, "dropped": {}, "quarantined": {}},
        **kw,
    )


def test_is_done_needs_matching_checksum_and_fingerprint(tmp_path):
    store = CheckpointStore(str(tmp_path / "ck"))
    assert store.is_done("u1", "xxh64:aa", "fp1") is None
    store.commit(_rec())
    rec = store.is_done("u1", "xxh64:aa", "fp1")
    assert rec is not None and rec.outputs[0]["rows"] == 3 and rec.accounting["kept"] == 3
    assert store.is_done("u1", "xxh64:bb", "fp1") is None  # input changed
    assert store.is_done("u1", "xxh64:aa", "fp2") is None  # config changed
    assert store.is_done("u2", "xxh64:aa", "fp1") is None


def test_record_round_trip_keeps_every_field(tmp_path):
    store = CheckpointStore(str(tmp_path))
    rec = _rec(attempt=2, started_at=100.0, finished_at=103.5, extra={"note": "x"})
    store.commit(rec)
    back = store.load("u1")
    assert back == rec
    assert back.seconds == 3.5


def test_failed_marker_and_scan(tmp_path):
    store = CheckpointStore(str(tmp_path))
    store.commit(_rec("a"))
    store.mark_failed("b", "ValueError: bad", attempt=2)
    store.mark_failed("c", "OSError: gone", attempt=1)
    assert store.failure("b") == {
        "unit_id": "b",
        "error": "ValueError: bad",
        "attempt": 2,
        "at": store.failure("b")["at"],
    }
    assert store.scan() == ({"a"}, {"b", "c"})
    # A later success clears the failure marker.
    store.commit(_rec("b"))
    assert store.failure("b") is None
    assert store.scan() == ({"a", "b"}, {"c"})


def test_scan_ignores_temporary_files_and_missing_directory(tmp_path):
    assert CheckpointStore(str(tmp_path / "missing")).scan() == (set(), set())
    store = CheckpointStore(str(tmp_path))
    (tmp_path / ".u9.json.tmp-123").write_text("{")
    store.commit(_rec("u1"))
    assert store.scan() == ({"u1"}, set())


def test_torn_or_foreign_record_means_not_done(tmp_path):
    store = CheckpointStore(str(tmp_path))
    (tmp_path / "u1.json").write_text('{"unit_id": "u1", "stage"')
    assert store.load("u1") is None
    (tmp_path / "u2.json").write_text('{"something": "else"}')
    assert store.load("u2") is None
    assert store.is_done("u2", "xxh64:aa", "fp1") is None


def test_commit_is_atomic_no_temp_left(tmp_path):
    store = CheckpointStore(str(tmp_path))
    store.commit(_rec("u1"))
    assert sorted(os.listdir(tmp_path)) == ["u1.json"]


def _written(tmp_path, name="out.parquet", data=b"0123456789" * 100) -> dict:
    """A file as a unit records it: uri, bytes, checksum, and its stamp at write time."""
    from airflow_curation.core import storage
    from airflow_curation.core.fingerprint import checksum_url

    path = str(tmp_path / name)
    storage.write_bytes(path, data)
    return {"uri": path, "bytes": len(data), "checksum": checksum_url(path), "stamp": storage.stat(path)[1]}


def test_a_same_size_corrupted_output_means_not_done(tmp_path, flip_byte):
    store = CheckpointStore(str(tmp_path / "ck"))
    out = _written(tmp_path)
    store.commit(_rec(files=[out]))
    assert store.is_done("u1", "xxh64:aa", "fp1") is not None
    flip_byte(out["uri"])  # same size: a size check alone would still trust it
    assert os.path.getsize(out["uri"]) == out["bytes"]
    assert store.is_done("u1", "xxh64:aa", "fp1") is None


def test_an_output_written_again_with_its_content_is_still_done(tmp_path):
    from airflow_curation.core import storage

    store = CheckpointStore(str(tmp_path / "ck"))
    out = _written(tmp_path)
    store.commit(_rec(files=[out]))
    with open(out["uri"], "rb") as f:
        storage.write_bytes(out["uri"], f.read())  # a new file (another stamp), the same bytes: re-hashed
    assert storage.stat(out["uri"])[1] != out["stamp"]
    assert store.is_done("u1", "xxh64:aa", "fp1") is not None


def test_an_unchanged_stamp_is_trusted_unless_rehash_is_asked(tmp_path):
    store = CheckpointStore(str(tmp_path / "ck"))
    out = _written(tmp_path)
    # A record whose checksum disagrees with the file while its stamp still matches: the fast path trusts
    # the stamp (nothing was written since), a rehash reads the file and finds the difference.
    store.commit(_rec(files=[{**out, "checksum": "xxh64:0000000000000000"}]))
    assert store.is_done("u1", "xxh64:aa", "fp1") is not None
    assert store.is_done("u1", "xxh64:aa", "fp1", rehash=True) is None


def test_a_record_without_stamps_is_verified_by_hash(tmp_path, flip_byte):
    store = CheckpointStore(str(tmp_path / "ck"))
    out = _written(tmp_path)
    del out["stamp"]  # what records written before stamps hold
    store.commit(_rec(files=[out]))
    assert store.is_done("u1", "xxh64:aa", "fp1") is not None
    flip_byte(out["uri"])
    assert store.is_done("u1", "xxh64:aa", "fp1") is None
