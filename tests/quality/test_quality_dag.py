"""The pipeline DAG with a quality model: quality runs after dedup in a real ``dag.test()`` (local backend),
its drops are a step of validate's funnel, and tokenize and enrich skip the rows it dropped.

Without a quality model the step is skipped and tokenize/enrich read dedup's manifest: that is what
tests/tokenize/test_tokenize_dag.py and tests/enrich/test_enrich_dag.py run.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import quality_corpus
from curation_airflow_helpers import final_manifest, pipeline_module

from airflow_curation.core.layout import Lake, curation_run_id
from airflow_curation.stages.quality.model import train_parquet

pytestmark = pytest.mark.airflow
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
from enrich_models import minilm_path  # noqa: E402
from tokenizer_files import train_bpe  # noqa: E402


def _column(uri: str, name: str) -> list:
    return pq.read_table(uri, columns=[name]).column(name).to_pylist()


def test_pipeline_drops_what_the_classifier_rejects_before_tokenize_and_enrich(airflow_db, tmp_path, monkeypatch):
    monkeypatch.setenv("CURATION_POLL_INTERVAL", "0.2")
    module = pipeline_module("curation_pipeline_quality_test")
    assert module.dag.params["quality_model"] is None  # unset: the step is skipped

    train, held = quality_corpus.split(quality_corpus.labelled(200))
    labelled = tmp_path / "train.parquet"
    pq.write_table(pa.table({"text": [r[1] for r in train], "label": [r[2] for r in train]}), labelled)
    model = tmp_path / "quality-model"
    train_parquet([str(labelled)], str(model))
    prose = [r[1] for r in held if r[2] == 1]
    tokenizer = train_bpe(str(tmp_path / "tokenizer.json"), prose)
    inputs = tmp_path / "in"
    inputs.mkdir()
    docs = [r[1] for r in held] + prose[:2]  # prose and navigation pages, two exact duplicates
    (inputs / "docs.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))

    dag_run = module.dag.test(
        logical_date=datetime(2026, 11, 25, tzinfo=timezone.utc),
        run_conf={
            "input": str(inputs),
            "lake": str(tmp_path / "lake"),
            "dataset": "web",
            "preset": "gopher",
            "quality_model": str(model),
            "tokenizer": tokenizer,
            "seq_len": 256,
            "enrich_model": minilm_path(),
            "enrich_task": "embed",
            "enrich_model_runtime": "transformers",
            "enrich_mapper": "local",
        },
    )
    assert dag_run.state == "success", dag_run.state
    lake = Lake(str(tmp_path / "lake"), "web", "2026-11-25")
    run_id = curation_run_id(dag_run.run_id, lake.snapshot)
    dedup, quality = (
        final_manifest(lake.manifest_uri(run_id, "dedup")),
        final_manifest(lake.manifest_uri(run_id, "quality")),
    )
    tok, pii, enrich = (
        final_manifest(lake.manifest_uri(run_id, "tokenize")),
        final_manifest(lake.manifest_uri(run_id, "pii")),
        final_manifest(lake.manifest_uri(run_id, "enrich")),
    )
    assert dedup.rows == len(docs) and quality.status == "complete"
    assert quality.config["input_manifest"] == lake.manifest_uri(run_id, "dedup")
    for consumer in (tok, pii):
        assert consumer.config["input_manifest"] == lake.manifest_uri(run_id, "quality")
    assert enrich.config["input_manifest"] == lake.manifest_uri(run_id, "pii")  # pii's shards carry quality's attrs

    # What every row should be, from the attrs the stages wrote.
    kept, quality_drops, not_kept, duplicate, dedup_kept = {}, 0, 0, 0, 0
    for shard in quality.shards:
        ids = _column(shard.uri, "id")
        pre = [bool(k) for k in _column(shard.attrs["preprocess"], "keep")]
        dup = [bool(d) for d in _column(shard.attrs["dedup"], "is_duplicate")]
        good = _column(shard.attrs["quality"], "keep")
        quality_drops += good.count(False)
        # The consumers' reasons: a keep = false anywhere upstream first, then is_duplicate.
        not_kept += sum(not (p and g) for p, g in zip(pre, good))
        duplicate += sum(p and g and d for p, d, g in zip(pre, dup, good))
        dedup_kept += sum(p and not d for p, d in zip(pre, dup))
        kept.update({i: p and g and not d for i, p, d, g in zip(ids, pre, dup, good)})
    n_kept = sum(kept.values())
    assert quality.accounting["dropped"] == {"quality_classifier": quality_drops}
    # The classifier drops pages that the gopher preset and dedup let through, and keeps prose.
    assert 0 < n_kept < dedup_kept

    # Tokenize and enrich consumed exactly the rows every upstream stage kept.
    acc = tok.accounting
    assert acc["read"] == len(docs) and acc["kept"] == n_kept == tok.config["tokens"]["documents"]
    assert acc["dropped"] == {k: v for k, v in {"not_kept": not_kept, "duplicate": duplicate}.items() if v}
    for shard in enrich.shards:
        out = pq.read_table(shard.attrs["enrich-embed"], columns=["id", "enriched"])
        assert out.column("enriched").to_pylist() == [kept[i] for i in out.column("id").to_pylist()]

    # Validate read enrich's manifest; its funnel has the classifier step, in pipeline order.
    report = json.loads(Path(lake.manifest_uri(run_id, "report")).read_text())
    funnel = report["metrics"]["funnel"] if "metrics" in report else report["funnel"]
    stages = [f["stage"] for f in funnel]
    assert stages[:4] == ["ingest", "preprocess", "dedup", "quality"]  # then enrich's own step
    step = funnel[3]
    assert step["label"] == "quality" and step["rows"] == n_kept
    assert funnel[stages.index("dedup")]["rows"] == dedup_kept
    assert "quality" in report["stages"]
