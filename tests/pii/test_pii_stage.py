"""The pii stage: additive attrs on a lake and on plain files, counts in validate's report, the redacted
view on both query engines, the operator and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest
from airflow_curation.core.pii import KINDS
from airflow_curation.stages import stage_class
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.pii.stage import PiiStage
from airflow_curation.stages.validate import ValidateStage

REPO = Path(__file__).resolve().parents[2]
AWS_ID = "AKIAIOSFODNN7EXAMPLE"
TEXTS = [
    "Contact john.doe@gmail.com or (555) 123-4567 for details.",
    "Nothing personal in this sentence at all.",
    f"The server 81.2.69.160 uses key {AWS_ID} and a@b.example.com is fine.",
    "Version 1.2.3.4 of the tool, released 2023-10-12, ISBN 978-0-306-40615-7.",
    "Fine.",
    "Two mails: ann@mail.de, bob@mail.de.",
]
REDACTED = [
    "Contact <EMAIL> or <PHONE> for details.",
    None,
    "The server <IP_ADDRESS> uses key <KEY> and a@b.example.com is fine.",
    None,
    None,
    "Two mails: <EMAIL>, <EMAIL>.",
]


@pytest.fixture
def ingested(ingest_texts) -> tuple[Lake, str]:
    lake, uri, rows = ingest_texts(TEXTS, "web")
    assert rows == 2 * len(TEXTS)
    return lake, uri


def test_registered_as_a_builtin_stage():
    assert stage_class("pii") is PiiStage


def test_stage_writes_additive_attrs_and_validate_reports_counts(ingested):
    lake, ingest_uri = ingested
    shards_before = {s.uri: Path(s.uri).read_bytes() for s in Manifest.read(ingest_uri).shards}
    stage = PiiStage(lake, {"input_manifest": ingest_uri}, "r1")
    manifest = StageRunner(stage).run()
    assert manifest.status == "complete"
    assert manifest.accounting == {"read": 12, "kept": 12, "dropped": {}, "quarantined": {}}
    for shard in manifest.shards:
        assert Path(shard.uri).read_bytes() == shards_before[shard.uri]  # never rewritten
        attrs = pq.read_table(shard.attrs["pii"])
        assert attrs.column_names == ["id", "pii_spans", "pii_count", *(f"pii_{k}" for k in KINDS), "redacted_text"]
        assert attrs.column("redacted_text").to_pylist() == REDACTED
        assert attrs.column("pii_count").to_pylist() == [2, 0, 2, 0, 0, 2]
        assert attrs.column("pii_spans").to_pylist()[0] == [
            {"start": 8, "end": 26, "kind": "email"},
            {"start": 30, "end": 44, "kind": "phone"},
        ]
    # A rerun skips every shard.
    assert {u.status for u in StageRunner(PiiStage(lake, {"input_manifest": ingest_uri}, "r1")).run().units} == {
        "skipped"
    }

    checks = [
        {"name": "no_email_left", "type": "sql", "max": 0, "query": "SELECT count(*) FROM curated_redacted "
         "WHERE regexp_matches(text, '[a-z]+@mail\\.de')"},
        {"name": "redacted_rows", "type": "sql", "min": 4, "max": 4,
         "query": "SELECT count(*) FROM curated_redacted WHERE text LIKE '%<EMAIL>%'"},
    ]  # fmt: skip
    StageRunner(ValidateStage(lake, {"input_manifest": stage.manifest_uri, "checks": checks}, "r1")).run()
    report = json.loads(Path(lake.path("_manifests", "r1", "report.json")).read_text())
    assert report["status"] == "passed", report["summary"]
    counts = report["stages"]["pii"]["counts"]
    assert counts == {
        "pii_private_key": 0,
        "pii_aws_key": 2,
        "pii_github_token": 0,
        "pii_secret": 0,
        "pii_email": 6,
        "pii_ipv6": 0,
        "pii_ipv4": 2,
        "pii_phone": 2,
        "docs_with_pii": 6,
    }
    assert "pii" in report["columns"] and "redacted_text" in report["columns"]["pii"]
    html = Path(lake.path("_manifests", "r1", "report.html")).read_text()
    assert "Counts (pii)" in html and "pii_email" in html


def test_redacted_view_on_daft(ingested):
    lake, ingest_uri = ingested
    stage = PiiStage(lake, {"input_manifest": ingest_uri, "kinds": "email"}, "r2")
    StageRunner(stage).run()
    check = {"name": "emails", "type": "sql", "min": 4, "max": 4,
             "query": "SELECT count(*) FROM curated_redacted WHERE text LIKE '%<EMAIL>%'"}  # fmt: skip
    config = {"input_manifest": stage.manifest_uri, "checks": [check], "query_engine": "daft"}
    StageRunner(ValidateStage(lake, config, "r2")).run()
    report = json.loads(Path(lake.path("_manifests", "r2", "report.json")).read_text())
    assert report["status"] == "passed", report["summary"]
    assert report["stages"]["pii"]["counts"] == {"pii_email": 6, "docs_with_pii": 4}


def test_settings_are_checked_before_any_work(ingested):
    lake, ingest_uri = ingested
    with pytest.raises(ValueError, match="unknown PII kinds \\['mail'\\]"):
        PiiStage(lake, {"input_manifest": ingest_uri, "kinds": "mail,ipv4"}, "r1")
    a = PiiStage(lake, {"input_manifest": ingest_uri, "kinds": "ipv4,email"}, "r1")
    b = PiiStage(lake, {"input_manifest": ingest_uri, "kinds": ["email", "ipv4"]}, "r1")
    assert a.config["kinds"] == ["email", "ipv4"] and a.fingerprint == b.fingerprint


def test_operator_coerces_templated_settings():
    from airflow_curation.operators.pii import PiiOperator

    op = PiiOperator(
        task_id="pii", dataset="web", lake="/tmp/lake", input_manifest="/m.json", kinds="email,phone",
        ip_public_only="false", redacted_text="None",
    )  # fmt: skip
    assert op.build_config({}) == {"input_manifest": "/m.json", "kinds": ["email", "phone"], "ip_public_only": False}
    assert {"kinds", "ip_public_only", "redacted_text"} <= set(op.template_fields)


def _cli(*args: str) -> subprocess.CompletedProcess:
    code = "import sys; from airflow_curation.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO, timeout=600, check=False
    )


def test_cli_on_plain_parquet_and_on_a_lake(ingested, tmp_path):
    src = tmp_path / "mine.parquet"
    pq.write_table(pa.table({"id": [f"d{i}" for i in range(len(TEXTS))], "text": TEXTS}), src)
    proc = _cli("pii", str(src), "--output", str(tmp_path / "out"), "--kinds", "email,ipv4", "--no-redacted-text")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = pq.read_table(tmp_path / "out" / "mine.parquet")
    assert out.column_names == ["id", "pii_spans", "pii_count", "pii_email", "pii_ipv4"]
    assert out.column("pii_count").to_pylist() == [1, 0, 1, 0, 0, 2]

    lake, ingest_uri = ingested
    proc = _cli("pii", "--lake", lake.root, "--dataset", lake.dataset, "--run-id", "cli")
    assert proc.returncode == 0, proc.stderr[-2000:]
    manifest = Manifest.read(json.loads(proc.stdout)["manifest_uri"])
    assert manifest.config["input_manifest"] == ingest_uri and all("pii" in s.attrs for s in manifest.shards)
    bad = _cli("pii", str(src), "--output", str(tmp_path / "out2"), "--kinds", "names")
    assert bad.returncode == 2 and "unknown PII kinds" in bad.stderr


def test_pipeline_dag_runs_pii_after_dedup_and_validate_reads_it():
    import importlib.util

    spec = importlib.util.spec_from_file_location("curation_pipeline_pii", REPO / "dags" / "curation_pipeline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tasks = module.dag.task_dict
    # pii streams on dedup's shards as they land (on quality's or decontaminate's when they are configured),
    # enrich on pii's; validate waits for the full gates.
    assert tasks["dedup.first_shards"].downstream_task_ids == {"quality.launch", "decontaminate.launch", "pii.launch"}
    assert tasks["quality.first_shards"].downstream_task_ids == {"decontaminate.launch", "pii.launch"}
    assert tasks["decontaminate.first_shards"].downstream_task_ids == {"pii.launch"}
    assert tasks["pii.first_shards"].downstream_task_ids == {"enrich.launch"}
    assert "validate" in tasks["pii.checkpoints"].downstream_task_ids
    assert {"dedup.checkpoints", "pii.checkpoints", "enrich.checkpoints"} <= tasks["validate"].upstream_task_ids
    # pii reads the first of decontaminate, quality and dedup that ran; validate enrich's, else pii's
    assert tasks["pii.launch"].input_manifest.count("xcom_pull") == 3
    assert tasks["validate"].input_manifest == (
        "{{ ti.xcom_pull(task_ids='enrich.checkpoints', key='manifest_uri') or "
        "ti.xcom_pull(task_ids='pii.checkpoints', key='manifest_uri') }}"
    )
