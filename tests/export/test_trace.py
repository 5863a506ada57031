"""``curation trace`` (issue 24, item 5): from a written training sequence back to the documents, the input
file and the line each of its tokens came from."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_export import _export, _megatron

from airflow_curation.stages.export.trace import trace
from airflow_curation.stages.tokenize.stage import load_tokenizer


@pytest.fixture(scope="module")
def exported(packed):
    """An export over several buckets (small files), so that global indices cross bucket boundaries."""
    m = _export(packed, "trace", formats=["megatron", "parquet"], seed=3, file_size=4096)
    assert m.config["export"]["buckets"] > 2
    return m


def test_every_token_of_every_sequence_is_its_traced_document_s_token(packed, exported):
    """Re-tokenizing the input line that trace names, at the token offset it gives, yields exactly the
    sequence's tokens as megatron-core reads them; and every document segment is accounted for."""
    export = exported.config["export"]
    sequences = _megatron(export["megatron_prefixes"])
    tok = load_tokenizer(packed["tokenizer"])
    eos = packed["tokenize"].config["tokens"]["eos_id"]
    source = packed["lake"].root.rsplit("/", 1)[0] + "/in.jsonl"
    lines = open(source).read().splitlines()
    uri = packed["lake"].manifest_uri("trace", "export")
    checked = 0
    for g in range(0, len(sequences), 7):  # every 7th: spans buckets, first and last rows of files
        t = trace(uri, sequence=g)
        assert t.sequence == g and t.n_tokens == len(sequences[g])
        rebuilt = []
        for doc in t.documents:
            assert doc["file"] == "in.jsonl" and doc["unit"] == "line"
            text = json.loads(lines[doc["position"] - 1])["text"]
            ids = [*tok.encode(text, add_special_tokens=False).ids, eos]
            start, end = doc["tokens"]
            off = doc["document_token_offset"]
            rebuilt.extend(ids[off : off + end - start])
        assert np.array_equal(np.array(rebuilt), sequences[g])
        checked += 1
    assert checked > 5


def test_bucket_and_index_name_the_same_sequence_as_its_global_index(packed, exported):
    export = exported.config["export"]
    uri = packed["lake"].manifest_uri("trace", "export")
    first_of_bucket_2 = sum(export["bucket_sequences"][:2])
    a = trace(uri, sequence=first_of_bucket_2)
    b = trace(uri, bucket=2, index=0)
    assert (a.bucket, a.index_in_bucket) == (2, 0) and a.as_dict() == b.as_dict()
    # Parquet's bucket file holds, at that index, the very doc ids trace reports.
    parquet = pq.read_table(export["parquet"][2]).slice(0, 1).column("doc_ids").to_pylist()[0]
    assert parquet == [d["id"] for d in a.documents]


def test_an_index_outside_the_export_says_how_many_there_are(packed, exported):
    uri = packed["lake"].manifest_uri("trace", "export")
    total = exported.config["export"]["sequences"]
    with pytest.raises(IndexError, match=f"outside the export's {total} sequences"):
        trace(uri, sequence=total)
    with pytest.raises(IndexError, match="outside bucket 0"):
        trace(uri, bucket=0, index=10**6)


def test_the_cli_traces_the_newest_export_of_a_dataset(packed, exported, capsys):
    from airflow_curation.cli import main as curation

    lake = packed["lake"]
    assert curation(["trace", "--lake", lake.root, "--dataset", "d", "--sequence", "0"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["sequence"] == 0 and out["documents"] and all(d["unit"] == "line" for d in out["documents"])
    with pytest.raises(SystemExit, match="give --sequence N, or --bucket B --index I"):
        curation(["trace", "--lake", lake.root, "--dataset", "d"])


def test_a_trace_of_an_export_whose_folder_a_later_export_replaced_is_refused(packed, tmp_path):
    """Two exports (other seeds) into one folder: the first manifest's trace read the second's order files
    and named other documents without a word. It now checks the order file against what its export wrote."""
    from airflow_curation.core.integrity import IntegrityError

    out = str(tmp_path / "ex")
    _export(packed, "trace-a", formats=["megatron"], seed=1, file_size=4096, output_dir=out)
    first = packed["lake"].manifest_uri("trace-a", "export")
    before = trace(first, sequence=5)
    assert trace(first, sequence=5) == before  # what it traced stays what it traces
    _export(packed, "trace-b", formats=["megatron"], seed=2, file_size=4096, output_dir=out)
    with pytest.raises(IntegrityError, match=r"order file of bucket \d+ of export .*trace-a.* corrupted or replaced"):
        trace(first, sequence=5)
    after = trace(packed["lake"].manifest_uri("trace-b", "export"), sequence=5)
    assert after.documents  # the folder's own export traces


def test_a_sequence_from_a_users_own_parquet_traces_to_its_file_and_row(packed, tmp_path):
    """``curation tokenize a.parquet --output out`` then ``curation export``: the trace named the file as its
    'shard' with ``file: null``; it now gives the user's file and the row each document came from (integer
    ids included, read as the strings tokenize wrote)."""
    from tokenizer_files import stdlib_prose

    from airflow_curation.core.layout import Lake
    from airflow_curation.stages import stage_class
    from airflow_curation.stages.base import StageRunner
    from airflow_curation.stages.export.stage import ExportStage

    texts = stdlib_prose(40)
    f = tmp_path / "mine.parquet"
    pq.write_table(pa.table({"id": pa.array(range(100, 140), pa.int64()), "text": texts}), f)
    lake = Lake(str(tmp_path / "out"), "_curation")
    config = {"inputs": [str(f)], "output_dir": str(tmp_path / "out"), "tokenizer": packed["tokenizer"], "seq_len": 64}
    StageRunner(stage_class("tokenize")(lake, config, "r")).run()
    StageRunner(ExportStage(lake, {"input_manifest": lake.manifest_uri("r", "tokenize"), "seed": 1}, "r")).run()
    t = trace(lake.manifest_uri("r", "export"), sequence=4)
    assert t.documents
    for doc in t.documents:
        assert doc["file"] == str(f) and doc["unit"] == "row"
        assert doc["id"] == str(100 + doc["position"])  # the row of the user's file that holds that id
        assert texts[doc["position"]]
