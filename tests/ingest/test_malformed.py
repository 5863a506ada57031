"""Issue 9: damaged input is quarantined record by record, with where and why; it never fails a unit.

Truncated compressed streams (zstd frames, gzip members), records that break the parser or the writer,
odd Parquet schemas, special files under an input folder, and duplicate caller ids.
"""

from __future__ import annotations

import gzip
import os
import socket
import stat

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from ingest_helpers import books_close, ingest, quarantined, records, shard_texts

from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest
from airflow_curation.stages.base import StageFailed, StageRunner
from airflow_curation.stages.ingest.stage import IngestStage


def _zstd_frames(chunks: list[bytes], content_size: bool = True) -> tuple[bytes, list[int]]:
    """One zstd frame per chunk; returns the file and each frame's end offset."""
    cctx = zstandard.ZstdCompressor(write_content_size=content_size, write_checksum=True)
    out, ends = b"", []
    for c in chunks:
        out += cctx.compress(c)
        ends.append(len(out))
    return out, ends


# -- item 2: truncated compressed input ---------------------------------------------------------------
@pytest.mark.parametrize("content_size", [True, False])
def test_zstd_cut_inside_its_only_frame_is_truncated_input(tmp_path, content_size):
    data = b"".join(records(500))
    blob, _ = _zstd_frames([data], content_size)
    (tmp_path / "cut.jsonl.zst").write_bytes(blob[: len(blob) // 2])
    lake, m = ingest(tmp_path, [tmp_path / "cut.jsonl.zst"])
    q = quarantined(lake)
    assert [e["reason"] for e in q] == ["truncated_input"] and q[0]["rows"] == 0
    assert m.accounting["notes"] == {"truncated_input": 1} and m.accounting["read"] == 0
    assert books_close(m.accounting)


@pytest.mark.parametrize("content_size", [True, False])
def test_zstd_multi_frame_cut_mid_frame_keeps_the_complete_frames(tmp_path, content_size):
    # Frames are not aligned with lines: frame 2 ends in the middle of record 250.
    data = b"".join(records(600))
    cuts = [data.index(b"r 120 ") + 5, data.index(b"r 250 ") + 7, data.index(b"r 400 ") + 3]
    chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]
    blob, ends = _zstd_frames(chunks, content_size)
    cut = (ends[1] + ends[2]) // 2  # inside frame 3 (one block: < 128 KiB)
    (tmp_path / "multi.jsonl.zst").write_bytes(blob[:cut])
    lake, m = ingest(tmp_path, [tmp_path / "multi.jsonl.zst"])
    texts = shard_texts(m)
    # Frames 1 and 2 hold records 0..249 and the head of record 250, which must not become a record.
    assert len(texts) == 250 and texts[-1].startswith("r 249 ")
    q = quarantined(lake)
    assert [(e["reason"], e["location"], e["rows"]) for e in q] == [("truncated_input", "after line 250", 0)]
    assert m.accounting["read"] == 250 and m.accounting["notes"] == {"truncated_input": 1}


def test_zstd_cut_at_a_frame_boundary_inside_a_line(tmp_path):
    data = b"".join(records(300))
    mid = data.index(b"r 200 ") + 4  # frame 1 ends inside record 200
    blob, ends = _zstd_frames([data[:mid], data[mid:]])
    (tmp_path / "edge.jsonl.zst").write_bytes(blob[: ends[0]])
    lake, m = ingest(tmp_path, [tmp_path / "edge.jsonl.zst"])
    assert len(shard_texts(m)) == 200
    q = quarantined(lake)
    # The partial record is named in the note, not ingested and not called invalid JSON.
    assert [(e["reason"], e["location"], e["rows"]) for e in q] == [("truncated_input", "line 201", 0)]
    assert q[0]["raw"] == b'{"text": "r 20' and m.accounting["read"] == 200


def test_zstd_cut_before_the_frame_checksum_keeps_every_row(tmp_path):
    data = b"".join(records(50))
    blob, ends = _zstd_frames([data])
    (tmp_path / "nock.jsonl.zst").write_bytes(blob[:-2])  # the 4-byte content checksum is cut
    lake, m = ingest(tmp_path, [tmp_path / "nock.jsonl.zst"])
    assert len(shard_texts(m)) == 50
    assert [e["reason"] for e in quarantined(lake)] == ["truncated_input"]


def test_gzip_cut_at_a_member_boundary_inside_a_line(tmp_path):
    data = b"".join(records(100))
    mid = data.index(b"r 60 ") + 3
    (tmp_path / "edge.jsonl.gz").write_bytes(gzip.compress(data[:mid]))  # member 2 is missing
    lake, m = ingest(tmp_path, [tmp_path / "edge.jsonl.gz"])
    assert len(shard_texts(m)) == 60
    assert [(e["reason"], e["rows"]) for e in quarantined(lake)] == [("truncated_input", 0)]


def test_truncated_text_line_mode_zstd(tmp_path):
    data = b"".join(f"line {i}\n".encode() * 1 for i in range(5000))
    blob, _ = _zstd_frames([data[:20000], data[20000:]])
    (tmp_path / "t.txt.zst").write_bytes(blob[:-40])
    lake, m = ingest(tmp_path, [tmp_path / "t.txt.zst"], text_mode="line")
    texts = shard_texts(m)
    assert texts == [f"line {i}" for i in range(len(texts))] and 0 < len(texts) < 5000
    assert len(texts) == data[:20000].count(b"\n")  # the complete lines of frame 1
    assert [e["reason"] for e in quarantined(lake)] == ["truncated_input"]


def test_complete_zstd_without_final_newline_is_whole(tmp_path):
    blob, _ = _zstd_frames([b'{"text": "one"}\n{"text": "two"}'])
    (tmp_path / "ok.jsonl.zst").write_bytes(blob)
    lake, m = ingest(tmp_path, [tmp_path / "ok.jsonl.zst"])
    assert shard_texts(m) == ["one", "two"] and quarantined(lake) == []


# -- item 4: one bad record never fails a unit -----------------------------------------------------------
def test_records_that_break_the_parser_or_the_writer_are_quarantined(tmp_path):
    deep = b"[" * 100_000 + b"]" * 100_000
    lines = [
        b'{"text": "first good"}',
        b'{"text": "deep", "m": ' + deep + b"}",  # RecursionError in the parser
        b'{"text": "big int", "n": ' + b"7" * 5000 + b"}",  # int digits limit: ValueError
        b'{"text": "lone surrogate in meta", "title": "\\udc80"}',
        b'{"text": "lone surrogate key", "\\ud800": 1}',
        b'{"text": "deep meta", "m": ' + b"[" * 900 + b"]" * 900 + b"}",
        b"\xef\xbb\xbf" + b'{"text": "BOM in the middle"}',
        b'{"text": "last good"}',
    ]
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b"\n".join(lines) + b"\n")  # a leading BOM is not part of line 1
    lake, m = ingest(tmp_path, [path])
    assert m.status == "complete"
    kept = shard_texts(m)
    assert kept[0] == "first good" and kept[-1] == "last good"
    q = {e["location"]: e for e in quarantined(lake)}
    assert q["line 2"]["reason"] in ("unsupported_value", "invalid_json")
    assert q["line 3"]["reason"] in ("unsupported_value", "invalid_json")
    assert q["line 4"]["reason"] == "invalid_utf8" and "title" in q["line 4"]["detail"]
    assert q["line 5"]["reason"] == "invalid_utf8"
    assert q["line 7"]["reason"] == "invalid_json"
    # 900 levels parse; whether they can be written depends on the stack left: kept or quarantined, never lost.
    assert ("deep meta" in kept) != ("line 6" in q)
    assert all(e["source"] == str(path) for e in q.values())
    acc = m.accounting
    assert acc["read"] == 8 and books_close(acc) and acc["kept"] == len(kept)


