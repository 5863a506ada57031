"""The pipeline DAG with a tokenizer: tokenize runs after dedup in a real ``dag.test()`` (local backend),
and validate's report shows its token counts."""

from __future__ import annotations

import importlib.util
import json
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from tokenizer_files import stdlib_prose, train_bpe

from airflow_curation.core.layout import Lake, sanitize_run_id
from airflow_curation.core.manifest import Manifest

pytestmark = pytest.mark.airflow
REPO = Path(__file__).resolve().parents[2]


def _final(lake: Lake, run_id: str, stage: str) -> Manifest:
    deadline = time.monotonic() + 300
    while (manifest := Manifest.read(lake.manifest_uri(run_id, stage))).status == "planned":
        assert time.monotonic() < deadline, f"the {stage} job never finished its manifest"
        time.sleep(0.2)
    return manifest


def test_pipeline_tokenizes_what_dedup_kept(airflow_db, tmp_path, monkeypatch):
    monkeypatch.setenv("CURATION_POLL_INTERVAL", "0.2")
    spec = importlib.util.spec_from_file_location(
        "curation_pipeline_tokenize_test", REPO / "dags" / "curation_pipeline.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    prose = [t for t in stdlib_prose(80) if len(t.split()) >= 80][:20]
    tokenizer = train_bpe(str(tmp_path / "tokenizer.json"), prose)
    inputs = tmp_path / "in"
    inputs.mkdir()
    docs = prose + prose[:2]  # two exact duplicates
    (inputs / "docs.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))

    dag_run = module.dag.test(
        logical_date=datetime(2026, 11, 26, tzinfo=timezone.utc),
        run_conf={
            "input": str(inputs),
            "lake": str(tmp_path / "lake"),
            "dataset": "web",
            "preset": "gopher",
            "tokenizer": tokenizer,
            "seq_len": 256,
        },
    )
    assert dag_run.state == "success", dag_run.state
    lake = Lake(str(tmp_path / "lake"), "web", "2026-11-26")
    run_id = sanitize_run_id(dag_run.run_id)
    dedup, tok = _final(lake, run_id, "dedup"), _final(lake, run_id, "tokenize")
    assert tok.status == "complete" and tok.config["input_manifest"] == lake.manifest_uri(run_id, "dedup")
    acc = tok.accounting
    assert acc["read"] == dedup.rows == len(docs) and acc["dropped"].get("duplicate") == 2
    assert tok.config["tokens"]["documents"] == acc["kept"] and tok.config["tokens"]["tokens"] > 0
    report = json.loads(Path(lake.manifest_uri(run_id, "report")).read_text())
    assert "tokenize" in report["stages"] and report["tokens"]["tokenize"]["tokens"] == tok.config["tokens"]["tokens"]
