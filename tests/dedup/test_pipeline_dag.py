"""The pipeline DAG end to end in a real ``dag.test()``: ingest -> preprocess -> dedup (local backend),
with planted exact and near duplicates among real handbook paragraphs."""

from __future__ import annotations

import importlib.util
import json
import random
import time
from datetime import datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from airflow_curation.core.layout import Lake, curation_run_id
from airflow_curation.core.manifest import Manifest

from .corpus import handbook_docs

pytestmark = pytest.mark.airflow
REPO = Path(__file__).resolve().parents[2]


def _paragraph_docs(n: int) -> list[str]:
    """English prose: runs of the handbook's sentences, about 150 words each (past the page's
    navigation header)."""
    words = " ".join(
        t for i, t in handbook_docs(["apt.html", "sect.apt-get.html", "unix-services.html"]) if i.startswith("en-US/")
    ).split()[400:]
    return [" ".join(words[i * 150 : (i + 1) * 150]) for i in range(n)]


def test_pipeline_runs_ingest_preprocess_dedup(airflow_db, tmp_path, monkeypatch):
    monkeypatch.setenv("CURATION_POLL_INTERVAL", "0.2")
    spec = importlib.util.spec_from_file_location(
        "curation_pipeline_dedup_test", REPO / "dags" / "curation_pipeline.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    docs = _paragraph_docs(24)
    words = docs[1].split()
    words[75] = "zebra"  # one word changed in 150: Jaccard of 5-grams ~0.94
    planted = {"exact": "  " + docs[0].upper() + "\n", "near": " ".join(words)}
    rng = random.Random(3)
    inputs = tmp_path / "in"
    inputs.mkdir()
    with open(inputs / "docs.jsonl", "w") as f:
        for i, t in enumerate(docs):
            f.write(json.dumps({"id": f"doc-{i:02d}", "text": t}) + "\n")
    with open(inputs / "later.jsonl", "w") as f:  # sorts after docs.jsonl: the copies come later
        for name, t in sorted(planted.items(), key=lambda _: rng.random()):
            f.write(json.dumps({"id": f"copy-{name}", "text": t}) + "\n")

    dag_run = module.dag.test(
        logical_date=datetime(2026, 11, 25, tzinfo=timezone.utc),
        run_conf={"input": str(inputs), "lake": str(tmp_path / "lake"), "dataset": "web", "preset": "gopher"},
    )
    assert dag_run.state == "success", dag_run.state

    lake = Lake(str(tmp_path / "lake"), "web", "2026-11-25")
    run_id = curation_run_id(dag_run.run_id, lake.snapshot)
    deadline = time.monotonic() + 300
    while (manifest := Manifest.read(lake.manifest_uri(run_id, "dedup"))).status == "planned":
        assert time.monotonic() < deadline, "the dedup job never finished its manifest"
        time.sleep(0.2)
    assert manifest.status == "complete"
    # boilerplate_min_documents unset: that stage is one skipped group that wrote nothing, and dedup read preprocess
    states = {ti.task_id: ti.state for ti in dag_run.get_task_instances()}
    assert states["boilerplate.launch"] == states["boilerplate.checkpoints"] == "skipped"
    assert not Path(lake.manifest_uri(run_id, "boilerplate")).exists() and not Path(lake.path("boilerplate")).exists()
    assert manifest.config["input_manifest"] == lake.manifest_uri(run_id, "preprocess")
    acc = manifest.accounting
    assert acc["read"] == len(docs) + 2 == acc["kept"] + sum(acc["dropped"].values())
    rows = {}
    for shard in manifest.shards:
        assert set(shard.attrs) >= {"preprocess", "dedup"}
        src = pq.read_table(shard.uri, columns=["id", "meta"]).to_pylist()
        attrs = pq.read_table(shard.attrs["dedup"]).to_pylist()
        keep = pq.read_table(shard.attrs["preprocess"], columns=["keep"]).column("keep").to_pylist()
        for s, a, k in zip(src, attrs, keep):
            original = json.loads(s["meta"] or "{}").get("id", s["id"])
            rows[original] = {**a, "keep": k}
    assert len(rows) == len(docs) + 2
    kept = {i for i, r in rows.items() if r["keep"]}
    assert {"doc-00", "doc-01", "copy-exact", "copy-near"} <= kept, "preprocess dropped a planted document"
    assert rows["copy-exact"]["exact_duplicate"] and rows["copy-exact"]["cluster_id"] == rows["doc-00"]["cluster_id"]
    assert rows["copy-near"]["near_duplicate"] and rows["copy-near"]["cluster_id"] == rows["doc-01"]["cluster_id"]
    assert not rows["doc-00"]["is_duplicate"] and not rows["doc-01"]["is_duplicate"]
    assert sum(r["is_duplicate"] for r in rows.values()) == 2
