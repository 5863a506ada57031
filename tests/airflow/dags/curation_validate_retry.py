"""Test DAG: validate's first try "dies" after its job has finished, as when Airflow marks a finished
deferred task up for retry.

The retry must take the job's verdict (report included) from the task state store, not submit the
validate job again, whether the checks passed or failed. ``params.snapshot`` lets two runs share one
snapshot (a manual run beside the scheduled one).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_curation.operators.ingest import IngestOperator
from airflow_curation.operators.validate import ValidateOperator


class DiesAfterItsJobOnFirstTry(ValidateOperator):
    def execute_complete(self, context, event):
        if context["ti"].try_number == 1:
            raise RuntimeError("simulated: the finished task was marked up for retry")
        return super().execute_complete(context, event)


with DAG(
    dag_id="curation_validate_retry",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={"input": "", "lake": "", "min_rows": 1, "snapshot": ""},
) as dag:
    common = dict(lake="{{ params.lake }}", dataset="web", snapshot="{{ params.snapshot or ds }}", poll_interval=0.2)
    ingest = IngestOperator(task_id="ingest", inputs="{{ params.input }}", deferrable=False, **common)
    DiesAfterItsJobOnFirstTry(
        task_id="validate",
        input_task_id="ingest",
        min_rows="{{ params.min_rows }}",
        retries=2,
        retry_delay=timedelta(seconds=0),
        **common,
    ).set_upstream(ingest)
