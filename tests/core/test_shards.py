"""Shard writer: target-size roll-over, row groups, zstd, dictionary encoding, checksums of the bytes on disk."""

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xxhash

from airflow_curation.core.schema import SHARD_SCHEMA, BadRows, check_id_text, checked_user_rows
from airflow_curation.core.shards import ShardWriter, read_shard, write_parquet


def _row(i: int, width: int = 200) -> dict:
    # Text that does not compress to nothing, so that sizes grow with rows.
    text = " ".join(f"w{(i * 7919 + k * 104729) % 100003}" for k in range(width // 7))
    return {"id": f"doc-{i:06d}", "text": text, "source": f"input-{i % 3}.jsonl", "meta": "{}"}


def _write(tmp_path, n, **kw):
    w = ShardWriter(str(tmp_path / "shards"), lambda k: f"part-{k:05d}", SHARD_SCHEMA, **kw)
    for i in range(n):
        r = _row(i)
        w.write(r, nbytes=len(r["text"]))
    return w.close()


def test_rolls_over_at_target_size_and_keeps_every_row(tmp_path):
    shards = _write(tmp_path, 3000, target_bytes=20_000, row_group_rows=100)
    assert len(shards) > 3
    assert [s.shard_id for s in shards] == [f"part-{k:05d}" for k in range(len(shards))]
    assert sum(s.rows for s in shards) == 3000
    ids = []
    for s in shards:
        t = read_shard(s.uri)
        assert t.num_rows == s.rows
        ids.extend(t.column("id").to_pylist())
    assert ids == [f"doc-{i:06d}" for i in range(3000)]  # order kept across shards
    # Every shard but the last reached the target; none overshoots by more than one row group.
    for s in shards[:-1]:
        assert s.bytes >= 20_000
    md = pq.ParquetFile(shards[0].uri).metadata
    one_group = max(md.row_group(i).total_byte_size for i in range(md.num_row_groups))
    assert all(s.bytes < 20_000 + 2 * one_group for s in shards)


def _write_with_progress(tmp_path, n, progress: bool, **kw):
    done = [0]
    w = ShardWriter(
        str(tmp_path / ("p" if progress else "n")),
        lambda k: f"part-{k:05d}",
        SHARD_SCHEMA,
        progress=(lambda: done[0] / n) if progress else None,
        **kw,
    )
    for i in range(n):
        done[0] = i + 1
        r = _row(i)
        w.write(r, nbytes=len(r["text"]))
    return w.close()


def test_a_writer_that_knows_its_progress_leaves_no_sliver(tmp_path):
    # 1,000 rows: rolled blindly, six full shards and a sliver of a few rows.
    blind = _write_with_progress(tmp_path, 1000, False, target_bytes=20_000, row_group_rows=20)
    assert blind[-1].bytes < 0.25 * 20_000
    told = _write_with_progress(tmp_path, 1000, True, target_bytes=20_000, row_group_rows=20)
    assert sum(s.rows for s in told) == 1000 and len(told) == len(blind) - 1
    assert all(10_000 <= s.bytes <= 40_000 for s in told), [s.bytes for s in told]
    ids = [i for s in told for i in read_shard(s.uri, ["id"]).column("id").to_pylist()]
    assert ids == [f"doc-{i:06d}" for i in range(1000)]


def test_a_row_group_ends_where_the_shard_reaches_its_target(tmp_path):
    # Row groups of 4,096 rows hold ~6x the target: cut blindly, every shard would be one 6x row group.
    shards = _write(tmp_path, 3000, target_bytes=20_000, row_group_rows=4096)
    assert len(shards) > 5
    assert all(s.bytes < 2 * 20_000 for s in shards), [s.bytes for s in shards]
    assert sum(s.rows for s in shards) == 3000


def test_row_groups_have_the_configured_rows(tmp_path):
    [shard] = _write(tmp_path, 1050, row_group_rows=200)
    md = pq.ParquetFile(shard.uri).metadata
    assert [md.row_group(i).num_rows for i in range(md.num_row_groups)] == [200] * 5 + [50]


def test_row_groups_are_also_bounded_by_bytes(tmp_path):
    [shard] = _write(tmp_path, 100, row_group_rows=4096, row_group_bytes=2_000)
    md = pq.ParquetFile(shard.uri).metadata
    assert md.num_row_groups > 5  # ~10 rows of ~200 bytes each per group, not one group of 100


def test_zstd_dictionary_and_statistics(tmp_path):
    [shard] = _write(tmp_path, 500, row_group_rows=250)
    md = pq.ParquetFile(shard.uri).metadata
    names = SHARD_SCHEMA.names
    for rg in range(md.num_row_groups):
        for c in range(md.num_columns):
            col = md.row_group(rg).column(c)
            assert col.compression == "ZSTD"
        src = md.row_group(rg).column(names.index("source"))
        assert any("DICTIONARY" in e for e in src.encodings), src.encodings
        assert src.dictionary_page_offset is not None
        for plain in ("id", "text"):  # unique values: no dictionary attempt to pay for, writing or reading
            col = md.row_group(rg).column(names.index(plain))
            assert not any("DICTIONARY" in e for e in col.encodings), (plain, col.encodings)
        idc = md.row_group(rg).column(names.index("id"))
        assert idc.statistics.has_min_max  # lets DuckDB skip row groups by id range
    assert pq.read_schema(shard.uri).equals(SHARD_SCHEMA, check_metadata=False)


def test_checksum_and_bytes_match_the_file_on_disk(tmp_path):
    shards = _write(tmp_path, 800, target_bytes=15_000, row_group_rows=100)
    for s in shards:
        data = open(s.uri, "rb").read()
        assert s.bytes == len(data) == os.path.getsize(s.uri)
        assert s.checksum == f"xxh64:{xxhash.xxh64(data).hexdigest()}"


def test_write_parquet_returns_size_and_checksum(tmp_path):
    uri = str(tmp_path / "a" / "t.parquet")
    table = pa.table({"id": ["a", "b", "c"], "x": [1, 2, 3]})
    nbytes, checksum = write_parquet(uri, table, row_group_rows=2)
    data = open(uri, "rb").read()
    assert nbytes == len(data) and checksum == f"xxh64:{xxhash.xxh64(data).hexdigest()}"
    assert pq.ParquetFile(uri).metadata.num_row_groups == 2
    assert pq.read_table(uri).equals(table)


def test_rerun_writes_the_same_names_and_bytes(tmp_path):
    a = _write(tmp_path, 600, target_bytes=10_000, row_group_rows=100)
    b = _write(tmp_path, 600, target_bytes=10_000, row_group_rows=100)
    assert [(s.shard_id, s.rows, s.checksum) for s in a] == [(s.shard_id, s.rows, s.checksum) for s in b]
    assert sorted(os.listdir(tmp_path / "shards")) == [f"{s.shard_id}.parquet" for s in a]


def test_abort_leaves_no_partial_shard(tmp_path):
    w = ShardWriter(str(tmp_path / "shards"), lambda k: f"part-{k:05d}", SHARD_SCHEMA, row_group_rows=10)
    for i in range(55):
        w.write(_row(i))
    w.abort()
    assert os.listdir(tmp_path / "shards") == []
    assert w.shards == []


def test_empty_writer_writes_nothing(tmp_path):
    w = ShardWriter(str(tmp_path / "shards"), lambda k: f"part-{k:05d}", SHARD_SCHEMA)
    assert w.close() == []
    assert not (tmp_path / "shards").exists() or os.listdir(tmp_path / "shards") == []


def test_schema_check_for_user_parquet():
    check_id_text(pa.schema([("id", pa.string()), ("text", pa.large_string())]), "f.parquet")
    with pytest.raises(ValueError, match="missing column 'text'"):
        check_id_text(pa.schema([("id", pa.string())]), "f.parquet")
    # a user's Parquet without ids is told how to get them
    with pytest.raises(ValueError, match=r"missing column 'id' \(has \['text'\]\).*curation ingest"):
        check_id_text(pa.schema([("text", pa.string())]), "f.parquet")
    with pytest.raises(ValueError, match="must be a string column"):
        check_id_text(pa.schema([("id", pa.string()), ("text", pa.int64())]), "f.parquet")
    # any Arrow layout of strings is text: a pandas categorical, a view, large
    for typ in (pa.dictionary(pa.int32(), pa.string()), pa.string_view(), pa.large_string()):
        check_id_text(pa.schema([("id", pa.string()), ("text", typ)]), "f.parquet")


def _unchecked_strings(values: list[bytes | None]) -> pa.Array:
    """A string array over raw bytes, UTF-8 or not: what a Parquet reader hands over unchecked."""
    raw = pa.array(values, pa.binary())
    return pa.Array.from_buffers(pa.string(), len(raw), raw.buffers(), raw.null_count)


def test_user_rows_are_checked_as_ingest_checks_a_shard():
    good = pa.table({"id": ["a", "b"], "text": ["plain", "Ω ünïcödé 文字"]})
    assert checked_user_rows(good, "f.parquet") is good  # nothing to do: the same table
    # decoded into the layout every stage reads, values unchanged
    for text in (pa.array(["x", "y", "x"]).dictionary_encode(), pa.array(["x", "y", "x"], pa.string_view())):
        out = checked_user_rows(pa.table({"id": ["1", "2", "3"], "text": text}), "f.parquet")
        assert out.schema.field("text").type == pa.string() and out.column("text").to_pylist() == ["x", "y", "x"]
    large = pa.array(["x"], pa.large_string()).dictionary_encode()
    assert checked_user_rows(pa.table({"id": ["1"], "text": large}), "f").schema.field("text").type == pa.large_string()
    # invalid UTF-8 (a stray byte, a surrogate's bytes) named by row of the file and byte
    text = _unchecked_strings([b"fine", b"bad \xff", b"ok", b"\xed\xa0\x80", None])
    with pytest.raises(BadRows, match=r"f.parquet: rows 101, 103 have invalid UTF-8 in 'text' \(row 101: byte 4"):
        checked_user_rows(pa.table({"id": list("abcde"), "text": text}), "f.parquet", first_row=100)
    with pytest.raises(BadRows, match=r"row 0 has invalid UTF-8 in 'id'"):
        checked_user_rows(pa.table({"id": _unchecked_strings([b"\xc3("]), "text": ["t"]}), "f.parquet")
    # a null id cannot be joined on; a null text is an empty document, as in a lake
    with pytest.raises(BadRows, match=r"f.parquet: rows 7, 8, 9, 10, 11 and 2 more have no id"):
        checked_user_rows(pa.table({"id": ["a"] + [None] * 7, "text": ["t"] * 8}), "f.parquet", first_row=6)
    assert checked_user_rows(pa.table({"id": ["a"], "text": pa.array([None], pa.string())}), "f").num_rows == 1
    # integer ids are read as the strings every stage writes
    assert checked_user_rows(pa.table({"id": [1, 2], "text": ["a", "b"]}), "f").column("id").to_pylist() == ["1", "2"]