def test_lone_surrogate_id_and_non_string_text(tmp_path):
    path = tmp_path / "ids.jsonl"
    path.write_bytes(
        b'{"id": "\\ud800", "text": "bad id"}\n{"id": "ok", "text": "fine"}\n{"id": "x", "text": [1, 2]}\n'
    )
    lake, m = ingest(tmp_path, [path], id_field="id")
    assert shard_texts(m) == ["fine"]
    reasons = {e["location"]: e["reason"] for e in quarantined(lake)}
    assert reasons == {"line 1": "invalid_utf8", "line 3": "non_string_text"}


def test_a_file_name_that_is_not_utf8(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    with open(os.path.join(os.fsencode(src), b"caf\xe9.jsonl"), "wb") as f:
        f.write(b'{"text": "ok"}\nnot json\n')
    lake, m = ingest(tmp_path, [src])
    assert m.accounting["kept"] == 1 and m.accounting["quarantined"] == {"invalid_json": 1}
    assert pq.read_table(m.shards[0].uri).column("source").to_pylist() == ["caf\\xe9.jsonl"]
    assert [e["source"] for e in quarantined(lake)] == [str(src / "caf\\xe9.jsonl")]


def test_parquet_invalid_utf8_outside_the_text_column(tmp_path):
    def bad_utf8(values: list[bytes]) -> pa.Array:
        return pa.array(values, pa.binary()).view(pa.string())  # a view is not validated

    lang = bad_utf8([b"en", b"\xff\xfe", b"de", b"fr"])
    pq.write_table(pa.table({"text": ["one", "two", "three", "four"], "lang": lang}), tmp_path / "meta.parquet")
    lake, m = ingest(tmp_path, [tmp_path / "meta.parquet"])
    assert shard_texts(m) == ["one", "three", "four"]
    q = quarantined(lake)
    assert [(e["location"], e["reason"]) for e in q] == [("row 1", "invalid_utf8")] and "lang" in q[0]["detail"]
    # In the id column, a bad value quarantines its own row only.
    (tmp_path / "ids").mkdir()
    pq.write_table(
        pa.table({"text": ["one", "two", "three"], "doc": bad_utf8([b"a", b"\xc3", b"c"])}),
        tmp_path / "ids" / "ids.parquet",
    )
    lake2, m2 = ingest(tmp_path / "ids", [tmp_path / "ids" / "ids.parquet"], id_field="doc")
    assert shard_texts(m2) == ["one", "three"]
    assert [(e["location"], e["reason"]) for e in quarantined(lake2)] == [("row 1", "invalid_utf8")]


def test_parquet_with_two_text_columns_is_quarantined_whole(tmp_path):
    t = pa.Table.from_arrays([pa.array(["a", "b"]), pa.array(["c", "d"])], names=["text", "text"])
    pq.write_table(t, tmp_path / "dup.parquet")
    pq.write_table(pa.table({"text": ["fine"]}), tmp_path / "ok.parquet")
    # The two files, not their folder: the lake (and the run's lease file) lives in that folder too.
    lake, m = ingest(tmp_path, [tmp_path / "dup.parquet", tmp_path / "ok.parquet"])
    assert shard_texts(m) == ["fine"]
    q = quarantined(lake)
    assert [(e["reason"], e["rows"]) for e in q] == [("duplicate_column", 2)]
    assert m.accounting["quarantined"] == {"duplicate_column": 2}


# -- item 4: special entries under an input folder ------------------------------------------------------
def _unreadable(folder) -> str:
    """A directory entry that cannot be opened for reading, for real, even by root."""
    path = folder / "unreadable.jsonl"
    if os.geteuid() != 0:
        path.write_bytes(b'{"text": "secret"}\n')
        path.chmod(0)
        return str(path)
    # Root reads any file whatever its mode, but /proc/sys checks the mode bits for root too: a
    # write-only sysctl cannot be opened for reading. The entry is a link to one.
    for target in ("/proc/sys/vm/compact_memory", "/proc/sys/net/ipv4/route/flush", "/proc/sys/vm/drop_caches"):
        try:
            if stat.S_IMODE(os.stat(target).st_mode) & 0o444:
                continue
            with open(target, "rb"):
                continue
        except PermissionError:
            os.symlink(target, path)
            return str(path)
        except OSError:
            continue
    pytest.skip("no file here that root cannot open")


@pytest.mark.timeout(60)  # a FIFO that is opened blocks forever
def test_special_entries_under_a_folder_are_reported(tmp_path):
    src = tmp_path / "in"
    (src / "sub").mkdir(parents=True)
    (src / "a.jsonl").write_bytes(b'{"text": "alpha"}\n')
    (tmp_path / "elsewhere.jsonl").write_bytes(b'{"text": "linked"}\n')
    os.symlink(tmp_path / "elsewhere.jsonl", src / "b-link.jsonl")  # out of the folder: noted, not followed
    os.mkfifo(src / "fifo.jsonl")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(src / "sock.jsonl"))
    os.symlink(src / "nowhere.jsonl", src / "dangling.jsonl")
    os.symlink(src / "loop-b.jsonl", src / "loop-a.jsonl")
    os.symlink(src / "loop-a.jsonl", src / "loop-b.jsonl")
    os.symlink(src, src / "sub" / "up")  # a link to a directory
    unreadable = _unreadable(src)
    try:
        # Named too: as root it is a link out of the folder, which is opened only when named.
        lake, m = ingest(tmp_path, [src, unreadable])
    finally:
        sock.close()
    assert sorted(shard_texts(m)) == ["alpha"]
    got = {os.path.relpath(e["source"], src): (e["reason"], e["rows"]) for e in quarantined(lake)}
    assert got == {
        "fifo.jsonl": ("not_a_regular_file", 0),
        "b-link.jsonl": ("link_outside_input", 0),
        "sock.jsonl": ("not_a_regular_file", 0),
        "dangling.jsonl": ("dangling_link", 0),
        "loop-a.jsonl": ("symlink_loop", 0),
        "loop-b.jsonl": ("symlink_loop", 0),
        "sub/up": ("not_a_regular_file", 0),
        os.path.relpath(unreadable, src): ("unreadable_input", 0),
    }
    assert m.accounting["notes"] == {
        "dangling_link": 1,
        "link_outside_input": 1,
        "not_a_regular_file": 3,
        "symlink_loop": 2,
        "unreadable_input": 1,
    }
    assert m.accounting["read"] == 1 and m.accounting["kept"] == 1


