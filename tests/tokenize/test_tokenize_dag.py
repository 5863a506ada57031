"""The pipeline DAG with a tokenizer and an evaluation set: decontaminate drops the document that shares a
passage with the evaluation set, tokenize packs what dedup and decontaminate kept in a real ``dag.test()``
(local backend), export shuffles it, and validate's report shows the token counts."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from curation_airflow_helpers import final_manifest, pipeline_module
from tokenizer_files import stdlib_prose, train_bpe

from airflow_curation.core.layout import Lake, curation_run_id

pytestmark = pytest.mark.airflow


def test_pipeline_decontaminates_then_tokenizes_what_was_kept(airflow_db, tmp_path, monkeypatch):
    monkeypatch.setenv("CURATION_POLL_INTERVAL", "0.2")
    # the export and mix stages for job processes of a checkout whose installed entry points predate it (a no-op else)
    monkeypatch.setenv(
        "CURATION_STAGES",
        "export=airflow_curation.stages.export.stage:ExportStage,mix=airflow_curation.stages.mix.stage:MixStage",
    )
    module = pipeline_module("curation_pipeline_tokenize_test")
    prose = [t for t in stdlib_prose(80) if len(t.split()) >= 80][:20]
    tokenizer = train_bpe(str(tmp_path / "tokenizer.json"), prose)
    inputs = tmp_path / "in"
    inputs.mkdir()
    docs = prose + prose[:2]  # two exact duplicates
    (inputs / "docs.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
    evals = tmp_path / "mmlu_test.jsonl"  # a "test question" quoting 20 words of one document
    evals.write_text(json.dumps({"text": "Question: " + " ".join(prose[5].split()[10:30]) + "?"}) + "\n")

    dag_run = module.dag.test(
        logical_date=datetime(2026, 11, 26, tzinfo=timezone.utc),
        run_conf={
            "input": str(inputs),
            "lake": str(tmp_path / "lake"),
            "dataset": "web",
            "preset": "gopher",
            "tokenizer": tokenizer,
            "seq_len": 256,
            "export_formats": "megatron,mds",
            "eval_sets": f"mmlu={evals}",
        },
    )
    assert dag_run.state == "success", dag_run.state
    lake = Lake(str(tmp_path / "lake"), "web", "2026-11-26")
    run_id = curation_run_id(dag_run.run_id, lake.snapshot)
    dedup, tok = (
        final_manifest(lake.manifest_uri(run_id, "dedup")),
        final_manifest(lake.manifest_uri(run_id, "tokenize")),
    )
    decon = final_manifest(lake.manifest_uri(run_id, "decontaminate"))
    assert decon.status == "complete" and decon.config["input_manifest"] == lake.manifest_uri(run_id, "dedup")
    assert decon.accounting["dropped"] == {"decontaminated:mmlu": 1}
    assert tok.status == "complete" and tok.config["input_manifest"] == lake.manifest_uri(run_id, "decontaminate")
    acc = tok.accounting
    assert acc["read"] == dedup.rows == len(docs) and acc["dropped"].get("duplicate") == 2
    preprocessed = final_manifest(lake.manifest_uri(run_id, "preprocess"))
    assert preprocessed.accounting["kept"] == preprocessed.rows - 3  # gopher drops three short documents
    assert acc["dropped"].get("not_kept") == 3 + 1  # and the contaminated one
    assert tok.config["tokens"]["documents"] == acc["kept"] and tok.config["tokens"]["tokens"] > 0
    report = json.loads(Path(lake.manifest_uri(run_id, "report")).read_text())
    assert "decontaminate" in report["stages"]
    assert "tokenize" in report["stages"] and report["tokens"]["tokenize"]["tokens"] == tok.config["tokens"]["tokens"]
    # export ran after tokenize, on its manifest: every packed sequence written once
    export = final_manifest(lake.manifest_uri(run_id, "export"))
    assert export.status == "complete" and export.config["tokenize_manifest"] == lake.manifest_uri(run_id, "tokenize")
    assert export.config["export"]["sequences"] == tok.config["tokens"]["sequences"] > 0
    assert Path(export.config["export"]["mds_index"]).exists()
