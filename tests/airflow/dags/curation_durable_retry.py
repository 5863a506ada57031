"""Test DAG: the launch task's first attempt "dies" right after submitting its job.

Its retry runs with the same task state store (Airflow's real one) and must reconnect to that job,
not submit a second. The crash is an exception raised after the handle was persisted, the moment a
killed worker would lose.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_curation.operators.ingest import IngestOperator
from airflow_curation.sensors.shard_checkpoint import ShardCheckpointSensor


class WorkerDiesOnFirstTry(IngestOperator):
    def poll_until_complete(self, external_id, context):
        if context["ti"].try_number == 1:
            raise RuntimeError("simulated worker crash after submit")
        return super().poll_until_complete(external_id, context)


with DAG(
    dag_id="curation_durable_retry",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={"input": "", "lake": ""},
) as dag:
    launch = WorkerDiesOnFirstTry(
        task_id="ingest",
        inputs="{{ params.input }}",
        lake="{{ params.lake }}",
        dataset="web",
        snapshot="{{ ds }}",
        retries=1,
        retry_delay=timedelta(seconds=0),
        poll_interval=0.2,
    )
    ShardCheckpointSensor(task_id="ingest_checkpoints", manifest_uri=launch.output["manifest_uri"], poll_interval=0.2)
