"""About 1,000 generated malformed and edge-case records and files through the real ingest stage.

A seeded generator plants each record or file together with what must become of it: kept, or quarantined at
a known line or row with one of a few acceptable reasons, or a file-level note. The expectation comes from the generator alone, never from the code under
test: which lines a truncated stream still holds follows from where the generator cut it (whole frames,
members or flush segments before the cut).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import random
import re
import socket
import zlib
from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from airflow_curation.core.checkpoint import CheckpointStore
from airflow_curation.core.layout import Lake
from airflow_curation.core.quarantine import read_quarantine
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.ingest.stage import IngestStage

SEED = 20261201
MAX_TEXT = 4096  # max_text_bytes for the run: small, so "too large" is cheap
MAX_RECORD = 4 * MAX_TEXT + 1024 * 1024  # the stage's line cap for that setting
PARSER = {"unsupported_value"}  # valid JSON the parser cannot represent (one behaviour: readers._parse)
SURROGATE = {"invalid_utf8"}  # a lone \ud800 escape parses; its field cannot be UTF-8
BOM = b"\xef\xbb\xbf"
WORDS = [
    "data",
    "curation",
    "tokens",
    "Straße",
    "naïve",
    "日本語",
    "текст",
    "עברית",
    "emoji 😀",
    "a\u0301",
    "tab\there",
    'quote"d',
    "back\\slash",
    "nul\u0000char",
    "line\nbreak",
    "zero\u200bwidth",
]


@dataclass
class Planted:
    """What the generator put in one input and what must come out of it."""

    kept: int = 0
    bad: dict[str, tuple[set[str], int]] = field(default_factory=dict)  # location -> (reasons, rows)
    notes: list[str] = field(default_factory=list)  # file-level reasons, no rows

    @property
    def rows(self) -> int:
        return self.kept + sum(n for _, n in self.bad.values())


def _text(rng: random.Random, size: int = 0) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(2, 12))]
    text = "doc " + " ".join(words)
    return text + " filler" * (size // 7) if size else text


def _value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(9 if depth < 4 else 6)
    return [
        lambda: rng.randint(-(2**63), 2**63 - 1),
        lambda: rng.uniform(-1e300, 1e300),
        lambda: rng.random() < 0.5,
        lambda: None,
        lambda: _text(rng),
        lambda: rng.choice([0, -0.0, 5e-324, 1.7e308, ""]),
        lambda: [_value(rng, depth + 1) for _ in range(rng.randint(0, 3))],
        lambda: {_text(rng)[:8]: _value(rng, depth + 1) for _ in range(rng.randint(0, 3))},
        lambda: [[[[[]]]]],
    ][kind]()


def _good_line(rng: random.Random) -> bytes:
    record = {"text": _text(rng)}
    for _ in range(rng.randint(0, 4)):
        record[rng.choice(["url", "lang", "n", "nested", "", "ключ", "score"])] = _value(rng)
    items = list(record.items())
    rng.shuffle(items)
    line = json.dumps(dict(items), ensure_ascii=rng.random() < 0.5).encode()
    return rng.choice([line, b"  " + line + b"\t", line + b"\r"])  # \r: a CRLF file


BAD_LINES: list[tuple[set[str], object]] = [
    ({"invalid_json"}, lambda r: b'{"text": "unterminated'),
    ({"invalid_json"}, lambda r: b'{"text": "trailing comma",}'),
    ({"invalid_json"}, lambda r: b"{'text': 'single quotes'}"),
    ({"invalid_json"}, lambda r: b'{"text": "x"} trailing'),
    ({"invalid_json"}, lambda r: b'{"text": "raw \x00 NUL"}'),
    ({"invalid_json"}, lambda r: b'\x00\x00{"text": "NUL before"}'),
    ({"invalid_json"}, lambda r: BOM + b'{"text": "a BOM that does not start the file"}'),
    ({"invalid_json"}, lambda r: b'{"text": "bad escape \\q"}'),
    ({"invalid_utf8"}, lambda r: b'{"text": "caf\xe9 latin-1"}'),
    ({"invalid_utf8"}, lambda r: b'{"text": "cesu \xed\xa0\x80"}'),
    ({"invalid_utf8"}, lambda r: b'{"text": "overlong \xc0\xaf"}'),
    ({"invalid_utf8"}, lambda r: b'{"text": "cut \xe2\x82", "n": 1}'),
    (SURROGATE, lambda r: b'{"text": "lone \\ud800 in text"}'),
    (SURROGATE, lambda r: b'{"text": "fine", "title": "lone \\udfff in meta"}'),
    (SURROGATE, lambda r: b'{"text": "fine", "\\udc80": "lone surrogate key"}'),
    ({"not_an_object"}, lambda r: r.choice([b"[1, 2]", b'"a string"', b"42", b"true", b"null", b"[]", b"-0.5"])),
    ({"missing_text"}, lambda r: r.choice([b"{}", b'{"body": "x"}', b'{"Text": "x"}', b'{"text": null}'])),
    (
        {"non_string_text"},
        lambda r: r.choice(
            [b'{"text": 42}', b'{"text": 1.5}', b'{"text": ["a"]}', b'{"text": {"a": "b"}}', b'{"text": false}']
        ),
    ),
    ({"empty_text"}, lambda r: r.choice([b'{"text": ""}', b'{"text": "   "}', b'{"text": "\\n\\t "}'])),
    (PARSER, lambda r: b'{"text": "deep", "m": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    (PARSER, lambda r: b'{"text": "big int", "n": ' + b"9" * 5000 + b"}"),
    (PARSER, lambda r: b'{"text": "huge float", "n": 1e999}'),
    ({"invalid_json"}, lambda r: r.choice([b'{"text": "x", "n": NaN}', b'{"text": "x", "n": -Infinity}'])),
    ({"text_too_large"}, lambda r: json.dumps({"text": _text(r, MAX_TEXT + 100)}).encode()),
]
BLANK = [b"", b"   ", b"\t", b"\r"]


def _jsonl_lines(rng: random.Random, n: int, bad_share: float) -> list[tuple[bytes, set[str] | None | str]]:
    """n lines: (bytes without newline, None for a good record, the acceptable reasons, or "blank")."""
    out: list[tuple[bytes, set[str] | None | str]] = []
    for _ in range(n):
        roll = rng.random()
        if roll < 0.05:
            out.append((rng.choice(BLANK), "blank"))
        elif roll < 0.05 + bad_share:
            reasons, make = rng.choice(BAD_LINES)
            line = make(rng)
            if not out and line.startswith(BOM):
                line = b"x" + line  # a BOM that starts a file is not part of its first line
            out.append((line, reasons))
        else:
            out.append((_good_line(rng), None))
    return out


def _plant_lines(lines, upto: int | None = None) -> Planted:
    """Expectation for the first `upto` lines (all by default) of a file, line numbers from 1."""
    p = Planted()
    for no, (_, what) in enumerate(lines[:upto] if upto is not None else lines, start=1):
        if what is None:
            p.kept += 1
        elif what != "blank":
            p.bad[f"line {no}"] = (what, 1)
    return p


def _join(lines) -> bytes:
    return b"".join(line + b"\n" for line, _ in lines)


# -- compressed variants, each with what survives a cut ---------------------------------------------------
def _zstd(data: bytes, rng: random.Random, pieces: int) -> tuple[bytes, list[tuple[int, int, int]]]:
    """data in `pieces` frames cut at random offsets (not at line ends); (file, [(content end, frame start,
    frame end)])."""
    cuts = sorted(rng.sample(range(1, len(data)), pieces - 1)) if pieces > 1 else []
    out, frames = b"", []
    for a, b in zip([0, *cuts], [*cuts, len(data)]):
        cctx = zstandard.ZstdCompressor(write_content_size=rng.random() < 0.5, write_checksum=rng.random() < 0.5)
        start = len(out)
        out += cctx.compress(data[a:b])
        frames.append((b, start, len(out)))
    return out, frames


def _first_block_compressed(frame: bytes) -> bool:
    # A raw (stored) block may be decoded part by part: only a compressed one is all or nothing.
    at = zstandard.frame_header_size(frame)
    return (int.from_bytes(frame[at : at + 3], "little") >> 1) & 3 == 2


def _complete_lines(data: bytes, end: int) -> int:
    """How many whole lines (newline included) data[:end] holds."""
    return data[:end].count(b"\n")


def _gzip_segments(lines) -> tuple[bytes, list[tuple[int, int]]]:
    """gzip with a full flush after every line: [(segment start, segment end)] per line."""
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    out = c.compress(b"")
    spans = []
    for line, _ in lines:
        start = len(out)
        out += c.compress(line + b"\n") + c.flush(zlib.Z_FULL_FLUSH)
        spans.append((start, len(out)))
    return out + c.flush(), spans


def _cut_inside_object(line: bytes, rng: random.Random) -> int:
    """A cut point in a good record after its opening and before its closing brace: the head never parses
    (nor is it blank)."""
    return rng.randint(line.index(b"{") + 1, line.rindex(b"}") - 1)


# -- files ----------------------------------------------------------------------------------------------
def _build(src, rng: random.Random) -> dict[str, Planted]:
    planted: dict[str, Planted] = {}

    def put(name: str, data: bytes, p: Planted) -> None:
        (src / name).write_bytes(data)
        planted[name] = p

    for i in range(14):  # plain JSONL, some CRLF
        lines = _jsonl_lines(rng, rng.randint(20, 45), 0.35)
        put(f"plain-{i:02d}.jsonl", _join(lines), _plant_lines(lines))
    lines = [(_good_line(rng), None)] + _jsonl_lines(rng, 20, 0.3)
    put("bom.jsonl", BOM + _join(lines), _plant_lines(lines))  # a leading BOM is not part of line 1
    lines = _jsonl_lines(rng, 20, 0.3) + [(_good_line(rng).rstrip(b"\r"), None)]
    put("no-final-newline.ndjson", _join(lines)[:-1], _plant_lines(lines))
    lines = _jsonl_lines(rng, 25, 0.3) + [(b'{"text": "cut off here', "cut")]
    p = _plant_lines(lines, len(lines) - 1)
    p.notes.append("truncated_input")
    put("cut-plain.jsonl", _join(lines)[:-1], p)
    too_big = b'{"text": "' + b"z" * (MAX_RECORD + 10) + b'"}'
    lines = [(_good_line(rng), None), (too_big, {"record_too_large"}), (_good_line(rng), None)]
    put("too-big.jsonl", _join(lines), _plant_lines(lines))

    for i in range(4):  # intact compressed JSONL
        lines = _jsonl_lines(rng, rng.randint(25, 40), 0.3)
        data = _join(lines)
        blob, _ = _zstd(data, rng, rng.randint(1, 5))
        put(f"ok-{i}.jsonl.zst", blob, _plant_lines(lines))
        members = sorted(rng.sample(range(1, len(data)), 2))
        gz = b"".join(gzip.compress(data[a:b]) for a, b in zip([0, *members], [*members, len(data)]))
        put(f"ok-{i}.jsonl.gz", gz, _plant_lines(lines))

    for i in range(5):  # zstd cut inside a frame
        lines = [(_good_line(rng) + b" " * 40, None) for _ in range(3)] + _jsonl_lines(rng, 40, 0.25)
        data = _join(lines)
        candidates: list[int] = []
        while not candidates:
            blob, frames = _zstd(data, rng, 4)
            candidates = [k for k in range(4) if _first_block_compressed(blob[frames[k][1] : frames[k][2]])]
        k = rng.choice(candidates)
        _, start, end = frames[k]
        p = _plant_lines(lines, _complete_lines(data, frames[k - 1][0] if k else 0))
        p.notes.append("truncated_input")
        put(f"cut-frame-{i}.jsonl.zst", blob[: start + (end - start) // 2], p)

    for i in range(3):  # zstd cut at a frame boundary, mid-line
        lines = _jsonl_lines(rng, 30, 0.25) + [(_good_line(rng).rstrip(b"\r"), None) for _ in range(5)]
        data = _join(lines)
        at = sum(len(line) + 1 for line, _ in lines[:-3]) + _cut_inside_object(lines[-3][0], rng)
        first, _ = _zstd(data[:at], rng, 2)
        p = _plant_lines(lines, len(lines) - 3)
        p.notes.append("truncated_input")
        put(f"cut-boundary-{i}.jsonl.zst", first, p)

    for i in range(3):  # gzip cut inside a line's flush segment
        lines = [(_good_line(rng) + b" " * 40, None) for _ in range(2)] + _jsonl_lines(rng, 30, 0.25)
        blob, spans = _gzip_segments(lines)
        j = rng.choice([j for j in range(2, len(lines)) if spans[j][1] - spans[j][0] >= 40])  # "\n" is at its end
        p = _plant_lines(lines, j)
        p.notes.append("truncated_input")
        put(f"cut-gz-{i}.jsonl.gz", blob[: (spans[j][0] + spans[j][1]) // 2], p)
    lines = _jsonl_lines(rng, 20, 0.2) + [(_good_line(rng).rstrip(b"\r"), None) for _ in range(3)]
    data = _join(lines)
    at = sum(len(line) + 1 for line, _ in lines[:-2]) + _cut_inside_object(lines[-2][0], rng)
    p = _plant_lines(lines, len(lines) - 2)
    p.notes.append("truncated_input")
    put("cut-member.jsonl.gz", gzip.compress(data[:at]), p)  # cut at a member boundary, mid-line

    noise = bytes(rng.randrange(256) for _ in range(300))
    put("garbage.jsonl.gz", b"\x1f\x8b\x09" + noise, Planted(notes=["truncated_input"]))  # 9: no such method
    # No zstd magic: read as plain (one unterminated line that does not parse), the mismatch noted.
    put("garbage.jsonl.zst", b"not zstd at all" * 10, Planted(notes=["compression_mismatch", "truncated_input"]))
    for name in ("empty.jsonl", "empty.parquet", "empty.txt", "empty.jsonl.gz"):
        put(name, b"", Planted(notes=["empty_file"]))
    for name in ("image.png", "table.csv"):
        put(name, b"\x89PNG whatever", Planted(notes=["unsupported_format"]))

    _parquet_files(src, rng, put)
    _text_files(src, rng, put)
    return planted


def _utf8_view(values: list[bytes | None]) -> pa.Array:
    return pa.array(values, pa.binary()).view(pa.string())  # a view is not validated


def _parquet_files(src, rng: random.Random, put) -> None:
    for i in range(8):
        n = rng.randint(15, 35)
        texts, langs, p = [], [], Planted()
        for row in range(n):
            roll, lang = rng.random(), rng.choice([b"en", b"de", None])
            reasons: set[str] = set()
            if roll < 0.06:
                texts.append(None)
                reasons.add("missing_text")
            elif roll < 0.12:
                texts.append(rng.choice([b"", b"  \n"]))
                reasons.add("empty_text")
            elif roll < 0.18:
                texts.append(b"bad \xff utf-8")
                reasons.add("invalid_utf8")
            elif roll < 0.22:
                texts.append(_text(rng, MAX_TEXT + 50).encode())
                reasons.add("text_too_large")
            else:
                texts.append(_text(rng).encode())
            if rng.random() < 0.1:
                lang = b"\xc3 cut"  # invalid UTF-8 outside the text column
                reasons |= {"invalid_utf8"}  # either problem may be named
            langs.append(lang)
            if reasons:
                p.bad[f"row {row}"] = (reasons, 1)
            else:
                p.kept += 1
        table = pa.table(
            {
                "score": [rng.random() for _ in range(n)],
                "text": _utf8_view(texts),
                "lang": _utf8_view(langs),
                "tags": [[rng.randint(0, 9)] for _ in range(n)],
                "blob": [rng.randbytes(4) for _ in range(n)],
            }
        )
        buf = io.BytesIO()
        pq.write_table(table, buf, row_group_size=rng.choice([5, 10, 1000]))
        put(f"table-{i}.parquet", buf.getvalue(), p)

    def whole(name: str, table: pa.Table, reason: str) -> None:
        buf = io.BytesIO()
        pq.write_table(table, buf)
        put(name, buf.getvalue(), Planted(bad={"file": ({reason}, table.num_rows)}))

    whole("int-text.parquet", pa.table({"text": list(range(12))}), "non_string_text")
    whole("no-text.parquet", pa.table({"body": ["a", "b", "c"]}), "missing_text")
    whole(
        "two-text.parquet",
        pa.Table.from_arrays([pa.array(["a", "b"]), pa.array(["c", "d"])], names=["text", "text"]),
        "duplicate_column",
    )
    buf = io.BytesIO()
    pq.write_table(pa.table({"text": [_text(rng) for _ in range(20)]}), buf)
    put("cut.parquet", buf.getvalue()[:-30], Planted(notes=["corrupt_input"]))  # the footer is gone


def _text_files(src, rng: random.Random, put) -> None:
    for i in range(12):
        body = _text(rng).encode()
        body = rng.choice([body, BOM + body, body.replace(b" ", b"\r\n"), body + b"\x00nul"])
        put(f"doc-{i:02d}.txt", body, Planted(kept=1))
    put("latin1.txt", "café".encode("latin-1"), Planted(bad={"file": ({"invalid_utf8"}, 1)}))
    put("blank.md", b" \n\t\r\n", Planted(bad={"file": ({"empty_text"}, 1)}))
    put("doc.txt.gz", gzip.compress(_text(rng).encode()), Planted(kept=1))
    blob = zstandard.ZstdCompressor().compress(("words " * 3000).encode())
    put("cut-doc.txt.zst", blob[: len(blob) // 2], Planted(bad={"file": ({"truncated_input"}, 1)}))


def _special_entries(src, planted: dict[str, Planted]) -> socket.socket:
    os.mkfifo(src / "pipe.jsonl")
    os.symlink(src / "missing.jsonl", src / "dangling.jsonl")
    os.symlink(src / "loop-2.jsonl", src / "loop-1.jsonl")
    os.symlink(src / "loop-1.jsonl", src / "loop-2.jsonl")
    os.mkdir(src / "nested")
    os.symlink(src, src / "nested" / "up")
    os.symlink(src / "plain-00.jsonl", src / "nested" / "again.jsonl")  # a link to a file is read
    planted["nested/again.jsonl"] = planted["plain-00.jsonl"]
    (src / ".hidden.jsonl").write_bytes(b"not an input\n")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(src / "socket.jsonl"))
    for name, reason in [
        ("pipe.jsonl", "not_a_regular_file"),
        ("dangling.jsonl", "dangling_link"),
        ("loop-1.jsonl", "symlink_loop"),
        ("loop-2.jsonl", "symlink_loop"),
        ("nested/up", "not_a_regular_file"),
        ("socket.jsonl", "not_a_regular_file"),
    ]:
        planted[name] = Planted(notes=[reason])
    return sock


LOCATION = re.compile(r"^(line \d+|row \d+|file|after line \d+)$")


@pytest.mark.timeout(300)
def test_generated_malformed_inputs_are_all_accounted_for(tmp_path):
    rng = random.Random(SEED)
    src = tmp_path / "in"
    src.mkdir()
    planted = _build(src, rng)
    sock = _special_entries(src, planted)
    assert sum(p.rows for p in planted.values()) >= 1000, "the generator should plant about 1,000 rows"

    lake = Lake(str(tmp_path / "lake"), "fuzz")
    stage = IngestStage(lake, {"inputs": [str(src)], "max_text_bytes": MAX_TEXT, "unit_bytes": 1}, "fuzz")
    try:
        manifest = StageRunner(stage).run()  # never raises: nothing here may fail a unit
    finally:
        sock.close()
    assert manifest.status == "complete" and all(u.status == "done" for u in manifest.units)

    kept = Counter(
        s
        for shard in manifest.shards
        for s in pq.read_table(shard.uri, columns=["source"]).column("source").to_pylist()
    )
    folder = lake.path("_quarantine", "ingest")
    entries = [e for f in sorted(os.listdir(folder)) for e in read_quarantine(os.path.join(folder, f)).to_pylist()]
    by_file: dict[str, list[dict]] = {}
    for e in entries:
        assert e["source"] and e["reason"] and LOCATION.match(e["location"]), e  # file, place and reason
        by_file.setdefault(os.path.relpath(e["source"], src), []).append(e)

    assert set(by_file) | set(kept) <= set(planted)
    for name, p in planted.items():
        got = by_file.get(name, [])
        rows = {e["location"]: (e["reason"], e["rows"]) for e in got if e["rows"]}
        assert len(rows) == len([e for e in got if e["rows"]]), f"{name}: one entry per bad row"
        assert set(rows) == set(p.bad), f"{name}: quarantined at {sorted(rows)}, planted {sorted(p.bad)}"
        for loc, (reason, n) in rows.items():
            assert reason in p.bad[loc][0] and n == p.bad[loc][1], f"{name} {loc}: {reason} x{n}, planted {p.bad[loc]}"
        assert sorted(e["reason"] for e in got if not e["rows"]) == sorted(p.notes), name
        assert kept[name] == p.kept, f"{name}: kept {kept[name]}, planted {p.kept} good rows"
        # read = kept + quarantined for the file, and it is what the generator planted.
        assert kept[name] + sum(n for _, n in rows.values()) == p.rows, name

    store = CheckpointStore(stage.checkpoints.directory)
    for unit in manifest.units:
        acc = store.load(unit.unit_id).accounting
        assert acc["read"] == acc["kept"] + sum(acc["dropped"].values()) + sum(acc["quarantined"].values())
        assert acc["read"] == sum(planted[os.path.relpath(u, src)].rows for u in unit.inputs), unit.unit_id
        assert sum(acc.get("notes", {}).values()) == sum(
            len(planted[os.path.relpath(u, src)].notes) for u in unit.inputs
        ), unit.unit_id
    total = manifest.accounting
    assert total["read"] == sum(p.rows for p in planted.values())
    assert total["kept"] == sum(p.kept for p in planted.values()) == manifest.rows
