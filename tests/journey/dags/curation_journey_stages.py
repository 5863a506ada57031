"""The real stages end to end in the journey: ingest -> preprocess -> dedup -> validate, each a
deferrable operator whose job runs on the local backend, on a small JSONL the test writes."""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_curation.operators.dedup import DedupOperator
from airflow_curation.operators.ingest import IngestOperator
from airflow_curation.operators.preprocess import PreprocessOperator
from airflow_curation.operators.validate import ValidateOperator

LAKE = os.environ.get("CURATION_JOURNEY_LAKE", "/tmp/curation-journey-lake")
INPUT = os.environ.get("CURATION_JOURNEY_INPUT", "/tmp/curation-journey-input.jsonl")
# poll_interval and a retry: see curation_journey.py (a deferral race in Airflow 3.3.2 under load).
COMMON = dict(lake=LAKE, dataset="stages", snapshot="{{ ds }}", poll_interval=5.0, retries=2,
              retry_delay=timedelta(seconds=2))

with DAG(dag_id="curation_journey_stages", schedule=None, start_date=datetime(2026, 11, 1), catchup=False,
         tags=["curation", "journey"]) as dag:
    ingest = IngestOperator(task_id="ingest", inputs=INPUT, config={"target_shard_bytes": 8192}, **COMMON)
    preprocess = PreprocessOperator(task_id="preprocess", input_manifest=ingest.output["manifest_uri"],
                                    mapper="local", **COMMON)
    dedup = DedupOperator(task_id="dedup", input_manifest=preprocess.output["manifest_uri"], mapper="local",
                          **COMMON)
    validate = ValidateOperator(task_id="validate", input_manifest=dedup.output["manifest_uri"],
                                max_duplicate_rate=0.5, **COMMON)
    ingest >> preprocess >> dedup >> validate
