"""Ingest's JSON parse path: the declared fast parser is the one the shipped install uses, and it has one
behaviour for NaN, Infinity, huge numbers, duplicate keys, lone surrogates and invalid UTF-8."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import tomllib
from pathlib import Path

import msgspec
import pyarrow.parquet as pq
import pytest

from airflow_curation.core.layout import Lake
from airflow_curation.core.quarantine import read_quarantine
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.ingest import readers
from airflow_curation.stages.ingest.stage import IngestStage

REPO = Path(__file__).resolve().parents[2]


def test_the_reader_parses_with_the_declared_fast_parser():
    # The reader's parse function is msgspec's, not a fallback chosen by what happens to be installed.
    assert readers.FAST_PARSER == "msgspec"
    assert isinstance(readers._decode.__self__, msgspec.json.Decoder)
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = [d for d in project["dependencies"] if re.match(r"msgspec\b", d)]
    assert declared, "msgspec must be a core dependency of airflow-curation"
    pinned = re.search(r"^msgspec==(\S+)$", (REPO / "constraints.txt").read_text(), re.M)
    assert pinned and importlib.metadata.version("msgspec") == pinned.group(1)


# (line, what becomes of it): a reason it is quarantined for, or the meta kept with its text.
CASES = [
    (b'{"text": "a", "x": NaN}', "invalid_json"),
    (b'{"text": "a", "x": Infinity}', "invalid_json"),
    (b'{"text": "a", "x": -Infinity}', "invalid_json"),
    (b'{"text": "a", "x": 1e400}', "unsupported_value"),
    (b'{"text": "a", "x": ' + b"9" * 5000 + b"}", "unsupported_value"),  # past Python's str-digits limit
    (b'{"text": "a", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}", "unsupported_value"),
    (b'{"text": "caf\xe9"}', "invalid_utf8"),
    (b'{"text": "lone \\ud800"}', "invalid_utf8"),
    (b'{"text": "a", "k": "lone \\udfff"}', "invalid_utf8"),
    (b'{"text": "a", "x": 123456789012345678901234567890}', {"x": 123456789012345678901234567890}),
    (b'{"text": "a", "x": -9223372036854775809}', {"x": -9223372036854775809}),
    (b'{"text": "a", "x": 1e308, "y": -0.0}', {"x": 1e308, "y": -0.0}),
    (b'{"text": "first", "text": "a", "k": 1, "k": 2}', {"k": 2}),  # the last of duplicate keys wins
    (b'{"text": "a", "e": "\\ud83d\\ude00"}', {"e": "\U0001f600"}),  # a surrogate pair is one character
]


@pytest.mark.parametrize("line, outcome", CASES, ids=range(len(CASES)))
def test_one_behaviour_for_edge_values(tmp_path, line, outcome):
    src = tmp_path / "in.jsonl"
    src.write_bytes(line + b"\n")
    lake = Lake(str(tmp_path / "lake"), "web")
    m = StageRunner(IngestStage(lake, {"inputs": [str(src)]}, "r1")).run()
    assert m.accounting["read"] == 1  # never lost: kept or quarantined
    if isinstance(outcome, str):
        folder = lake.path("_quarantine", "ingest")
        rows = [r for f in sorted(os.listdir(folder)) for r in read_quarantine(os.path.join(folder, f)).to_pylist()]
        assert [(r["reason"], r["location"]) for r in rows] == [(outcome, "line 1")]
        assert m.accounting["quarantined"] == {outcome: 1}
    else:
        [shard] = m.shards
        row = pq.read_table(shard.uri).to_pylist()[0]
        assert row["text"] == "a" and json.loads(row["meta"]) == outcome