@pytest.mark.timeout(60)
def test_a_named_fifo_input_does_not_block(tmp_path):
    os.mkfifo(tmp_path / "pipe.jsonl")
    lake, m = ingest(tmp_path, [tmp_path / "pipe.jsonl"])
    assert [(e["reason"], e["rows"]) for e in quarantined(lake)] == [("not_a_regular_file", 0)]
    assert m.accounting["read"] == 0


# -- duplicate caller ids --------------------------------------------------------------------------------
def test_duplicate_ids_in_a_unit_quarantine_the_later_record(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.jsonl").write_bytes(
        b'{"id": "x", "text": "first x"}\n{"id": "y", "text": "y"}\n{"id": "x", "text": "second x"}\n'
    )
    pq.write_table(pa.table({"id": ["y", "z"], "text": ["second y", "z"]}), src / "b.parquet")
    lake, m = ingest(tmp_path, [src], id_field="id")  # one unit: both files
    assert sorted(shard_texts(m)) == ["first x", "y", "z"]
    q = sorted((os.path.basename(e["source"]), e["location"], e["reason"]) for e in quarantined(lake))
    assert q == [("a.jsonl", "line 3", "duplicate_id"), ("b.parquet", "row 0", "duplicate_id")]
    dup = [e for e in quarantined(lake) if e["location"] == "line 3"][0]
    assert "a.jsonl line 1" in dup["detail"]
    assert m.accounting["quarantined"] == {"duplicate_id": 2}


