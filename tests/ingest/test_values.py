"""Issue 21 item 5: one Parquet value, one file name or one link never costs more than its own record.

A value with no Python form (a date past year 9999, a time of day past 24:00, nested or not) quarantines
its row; text stored dictionary-encoded or as ``string_view`` is text; a file's compression is read from
its first bytes, not its name; a link that leads out of an input folder is noted and not followed.
"""

from __future__ import annotations

import datetime
import decimal
import gzip
import json
import os

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from ingest_helpers import books_close, ingest, quarantined, records, shard_texts

from airflow_curation.core.manifest import Manifest

YEAR_82000_S = 82_000 * 365 * 86_400  # seconds since 1970: far past datetime's year 9999
BIG = 2**62


def _metas(m: Manifest) -> list[dict | None]:
    return [
        None if v is None else json.loads(v)
        for s in m.shards
        for v in pq.read_table(s.uri, columns=["meta"]).column("meta").to_pylist()
    ]


# (type, a value that converts, the raw value that has no Python form or reads wrong)
BAD_VALUES = {
    "timestamp_s": (pa.timestamp("s"), 0, YEAR_82000_S),
    "timestamp_ms": (pa.timestamp("ms"), 0, YEAR_82000_S * 1000),
    "timestamp_us": (pa.timestamp("us", tz="UTC"), 0, YEAR_82000_S * 10**6),
    "timestamp_ns": (pa.timestamp("ns"), 0, -(2**63)),  # reads as NaT
    "date32": (pa.date32(), 0, 2**31 - 1),
    "date64": (pa.date64(), 0, BIG),
    "duration": (pa.duration("ms"), 0, BIG),
    "time32": (pa.time32("s"), 0, 2**31 - 1),  # wraps to 03:14:07
    "time64_us": (pa.time64("us"), 0, BIG),
    "time64_ns": (pa.time64("ns"), 0, BIG),  # wraps to 23:53:38
    "list": (pa.list_(pa.timestamp("s")), [0], [YEAR_82000_S]),
    "struct": (pa.struct([("at", pa.date32())]), {"at": 0}, {"at": 2**31 - 1}),
    "map": (pa.map_(pa.string(), pa.duration("s")), [("k", 0)], [("k", BIG)]),
}


def _arrow_values(typ: pa.DataType, values: list) -> pa.Array:
    """``values`` as raw integers of ``typ`` (what a writer in another language can store)."""
    if pa.types.is_struct(typ):
        (field,) = list(typ)
        inner = pa.array([v[field.name] for v in values], pa.int32()).view(field.type)
        return pa.StructArray.from_arrays([inner], fields=[field])
    if pa.types.is_map(typ):
        keys = pa.array([k for v in values for k, _ in v], pa.string())
        items = pa.array([x for v in values for _, x in v], pa.int64()).view(typ.item_type)
        offsets = pa.array([0, *[sum(len(v) for v in values[: i + 1]) for i in range(len(values))]], pa.int32())
        return pa.MapArray.from_arrays(offsets, keys, items)
    if pa.types.is_list(typ):
        flat = pa.array([x for v in values for x in v], pa.int64()).view(typ.value_type)
        offsets = pa.array([0, *[sum(len(v) for v in values[: i + 1]) for i in range(len(values))]], pa.int32())
        return pa.ListArray.from_arrays(offsets, flat)
    width = pa.int32() if typ.bit_width == 32 else pa.int64()
    return pa.array(values, width).view(typ)


@pytest.mark.parametrize("kind", sorted(BAD_VALUES))
def test_a_value_without_a_python_form_quarantines_its_row_only(tmp_path, kind):
    typ, good, bad = BAD_VALUES[kind]
    texts = [f"document {i} " + "words " * 8 for i in range(3)]
    table = pa.table({"text": texts, "v": _arrow_values(typ, [good, bad, good])})
    pq.write_table(table, tmp_path / "in.parquet")
    lake, m = ingest(tmp_path, [tmp_path / "in.parquet"])
    assert shard_texts(m) == [texts[0], texts[2]]
    (q,) = quarantined(lake)
    assert (q["reason"], q["location"], q["rows"]) == ("unsupported_value", "row 1", 1)
    assert "'v'" in q["detail"]
    acc = m.accounting
    assert (acc["read"], acc["kept"], acc["quarantined"]) == (3, 2, {"unsupported_value": 1})
    assert books_close(acc)


def test_values_with_a_python_form_are_kept_in_meta(tmp_path):
    """The kinds that convert (decimal, binary, a time, a timestamp at the edge of ns) keep their row."""
    table = pa.table(
        {
            "text": ["a document " + "words " * 8],
            "dec": pa.array([decimal.Decimal("12345678901234567890.5")], pa.decimal128(38, 1)),
            "bin": pa.array([b"\x00\xff"], pa.binary()),
            "t": pa.array([datetime.time(23, 59, 59)], pa.time64("us")),
            "ts": pa.array([2**63 - 1], pa.int64()).view(pa.timestamp("ns")),
        }
    )
    pq.write_table(table, tmp_path / "in.parquet")
    lake, m = ingest(tmp_path, [tmp_path / "in.parquet"])
    assert quarantined(lake) == [] and m.accounting["kept"] == 1
    (meta,) = _metas(m)
    assert meta["dec"] == "12345678901234567890.5" and meta["t"] == "23:59:59"
    assert meta["ts"].startswith("2262-04-11 23:47:16.854775807")


