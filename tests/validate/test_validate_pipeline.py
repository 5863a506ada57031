"""Validate over what the real stages write: ingest -> preprocess -> dedup (all in process), then the
report's funnel and drop reasons must agree with the stages' own manifests."""

from __future__ import annotations

import json
import random

import pytest

from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest
from airflow_curation.stages import stage_class
from airflow_curation.stages.base import StageRunner


def _run(lake: Lake, name: str, config: dict, run_id: str = "pipe") -> Manifest:
    return StageRunner(stage_class(name)(lake, config, run_id)).run()


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    base = tmp_path_factory.mktemp("pipe")
    rng = random.Random(7)
    words = (
        "the quick brown fox jumps over the lazy dog while data curation keeps only the good "
        "documents for training large language models and drops the rest"
    ).split()
    docs = [" ".join(rng.choice(words) for _ in range(rng.randint(60, 160))) for _ in range(60)]
    docs += docs[:10]  # exact duplicates
    docs += ["short", "", "!!!! ????"]  # junk for the quality filters
    src = base / "in.jsonl"
    src.write_text("".join(json.dumps({"text": t, "n": i}) + "\n" for i, t in enumerate(docs)))
    lake = Lake(str(base / "lake"), "pipe")
    ingest = _run(lake, "ingest", {"inputs": [str(src)], "target_shard_bytes": 4096, "row_group_rows": 16})
    pre = _run(lake, "preprocess", {"input_manifest": lake.manifest_uri("pipe", "ingest"), "mapper": "local"})
    dedup = _run(lake, "dedup", {"input_manifest": lake.manifest_uri("pipe", "preprocess"), "mapper": "local"})
    return lake, ingest, pre, dedup


def test_report_agrees_with_the_real_stages(pipeline):
    lake, ingest, pre, dedup = pipeline
    assert len(ingest.shards) > 1
    m = _run(lake, "validate", {"input_manifest": lake.manifest_uri("pipe", "dedup"), "max_duplicate_rate": 0.5})
    assert m.status == "complete"
    report = json.loads(open(m.config["report_json"]).read())
    assert report["status"] == "passed", report["summary"]
    funnel = {f["label"]: f["rows"] for f in report["metrics"]["funnel"]}
    assert funnel["ingested"] == ingest.rows == ingest.accounting["kept"]
    assert funnel["preprocess"] == pre.accounting["kept"] < funnel["ingested"]
    assert funnel["dedup"] == funnel["preprocess"] - report["metrics"]["duplicates"]["duplicates"]
    assert report["metrics"]["duplicates"]["duplicates"] >= 10
    assert sum(report["metrics"]["drop_reasons"]["preprocess"].values()) == sum(pre.accounting["dropped"].values())
    assert set(report["stages"]) >= {"ingest", "preprocess", "dedup"}
    assert report["metrics"]["signals"], "preprocess signals should be histogrammed"
