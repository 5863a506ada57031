"""The whole pipeline DAG in ``dag.test()``: ingest -> preprocess -> dedup -> enrich -> validate, every job a real local-backend
subprocess, enrich embedding the rows that preprocess and dedup kept (transformers engine: the vLLM engine
has its own tests, and its import would add half a minute to this one)."""

from __future__ import annotations

import ast
import importlib.util
import json
import sysconfig
from datetime import datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from airflow_curation.core.layout import Lake, curation_run_id
from airflow_curation.core.manifest import Manifest

pytestmark = pytest.mark.airflow
REPO = Path(__file__).resolve().parents[2]


def _docstrings(n: int) -> list[str]:
    out = []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(errors="replace"))):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and (doc := ast.get_docstring(node)):
                if len(doc.split()) >= 60:
                    out.append(doc)
                    if len(out) == n:
                        return out
    return out


@pytest.fixture
def pipeline(airflow_db, monkeypatch):
    monkeypatch.setenv("CURATION_POLL_INTERVAL", "0.5")
    spec = importlib.util.spec_from_file_location("curation_pipeline_enrich", REPO / "dags" / "curation_pipeline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def test_pipeline_runs_through_enrich(pipeline, tmp_path, minilm):
    docs = _docstrings(30)
    inputs = tmp_path / "in"
    inputs.mkdir()
    with open(inputs / "docs.jsonl", "w") as f:
        for d in docs + docs[:4]:  # four exact duplicates for dedup to find
            f.write(json.dumps({"text": d}) + "\n")
    lake_root = tmp_path / "lake"
    conf = {
        "input": str(inputs),
        "lake": str(lake_root),
        "dataset": "web",
        "max_failed_fraction": 0.0,
        "enrich_model": minilm,
        "enrich_task": "embed",
        "enrich_model_runtime": "transformers",
        "enrich_mapper": "local",
    }
    dag_run = pipeline.test(logical_date=datetime(2026, 11, 29, tzinfo=timezone.utc), run_conf=conf)
    assert dag_run.state == "success", dag_run.state

    lake = Lake(str(lake_root), "web", "2026-11-29")
    manifest = Manifest.read(lake.manifest_uri(curation_run_id(dag_run.run_id, lake.snapshot), "enrich"))
    assert manifest.status == "complete" and manifest.rows == 34
    enriched_total = 0
    for shard in manifest.shards:
        assert {"preprocess", "dedup", "enrich-embed"} <= set(shard.attrs)
        keep = pq.read_table(shard.attrs["preprocess"], columns=["keep"]).column("keep").to_pylist()
        dup = pq.read_table(shard.attrs["dedup"], columns=["is_duplicate"]).column("is_duplicate").to_pylist()
        out = pq.read_table(shard.attrs["enrich-embed"])
        expected = [bool(k) and not d for k, d in zip(keep, dup)]
        assert out.column("enriched").to_pylist() == expected
        assert out.schema.field("embedding").type.list_size == 384
        enriched_total += sum(expected)
    assert (
        sum(dup for s in manifest.shards for dup in pq.read_table(s.attrs["dedup"]).column("is_duplicate").to_pylist())
        >= 4
    )
    assert manifest.accounting["kept"] == enriched_total > 0
    # validate ran last, on enrich's manifest (so its view joins every stage's columns), and passed.
    report = json.loads(Path(lake.manifest_uri(curation_run_id(dag_run.run_id, lake.snapshot), "report")).read_text())
    assert report["status"] == "passed"
    assert {"ingest", "preprocess", "dedup", "enrich"} <= set(report["stages"])
    assert {"preprocess", "dedup", "enrich-embed"} <= set(report["columns"])
