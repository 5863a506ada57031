"""``make demo``'s web path: the sample corpus's WARC goes through the default DAG, with the demo's own run
conf, in a real ``dag.test()`` (local backend), and its pages reach the curated output."""

from __future__ import annotations

import importlib.util
import json
from datetime import datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from curation_airflow_helpers import final_manifest
from process_helpers import sample_corpus

from airflow_curation.core.layout import Lake, curation_run_id
from airflow_curation.stages.kept import decision_attrs, skip_reasons

pytestmark = pytest.mark.airflow
REPO = Path(__file__).resolve().parents[2]


def _module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_demo_dag_ingests_the_sample_warc_and_curates_its_pages(airflow_db, tmp_path, monkeypatch):
    monkeypatch.setenv("CURATION_POLL_INTERVAL", "0.2")
    corpus = sample_corpus(tmp_path / "sample_corpus", 16)
    warc = json.loads((corpus / "planted.json").read_text())["warc"]
    assert (corpus / "data" / warc["file"]).exists() and len(warc["pages"]) == 30

    demo = _module("demo_under_test", REPO / "scripts" / "demo.py")
    dag = _module("curation_pipeline_demo_test", REPO / "dags" / "curation_pipeline.py").dag
    lake_root = tmp_path / "lake"
    conf = demo.run_conf(str(corpus / "data"), str(lake_root), "sample", 0.0, enrich_model="")
    dag_run = dag.test(logical_date=datetime(2026, 11, 30, tzinfo=timezone.utc), run_conf=conf)
    assert dag_run.state == "success", dag_run.state

    lake = Lake(str(lake_root), "sample", "2026-11-30")
    run_id = curation_run_id(dag_run.run_id, lake.snapshot)
    ingest = final_manifest(lake.manifest_uri(run_id, "ingest"))
    # Every WARC record accounted for: the page without text quarantined, the 404 and the image noted.
    assert ingest.accounting["quarantined"].get("no_text_extracted") == 1
    # The curated output: the rows of the last stage before validate that every upstream stage kept.
    pii = final_manifest(lake.manifest_uri(run_id, "pii"))
    kept_urls, duplicate_urls = set(), set()
    for shard in pii.shards:
        table = pq.read_table(shard.uri, columns=["id", "meta"])
        reasons = skip_reasons(shard.shard_id, table.column("id"), [shard.attrs[k] for k in decision_attrs(shard)])
        for meta, why in zip(table.column("meta").to_pylist(), reasons):
            url = json.loads(meta or "{}").get("url") or ""
            if why is None:
                kept_urls.add(url)
            elif why == "duplicate":
                duplicate_urls.add(url)
    pages = set(warc["pages"])
    assert len(kept_urls & pages) >= len(pages) // 2, f"only {sorted(kept_urls & pages)} of the WARC's pages kept"
    dup = warc["duplicate"]
    # The planted copy and its original: one is kept, the other dropped by dedup as its duplicate.
    assert {dup["url"], dup["duplicate_of"]} & kept_urls and {dup["url"], dup["duplicate_of"]} & duplicate_urls
    assert not {warc["no_text"], *warc["not_documents"].values()} & (kept_urls | duplicate_urls)
