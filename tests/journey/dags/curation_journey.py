"""A recurring curation DAG for the journey test: one logical date = one snapshot partition.

``make_shards`` writes a small synthetic run (ingest, preprocess and dedup manifests, attrs and
checkpoints) into ``snapshot=<ds>``; ``validate`` gates it with the real ValidateOperator (deferred
to the triggerer, job run by the local backend) and publishes the report and the curated Asset.
Thresholds are DAG params, so a run triggered with stricter ones fails on its checks.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, Param, task

from airflow_curation.operators.validate import ValidateOperator, curated_asset

LAKE = os.environ.get("CURATION_JOURNEY_LAKE", "/tmp/curation-journey-lake")
DATASET = "journey"

with DAG(
    dag_id="curation_journey",
    schedule="@daily",
    start_date=datetime(2026, 11, 1),
    catchup=False,
    max_active_runs=4,
    params={
        "min_rows": Param(10, type="integer", minimum=0, description="fewest curated rows allowed"),
        "max_duplicate_rate": Param(0.9, type="number", minimum=0, maximum=1),
    },
    tags=["curation", "journey"],
) as dag:

    @task
    def make_shards(ds=None, run_id=None, dag_run=None, logical_date=None) -> dict:
        from journey_synth import build_run

        from airflow_curation.core.layout import curation_run_id

        rid = curation_run_id(run_id, ds, run_type=dag_run.run_type, logical_date=logical_date)
        uris = build_run(LAKE, DATASET, snapshot=ds, run_id=rid, shards=2, rows=60)
        return {"manifest_uri": uris["dedup"]}

    shards = make_shards()
    validate = ValidateOperator(
        task_id="validate",
        lake=LAKE,
        dataset=DATASET,
        snapshot="{{ ds }}",
        input_task_id="make_shards",
        min_rows="{{ params.min_rows }}",
        max_duplicate_rate="{{ params.max_duplicate_rate }}",
        outlets=[curated_asset(LAKE, DATASET)],
        # Not faster: Airflow 3.3.2 can mark a task failed (or up for retry) when it resumes from
        # deferral before the scheduler has processed the executor's event for the deferring attempt
        # (a race seen under heavy load). A slower poll makes it rare, retries cover it, and failed
        # checks still fail at once (AirflowFailException skips retries).
        poll_interval=10.0,
        retries=2,
        retry_delay=timedelta(seconds=2),
    )
    shards >> validate
