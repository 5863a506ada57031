"""A small real pipeline (ingest -> tokenize) for the export tests; the tokenizer is trained here."""

from __future__ import annotations

import json

import pytest
from tokenizer_files import stdlib_prose, train_bpe

from airflow_curation.core.layout import Lake
from airflow_curation.stages import register_stage, stage_class
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.export.stage import ExportStage

SEQ_LEN = 64


@pytest.fixture(scope="session", autouse=True)
def _registered():
    register_stage("export", ExportStage)  # the entry point, for a checkout installed before it existed


@pytest.fixture(scope="session")
def packed(tmp_path_factory):
    """A lake with a complete tokenize manifest over several shards, one of them without any row kept."""
    base = tmp_path_factory.mktemp("export")
    prose = stdlib_prose(200)
    tok = train_bpe(str(base / "tokenizer.json"), prose)
    src = base / "in.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in prose[:160]))
    blank = base / "zz-blank.jsonl"  # a shard whose rows all lack text: an empty packed shard
    blank.write_text("".join(json.dumps({"text": " "}) + "\n" for _ in range(5)))
    lake = Lake(str(base / "lake"), "d")
    StageRunner(stage_class("ingest")(lake, {"inputs": [str(src), str(blank)], "target_shard_bytes": 16384}, "r")).run()
    m = StageRunner(
        stage_class("tokenize")(
            lake, {"input_manifest": lake.manifest_uri("r", "ingest"), "tokenizer": tok, "seq_len": SEQ_LEN}, "r"
        )
    ).run()
    return {"lake": lake, "manifest": lake.manifest_uri("r", "tokenize"), "tokenize": m, "tokenizer": tok}