def test_dictionary_encoded_text_is_text(tmp_path):
    """A pandas categorical text column is stored dictionary-encoded; it is text, not non_string_text."""
    texts = [f"doc {i % 2} " + "words " * 8 for i in range(5)]
    pd.DataFrame({"text": pd.Categorical(texts), "lang": pd.Categorical(["en"] * 5)}).to_parquet(
        tmp_path / "cat.parquet"
    )
    assert pa.types.is_dictionary(pq.read_schema(tmp_path / "cat.parquet").field("text").type)
    lake, m = ingest(tmp_path, [tmp_path / "cat.parquet"])
    assert shard_texts(m) == texts and quarantined(lake) == []
    assert [x["lang"] for x in _metas(m)] == ["en"] * 5


def test_string_view_text_is_text_and_bad_utf8_spoils_its_row_only(tmp_path):
    raw = [b"first " + b"words " * 8, b"bad \xff " + b"words " * 8, b"third " + b"words " * 8]
    column = pa.array(raw, pa.binary()).cast(pa.string(), safe=False).cast(pa.string_view())
    pq.write_table(pa.table({"text": column}), tmp_path / "view.parquet")
    assert pa.types.is_string_view(pq.read_schema(tmp_path / "view.parquet").field("text").type)
    lake, m = ingest(tmp_path, [tmp_path / "view.parquet"])
    assert shard_texts(m) == [raw[0].decode(), raw[2].decode()]
    assert [(q["reason"], q["location"], q["raw"]) for q in quarantined(lake)] == [("invalid_utf8", "row 1", raw[1])]
    assert books_close(m.accounting) and m.accounting["read"] == 3


@pytest.mark.parametrize("name", ["plain.jsonl.gz", "plain.jsonl.zst"])
def test_a_plain_file_named_compressed_is_read_as_plain(tmp_path, name):
    data = b"".join(records(20, "r"))
    (tmp_path / name).write_bytes(data)
    lake, m = ingest(tmp_path, [tmp_path / name])
    assert len(shard_texts(m)) == 20 and m.accounting["read"] == 20 and books_close(m.accounting)
    (q,) = quarantined(lake)
    assert (q["reason"], q["rows"]) == ("compression_mismatch", 0)
    assert "read as plain" in q["detail"]
    assert m.accounting["notes"] == {"compression_mismatch": 1}


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_a_compressed_file_named_plain_is_decompressed(tmp_path, codec):
    data = b"".join(records(20, "r"))
    blob = gzip.compress(data) if codec == "gzip" else zstandard.ZstdCompressor().compress(data)
    (tmp_path / "packed.jsonl").write_bytes(blob)
    lake, m = ingest(tmp_path, [tmp_path / "packed.jsonl"])
    assert len(shard_texts(m)) == 20 and books_close(m.accounting)
    assert [(q["reason"], q["rows"]) for q in quarantined(lake)] == [("compression_mismatch", 0)]


def test_a_link_out_of_the_input_folder_is_noted_not_followed(tmp_path):
    inputs, elsewhere = tmp_path / "in", tmp_path / "elsewhere"
    inputs.mkdir()
    elsewhere.mkdir()
    (inputs / "own.jsonl").write_bytes(b"".join(records(3, "own")))
    (elsewhere / "secret.jsonl").write_bytes(b"".join(records(2, "secret")))
    os.symlink(elsewhere / "secret.jsonl", inputs / "out.jsonl")
    os.symlink(inputs / "own.jsonl", inputs / "again.jsonl")  # inside the folder: read
    lake, m = ingest(tmp_path, [inputs])
    texts = shard_texts(m)
    assert not any(t.startswith("secret") for t in texts) and len(texts) == 6
    (q,) = quarantined(lake)
    assert (q["reason"], q["rows"], q["source"].rsplit("/", 1)[-1]) == ("link_outside_input", 0, "out.jsonl")
    assert str(elsewhere / "secret.jsonl") in q["detail"]
    assert m.accounting["notes"] == {"link_outside_input": 1} and books_close(m.accounting)


def test_a_link_out_of_a_globbed_folder_is_noted_and_a_named_link_is_read(tmp_path):
    inputs, elsewhere = tmp_path / "in", tmp_path / "elsewhere"
    inputs.mkdir()
    elsewhere.mkdir()
    (elsewhere / "x.jsonl").write_bytes(b"".join(records(2, "far")))
    os.symlink(elsewhere / "x.jsonl", inputs / "out.jsonl")
    lake, m = ingest(tmp_path, [f"{inputs}/*.jsonl"])
    assert [q["reason"] for q in quarantined(lake)] == ["link_outside_input"] and m.accounting["read"] == 0
    lake, m = ingest(tmp_path / "named", [inputs / "out.jsonl"])  # named itself: the caller chose it
    assert len(shard_texts(m)) == 2 and quarantined(lake) == []