def test_duplicate_ids_across_units_fail_the_run_and_are_listed(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.jsonl").write_bytes(b'{"id": "x", "text": "x from a"}\n{"id": "u", "text": "u"}\n')
    (src / "b.jsonl").write_bytes(b'{"id": "v", "text": "v"}\n{"id": "x", "text": "x from b"}\n')
    lake = Lake(str(tmp_path / "lake"), "web")
    stage = IngestStage(lake, {"inputs": [str(src)], "id_field": "id", "unit_bytes": 1}, "r1")
    with pytest.raises(StageFailed, match="1 id"):
        StageRunner(stage).run()
    m = Manifest.read(stage.manifest_uri)
    assert m.status == "failed" and all(u.status == "done" for u in m.units)
    assert m.accounting["notes"] == {"duplicate_id": 1}
    dups = [e for e in quarantined(lake) if e["reason"] == "duplicate_id"]
    assert len(dups) == 1 and dups[0]["source"] == "b.jsonl" and dups[0]["rows"] == 0
    assert "a.jsonl" in dups[0]["detail"]
    # Fixing the input redoes its unit only, and the run completes.
    (src / "b.jsonl").write_bytes(b'{"id": "v", "text": "v"}\n{"id": "x2", "text": "x from b"}\n')
    m2 = StageRunner(IngestStage(lake, {"inputs": [str(src)], "id_field": "id", "unit_bytes": 1}, "r2")).run()
    assert m2.status == "complete" and [u.status for u in m2.units] == ["skipped", "done"]
    assert "notes" not in m2.accounting
    assert not [e for e in quarantined(lake) if e["reason"] == "duplicate_id"]


@pytest.mark.parametrize("layout", ["string", "large_string", "string_view", "categorical"])
def test_parquet_text_too_large_is_measured_in_arrow_never_made_a_python_string(tmp_path, layout, monkeypatch):
    """A text past ``max_text_bytes`` is quarantined by its length in the Arrow batch: it was converted to a
    Python string first (bytes, str, then its UTF-8 encoding for the size check: a 400 MB value took 2.6 GB
    of memory to refuse, 1.8 GB now, pyarrow's decoding alone 1.75). The rows around it keep their order."""
    from airflow_curation.stages.ingest import readers

    texts = ["x" * 5000, "first kept", "y" * 3000, None, "second kept", "z" * 4001]
    arr = pa.array(texts).dictionary_encode() if layout == "categorical" else pa.array(texts, getattr(pa, layout)())
    pq.write_table(pa.table({"text": arr, "n": list(range(6))}), tmp_path / "big.parquet", row_group_size=4)
    converted: list[int] = []
    real = readers._values
    monkeypatch.setattr(readers, "_values", lambda col: converted.extend(_lengths(col)) or real(col))
    lake, m = ingest(tmp_path, [tmp_path / "big.parquet"], max_text_bytes=4000)
    assert shard_texts(m) == ["first kept", "y" * 3000, "second kept"]
    assert max(converted) <= 3000  # no text too large became a Python value
    q = quarantined(lake)
    got = sorted((e["location"], e["reason"], e["detail"], len(e["raw"]) if "large" in e["reason"] else 0) for e in q)
    assert got == [
        ("row 0", "text_too_large", "text of 5000 bytes exceeds max_text_bytes=4000", 5000),
        ("row 3", "missing_text", "text is null", 0),
        ("row 5", "text_too_large", "text of 4001 bytes exceeds max_text_bytes=4000", 4001),
    ]
    assert m.accounting["read"] == 6 and books_close(m.accounting)


def _lengths(column: pa.Array) -> list[int]:
    if not (pa.types.is_dictionary(column.type) or "string" in str(column.type)):
        return [0]
    values = column.dictionary_decode() if pa.types.is_dictionary(column.type) else column
    return [len(v or "") for v in values.cast(pa.large_string()).to_pylist()]


def test_an_input_root_that_does_not_hold_every_input_is_refused(tmp_path, monkeypatch):
    """An input outside ``input_root`` took its file name alone as its source: two files of one name in two
    folders got one id (``a/x.txt`` and ``b/x.txt``). A relative root (``--input-root ir``, the way one types
    it) did that to every input, the listing's paths being absolute."""
    for folder, words in (("a", "first document in folder a"), ("b", "second document in folder b")):
        (tmp_path / "ir" / folder).mkdir(parents=True)
        (tmp_path / "ir" / folder / "x.txt").write_text(words)
    monkeypatch.chdir(tmp_path)
    for i, root in enumerate(("ir", "ir/", "./ir/../ir", str(tmp_path / "ir"))):
        lake, m = ingest(tmp_path / f"run{i}", [tmp_path / "ir"], input_root=root)
        rows = [r for s in m.shards for r in pq.read_table(s.uri, columns=["id", "source"]).to_pylist()]
        assert sorted(r["source"] for r in rows) == ["a/x.txt", "b/x.txt"], root
        assert len({r["id"] for r in rows}) == 2
    with pytest.raises(ValueError, match=r"x.txt is not under input_root '/usr/share' \(2 of 2 inputs"):
        ingest(tmp_path / "outside", [tmp_path / "ir"], input_root="/usr/share")


def test_repeats_past_the_listed_maximum_are_counted(tmp_path, monkeypatch):
    """The places of the first ``LISTED_MAX`` repeated ids are listed, the rest counted: a corpus ingested
    twice would otherwise hold a place for every id in memory."""
    from airflow_curation.core import unique_ids

    monkeypatch.setattr(unique_ids, "LISTED_MAX", 1)
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.jsonl").write_bytes(b'{"id": "x", "text": "x"}\n{"id": "y", "text": "y"}\n{"id": "z", "text": "z"}\n')
    (src / "b.jsonl").write_bytes(b'{"id": "y", "text": "y again"}\n{"id": "x", "text": "x again"}\n')
    lake = Lake(str(tmp_path / "lake"), "web")
    stage = IngestStage(lake, {"inputs": [str(src)], "id_field": "id", "unit_bytes": 1}, "r1")
    with pytest.raises(StageFailed, match="2 ids of field 'id' repeated across units .* the first 1 are listed"):
        StageRunner(stage).run()
    assert Manifest.read(stage.manifest_uri).accounting["notes"] == {"duplicate_id": 2}
    assert len([e for e in quarantined(lake) if e["reason"] == "duplicate_id"]) == 1
