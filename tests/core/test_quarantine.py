"""Quarantine files keep where a bad record came from, why, and a bounded copy of it."""

import os

import pyarrow.parquet as pq

from airflow_curation.core.quarantine import MAX_RAW_BYTES, QuarantineWriter, read_quarantine


def test_write_and_read_back(tmp_path):
    uri = str(tmp_path / "q" / "u1.parquet")
    w = QuarantineWriter(uri)
    w.add("in/a.jsonl", "line 3", "invalid_json", "Expecting value: line 1", raw=b"{oops")
    w.add("in/a.jsonl", "line 9", "document_too_large", "60 MB", raw=b"x" * (MAX_RAW_BYTES * 3))
    assert len(w) == 2
    assert w.write() == uri
    t = read_quarantine(uri).to_pylist()
    assert [r["reason"] for r in t] == ["invalid_json", "document_too_large"]
    assert t[0]["location"] == "line 3" and t[0]["raw"] == b"{oops" and t[0]["rows"] == 1
    assert len(t[1]["raw"]) == MAX_RAW_BYTES and t[1]["raw_bytes"] == MAX_RAW_BYTES * 3


def test_empty_writer_removes_a_stale_file(tmp_path):
    uri = str(tmp_path / "u1.parquet")
    w = QuarantineWriter(uri)
    w.add("f", "file", "truncated_gzip", "EOF", rows=0)
    w.write()
    assert os.path.exists(uri)
    assert QuarantineWriter(uri).write() is None  # the rerun found nothing bad
    assert not os.path.exists(uri)


def test_odd_characters_do_not_make_the_file_unwritable(tmp_path):
    uri = str(tmp_path / "u1.parquet")
    w = QuarantineWriter(uri)
    name = os.fsdecode(b"in/caf\xe9.jsonl")  # a file name that is not UTF-8, as the OS hands it over
    w.add(name, "line 1", "invalid_utf8", "lone \ud800 surrogate")
    w.write()
    row = read_quarantine(uri).to_pylist()[0]
    assert row["source"] == "in/caf\\xe9.jsonl" and row["detail"] == "lone \\ud800 surrogate"


def test_a_unit_of_bad_records_is_spilled_in_batches_and_written_whole(tmp_path):
    """A unit whose every record is bad held all of its entries (up to 64 KB of raw bytes each, and the
    Python objects of each) until it ended; the writer now holds one batch and spills the rest as row groups
    of a local file, and the published file has every entry, in order."""
    uri = str(tmp_path / "q" / "u1.parquet")
    w = QuarantineWriter(uri, flush_bytes=100_000)
    held = 0
    for i in range(2_000):
        w.add("in/junk.jsonl", f"line {i + 1}", "invalid_json", "Expecting value", raw=b"%d" % i * 40)
        held = max(held, len(w.entries))
    assert len(w) == 2_000
    assert held < 300  # ~100 KB of entries at a time, not 2,000
    assert not os.path.exists(uri)  # published by write() only
    assert w.write() == uri
    rows = read_quarantine(uri)
    assert rows.num_rows == 2_000
    assert rows.column("location").to_pylist() == [f"line {i + 1}" for i in range(2_000)]
    assert rows.column("raw").to_pylist() == [b"%d" % i * 40 for i in range(2_000)]
    assert pq.ParquetFile(uri).metadata.num_row_groups > 1  # it did spill


def test_a_file_of_many_row_groups_reads_back_and_the_reader_exits_cleanly(tmp_path):
    """Read with Arrow's threads through an fsspec file, a quarantine of many row groups (a spilled one) made the
    reading process abort at exit (pyarrow 25: "terminate called without an active exception", 83 row groups);
    read_quarantine reads through ParquetFile (storage.read_parquet), without them."""
    import subprocess
    import sys
    from pathlib import Path

    uri = str(tmp_path / "u1.parquet")
    w = QuarantineWriter(uri, flush_bytes=1_000_000)
    for i in range(200_000):
        w.add("in/junk.jsonl", f"line {i + 1}", "invalid_json", "Expecting value", raw=b"{bad %d" % i)
    w.write()
    assert pq.ParquetFile(uri).metadata.num_row_groups > 50
    code = f"from airflow_curation.core.quarantine import read_quarantine; print(read_quarantine({uri!r}).num_rows)"
    repo = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": repo}
    # The abort was a race at exit (about one read in two here): several readers, each its own process.
    readers = [
        subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        for _ in range(6)
    ]
    for r in readers:
        out, err = r.communicate(timeout=300)
        assert r.returncode == 0, err[-2000:]
        assert out.strip() == "200000"
