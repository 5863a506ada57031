"""Test DAG: the launch task does not wait; its checkpoint gate relaunches the job's retryable failure;
a later reader of the launch task's handle (a second gate) must follow the newest attempt, not the
failed first one that the launch task's XCom names."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_curation.operators.base import CurationStageOperator
from airflow_curation.sensors.shard_checkpoint import ShardCheckpointSensor

with DAG(
    dag_id="curation_sensor_relaunch",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={"lake": "", "jobs": "", "flag": ""},
) as dag:
    launch = CurationStageOperator(
        task_id="slurmtest",
        stage="slurmtest",
        lake="{{ params.lake }}",
        dataset="d",
        config={"units": 3, "fail_units": ["u001"], "fail_flag": "{{ params.flag }}", "max_attempts": 1},
        backend="relaunchable_local",
        backend_options={"work_dir": "{{ params.jobs }}"},
        wait=False,
    )
    gates = [
        ShardCheckpointSensor(
            task_id=task_id,
            manifest_uri=launch.output["manifest_uri"],
            job=launch.output["job"],
            deferrable=False,
            poke_interval=0.2,
        )
        for task_id in ("gate", "later_reader")
    ]
    gates[0] >> gates[1]
