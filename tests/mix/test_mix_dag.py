"""The pipeline DAG with mix targets, in a real ``dag.test()`` (local backend, the session's SQLite DB): mix runs
on dedup's manifest (quality and decontaminate skipped), tokenize reads mix's selection, and validate's report
carries the mixture check, passed. A second dataset's manifest (``mix_manifests``) is mixed in beside the run's
own rows."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from curation_airflow_helpers import final_manifest, pipeline_module

from airflow_curation.core.layout import Lake, curation_run_id
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.ingest.stage import IngestStage

pytestmark = pytest.mark.airflow
TARGET = "airflow_curation.stages.mix.stage:MixStage"
from tokenizer_files import stdlib_prose, train_bpe


def test_pipeline_mixes_then_tokenizes_the_selection(airflow_db, tmp_path, monkeypatch):
    monkeypatch.setenv("CURATION_POLL_INTERVAL", "0.2")
    # the mix stage for a checkout whose installed entry points predate it (a no-op once installed)
    monkeypatch.setenv("CURATION_STAGES", f"mix={TARGET}")
    module = pipeline_module("curation_pipeline_mix_test")
    prose = [t for t in stdlib_prose(120) if len(t.split()) >= 80][:30]
    tokenizer = train_bpe(str(tmp_path / "tokenizer.json"), prose)
    for source, docs in {"manuals": prose[:20], "notes": prose[20:30]}.items():
        (tmp_path / "in" / source).mkdir(parents=True)
        (tmp_path / "in" / source / "docs.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))

    # another dataset, ingested on its own: its manifest is mixed in through the mix_manifests param
    (tmp_path / "other" / "recipes").mkdir(parents=True)
    (tmp_path / "other" / "recipes" / "docs.jsonl").write_text(
        "".join(json.dumps({"text": t}) + "\n" for t in prose[:10])
    )
    other = IngestStage(
        Lake(str(tmp_path / "lake"), "other"),
        {"inputs": [str(tmp_path / "other")], "input_root": str(tmp_path / "other")},
        "o1",
    )
    StageRunner(other).run()

    dag_run = module.dag.test(
        logical_date=datetime(2026, 12, 1, tzinfo=timezone.utc),
        run_conf={
            "input": str(tmp_path / "in"),
            "lake": str(tmp_path / "lake"),
            "dataset": "mixed",
            "preset": "structure",
            "tokenizer": tokenizer,
            "seq_len": 256,
            "mix_targets": "manuals=0.5,notes=0.3,recipes=0.2",
            "mix_manifests": other.manifest_uri,
            "mix_seed": 5,
        },
    )
    assert dag_run.state == "success", dag_run.state
    lake = Lake(str(tmp_path / "lake"), "mixed", "2026-12-01")
    run_id = curation_run_id(dag_run.run_id, lake.snapshot)
    mix = final_manifest(lake.manifest_uri(run_id, "mix"))
    assert mix.status == "complete" and mix.config["input_manifest"] == lake.manifest_uri(run_id, "dedup")
    mixture = mix.config["mixture"]
    assert mixture["seed"] == 5 and mixture["within_tolerance"]
    by = mixture["by_key"]
    # notes (10 rows for 0.3) is the scarcest: taken whole, so 33 rows in all; manuals (0.5) cut to 17 of those
    # the preset kept, recipes (0.2, the other dataset's manifest) to 7 of its 10
    assert by["notes"]["selected_rows"] == 10 and by["manuals"]["selected_rows"] == 17
    assert by["recipes"]["selected_rows"] == 7 and by["recipes"]["available_rows"] == 10
    assert [i["rows"] for i in mixture["inputs"]] == [30, 10]
    # every row read (both inputs) is kept or dropped with a reason: downsampled, or dropped upstream (the preset
    # may drop one); the gate's row check summed both inputs' manifests
    dropped = mix.accounting["dropped"]
    assert mix.accounting["read"] == 40 == mix.accounting["kept"] + sum(dropped.values())
    assert dropped["downsampled"] == by["manuals"]["available_rows"] - 17 + 10 - 7
    # tokenize read mix's manifest and packed exactly the selection
    tok = final_manifest(lake.manifest_uri(run_id, "tokenize"))
    assert tok.config["input_manifest"] == lake.manifest_uri(run_id, "mix")
    assert tok.accounting["kept"] == mix.accounting["kept"] == 34
    report = json.loads(Path(lake.manifest_uri(run_id, "report")).read_text())
    checks = {c["type"]: c for c in report["checks"]}
    assert checks["mixture"]["status"] == "pass"
