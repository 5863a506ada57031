"""SIGTERM to ``dag.test`` while a gate's trigger runs inline ends the process.

dag.test runs a deferred task's trigger in its own process, where the task runner's SIGTERM handler (it
calls the task's on_kill and returns) is still in place: the signal was "handled" and the gate went on
waiting, for ever on a run that never completes. The script below gates on such a run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest, UnitEntry

pytestmark = pytest.mark.airflow

SCRIPT = """
import os
from datetime import datetime, timezone
from airflow.sdk import DAG
from airflow_curation.sensors.shard_checkpoint import ShardCheckpointSensor

with DAG("sigterm_gate", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
    ShardCheckpointSensor(task_id="gate", manifest_uri=os.environ["GATE_MANIFEST"], poll_interval=0.5, timeout=3600)

if __name__ == "__main__":
    dag.test(logical_date=datetime(2026, 11, 24, tzinfo=timezone.utc))
    print("DAG TEST RETURNED", flush=True)
"""


def test_sigterm_ends_dag_test_while_a_gate_waits_inline(airflow_db, tmp_path):
    lake = Lake(str(tmp_path / "lake"), "web")
    manifest = Manifest(
        dataset="web",
        stage="ingest",
        run_id="r1",
        fingerprint="fp0123456789abcd",
        lake=lake.to_dict(),
        units=[UnitEntry(unit_id="u0", inputs=["x"], input_checksum="c0")],
        config={"max_failed_fraction": 0.0},
    )
    uri = manifest.write(lake.manifest_uri("r1", "ingest"))
    (tmp_path / "dags").mkdir()
    script = tmp_path / "dags" / "sigterm_gate.py"
    script.write_text(SCRIPT)
    log = tmp_path / "out.log"
    with open(log, "wb") as out:
        env = {**os.environ, "GATE_MANIFEST": uri, "AIRFLOW__CORE__DAGS_FOLDER": str(tmp_path / "dags")}
        proc = subprocess.Popen([sys.executable, str(script)], stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            # The gate has deferred and its trigger is looking: the progress line twice (the task's first
            # look, then the trigger's).
            deadline = time.monotonic() + 240
            while log.read_text(errors="replace").count("0/1 units checkpointed") < 2:
                assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
                assert time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
                time.sleep(0.5)
            proc.send_signal(signal.SIGTERM)
            # A liveness bound, not a timing figure: without the fix the process never ends (the run never completes).
            rc = proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = log.read_text(errors="replace")
    assert rc != 0 and "DAG TEST RETURNED" not in text, text[-3000:]
