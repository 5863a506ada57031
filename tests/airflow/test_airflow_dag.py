"""A real ``dag.test()`` of the curation pipeline on a small generated JSONL input.

dag.test() runs every task in this process against the session's SQLite DB, triggers included (the
sensor really defers), and the ingest job really runs as a local-backend subprocess. The stages after
ingest are marked successful instead of run (``mark_success_pattern``): each stage's own tests run
it, and this test stays about the Airflow layer, and fast.
"""

from __future__ import annotations

import importlib.util
import json
import socket
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import quote

import pytest
import structlog
from curation_airflow_helpers import write_jsonl

from airflow_curation.core import storage
from airflow_curation.core.layout import Lake, curation_run_id
from airflow_curation.core.manifest import Manifest

pytestmark = pytest.mark.airflow
REPO = Path(__file__).resolve().parents[2]
NOT_INGEST = r"(?!ingest).*"  # fullmatch: every task id not starting with "ingest"
# ... nor the launch of a stage that is optional (they run, and skip themselves: nothing is configured)
OPTIONAL = ("quality", "decontaminate", "mix", "enrich", "tokenize", "export")
NOT_INGEST_NOR_OPTIONAL = rf"(?!ingest|({'|'.join(OPTIONAL)})\.launch).*"


@pytest.fixture
def pipeline(airflow_db, monkeypatch):
    monkeypatch.setenv("CURATION_POLL_INTERVAL", "0.2")
    spec = importlib.util.spec_from_file_location(
        "curation_pipeline_under_test", REPO / "dags" / "curation_pipeline.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def _xcoms(dag_run) -> dict[tuple[str, str], object]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.scalars(XComModel.get_many(run_id=dag_run.run_id, dag_ids=dag_run.dag_id)).all()
        return {(r.task_id, r.key): XComModel.deserialize_value(r) for r in rows}


def _states(dag_run) -> dict[str, str]:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        tis = session.scalars(select(TaskInstance).where(TaskInstance.run_id == dag_run.run_id)).all()
        return {ti.task_id: str(ti.state) for ti in tis}


def _task_state(dag_run) -> dict[tuple[str, str], object]:
    from airflow.models.task_state_store import TaskStateStoreModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.scalars(select(TaskStateStoreModel).where(TaskStateStoreModel.run_id == dag_run.run_id)).all()
        return {(r.task_id, r.key): json.loads(r.value) for r in rows}


def test_pipeline_dag_ingests_one_snapshot(pipeline, tmp_path):
    inputs = tmp_path / "in"
    write_jsonl(inputs / "part-a.jsonl", 50)
    write_jsonl(inputs / "part-b.jsonl", 30, start=50)
    (inputs / "bad.jsonl").write_text('{"text": "fine"}\nnot json at all\n{"no_text": 1}\n')
    lake_root = tmp_path / "lake"
    logical = datetime(2026, 11, 29, tzinfo=timezone.utc)

    with structlog.testing.capture_logs() as captured:
        dag_run = pipeline.test(
            logical_date=logical,
            mark_success_pattern=NOT_INGEST_NOR_OPTIONAL,
            run_conf={"input": str(inputs), "lake": str(lake_root), "dataset": "web", "max_failed_fraction": 0.0},
        )
    assert dag_run.state == "success", dag_run.state
    logged = [str(e.get("event")) for e in captured]
    skipped = {e.get("reason") for e in captured if e.get("event") == "Skipping task."}

    lake = Lake(str(lake_root), "web", "2026-11-29")  # the logical date is the snapshot partition
    manifest_uri = lake.manifest_uri(curation_run_id(dag_run.run_id, lake.snapshot), "ingest")
    manifest = Manifest.read(manifest_uri)
    assert manifest.status == "complete"
    assert manifest.rows == 81  # 50 + 30 + the one good line of bad.jsonl
    acc = manifest.accounting
    assert acc["read"] == 83 and sum(acc["quarantined"].values()) == 2
    assert all(storage.exists(s.uri) and s.uri.startswith(lake.base) for s in manifest.shards)

    xcoms = _xcoms(dag_run)
    # The gate's XCom is the summary only: a pointer and counts.
    summary = xcoms[("ingest.checkpoints", "return_value")]
    assert summary == {
        "manifest_uri": manifest_uri,
        "shards": len(manifest.shards),
        "rows": 81,
        "bytes": manifest.bytes,
    }
    launch = xcoms[("ingest.launch", "return_value")]
    assert set(launch) == {"manifest_uri", "job"} and launch["manifest_uri"] == manifest_uri
    assert len(json.dumps(summary)) < 1000
    # Extra links point at the curation plugin, which serves what the task recorded (no file:// URL).
    link = xcoms[("ingest.launch", "_link_CurationManifestLink")]
    assert link.endswith(f"/curation/manifest/curation_pipeline/{quote(dag_run.run_id, safe='')}/ingest.launch"), link
    assert xcoms[("ingest.launch", "curation_links")]["manifest"] == manifest_uri
    assert xcoms[("ingest.launch", "curation_links")]["job_log"] == launch["job"]["log"]
    # A task with nothing to link pushes an empty link (not shown), and reads no XCom for it.
    assert not xcoms.get(("ingest.checkpoints", "_link_CurationManifestLink"))

    # The launch's job handle went to Airflow's real task state store.
    state = _task_state(dag_run)
    assert state[("ingest.launch", "curation_job")]["job_id"] == launch["job"]["job_id"]
    # Local job folders live under the lake's _jobs/ for this run.
    assert Path(launch["job"]["job_dir"]).parent == Path(
        lake.jobs_dir(curation_run_id(dag_run.run_id, lake.snapshot), "ingest")
    )

    # The DAG a user sees: a group per stage; an unconfigured optional stage is one skipped group (its launch
    # says why), the stages after it run anyway.
    states = _states(dag_run)
    for stage in OPTIONAL:
        group = {t: st for t, st in states.items() if t.startswith(f"{stage}.")}
        assert set(group.values()) == {"skipped"} and f"{stage}.launch" in group, (stage, group)
    assert {states[t] for t in ("pii.launch", "validate", "dedup.checkpoints")} == {"success"}
    assert {"quality skipped: no model configured", "export skipped: no formats configured"} <= skipped
    # The launch says where the job runs, its id, where to follow it and the manifest; the gates speak in
    # sentences (the job's result JSON is one readable line, never raw).
    job = launch["job"]
    assert (
        f"Launched the ingest job {job['job_id']} on the local backend (host {socket.gethostname()}); "
        f"follow it at {job['log']}; it writes {manifest_uri}." in logged
    ), [e for e in logged if "Launched" in e]
    done = f"ingest is done: all {len(manifest.units)} units checkpointed; 81 rows in {len(manifest.shards)} shards ("
    assert any(e.startswith(done) and e.endswith(f"manifest {manifest_uri}.") for e in logged), logged[-20:]
    assert not [e for e in logged if '"manifest_uri"' in e or "{'manifest_uri'" in e]

    # The next logical date (a backfill or the next schedule) is its own snapshot partition.
    next_run = pipeline.test(
        logical_date=datetime(2026, 11, 30, tzinfo=timezone.utc),
        mark_success_pattern=NOT_INGEST,
        run_conf={"input": str(inputs / "part-b.jsonl"), "lake": str(lake_root), "dataset": "web"},
    )
    assert next_run.state == "success"
    next_lake = Lake(str(lake_root), "web", "2026-11-30")
    assert (
        Manifest.read(next_lake.manifest_uri(curation_run_id(next_run.run_id, next_lake.snapshot), "ingest")).rows == 30
    )
    assert Manifest.read(manifest_uri).rows == 81  # the earlier partition is untouched
    assert sorted(p.name for p in (lake_root / "web").iterdir()) == ["snapshot=2026-11-29", "snapshot=2026-11-30"]


def test_a_retry_after_a_worker_crash_reconnects_through_the_real_task_state_store(airflow_db, tmp_path):
    spec = importlib.util.spec_from_file_location(
        "curation_durable_retry_under_test", REPO / "tests" / "airflow" / "dags" / "curation_durable_retry.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    write_jsonl(tmp_path / "in" / "a.jsonl", 25)
    lake_root = tmp_path / "lake"

    dag_run = module.dag.test(
        logical_date=datetime(2026, 11, 28, tzinfo=timezone.utc),
        run_conf={"input": str(tmp_path / "in"), "lake": str(lake_root)},
    )
    assert dag_run.state == "success", dag_run.state

    from airflow.models.taskinstance import TaskInstance
    from airflow.models.taskinstancehistory import TaskInstanceHistory
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        ti = session.scalars(
            select(TaskInstance).where(TaskInstance.run_id == dag_run.run_id, TaskInstance.task_id == "ingest")
        ).one()
        earlier = session.scalars(
            select(TaskInstanceHistory).where(
                TaskInstanceHistory.run_id == dag_run.run_id, TaskInstanceHistory.task_id == "ingest"
            )
        ).all()
    assert ti.try_number == 2 and len(earlier) == 1  # the first try really failed and was retried

    run_id = curation_run_id(dag_run.run_id, "2026-11-28")
    jobs = Path(Lake(str(lake_root), "web", "2026-11-28").jobs_dir(run_id, "ingest"))
    assert len([p for p in jobs.iterdir() if p.is_dir()]) == 1, "the retry submitted a second job"
    assert _task_state(dag_run)[("ingest", "curation_job")]["job_dir"].startswith(str(jobs))
    assert _xcoms(dag_run)[("ingest_checkpoints", "return_value")]["rows"] == 25


def test_defaults_come_from_the_connection_and_variables_not_the_dags_folder(pipeline, tmp_path, monkeypatch):
    """A copied DAG file with an empty trigger form: the lake is the `curation_default` connection's,
    the input and dataset are Airflow Variables."""
    write_jsonl(tmp_path / "raw" / "a.jsonl", 12)
    lake_root = tmp_path / "conn-lake"
    monkeypatch.setenv(
        "AIRFLOW_CONN_CURATION_DEFAULT",
        json.dumps({"conn_type": "curation", "extra": {"lake": str(lake_root), "backend": "local"}}),
    )
    monkeypatch.setenv("AIRFLOW_VAR_CURATION_INPUT", str(tmp_path / "raw"))
    monkeypatch.setenv("AIRFLOW_VAR_CURATION_DATASET", "fromvar")
    assert all(pipeline.params[p] is None for p in ("input", "lake", "dataset", "enrich_model"))
    assert all(p.description for p in pipeline.params.values())  # every param says what it does

    dag_run = pipeline.test(logical_date=datetime(2026, 11, 27, tzinfo=timezone.utc), mark_success_pattern=NOT_INGEST)
    assert dag_run.state == "success", dag_run.state
    lake = Lake(str(lake_root), "fromvar", "2026-11-27")
    assert Manifest.read(lake.manifest_uri(curation_run_id(dag_run.run_id, lake.snapshot), "ingest")).rows == 12


def test_a_missing_input_fails_ingest_once_with_one_line(pipeline, tmp_path, monkeypatch):
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    monkeypatch.delenv("AIRFLOW_CONN_CURATION_DEFAULT", raising=False)
    missing = tmp_path / "nowhere"
    dag_run = pipeline.test(
        logical_date=datetime(2026, 11, 26, tzinfo=timezone.utc),
        mark_success_pattern=NOT_INGEST,
        run_conf={"input": str(missing), "lake": str(tmp_path / "lake")},
    )
    assert dag_run.state == "failed"
    with create_session() as session:
        tis = {
            ti.task_id: ti for ti in session.scalars(select(TaskInstance).where(TaskInstance.run_id == dag_run.run_id))
        }
    assert tis["ingest.launch"].state == "failed" and tis["ingest.launch"].try_number == 1  # not retried
    assert tis["ingest.checkpoints"].state == "upstream_failed"
    assert not (tmp_path / "lake").exists()  # nothing was submitted


def test_backend_options_per_stage_are_merged_over_the_connections(pipeline, tmp_path, monkeypatch):
    """``params.backend_options[<stage>]`` reaches that stage's backend over the connection's options (here
    the local backend's work_dir), and only that stage's."""
    write_jsonl(tmp_path / "raw" / "a.jsonl", 12)
    monkeypatch.setenv(
        "AIRFLOW_CONN_CURATION_DEFAULT",
        json.dumps(
            {
                "conn_type": "curation",
                "extra": {
                    "lake": str(tmp_path / "lake"),
                    "backend": "local",
                    "backend_options": {"work_dir": str(tmp_path / "conn-jobs")},
                },
            }
        ),
    )
    dag_run = pipeline.test(
        logical_date=datetime(2026, 11, 25, tzinfo=timezone.utc),
        mark_success_pattern=NOT_INGEST,
        run_conf={
            "input": str(tmp_path / "raw"),
            "backend_options": {"ingest": {"work_dir": str(tmp_path / "ingest-jobs")}, "dedup": {"work_dir": "/x"}},
        },
    )
    assert dag_run.state == "success", dag_run.state
    handle = _task_state(dag_run)[("ingest.launch", "curation_job")]
    assert handle["job_dir"].startswith(str(tmp_path / "ingest-jobs") + "/")
    assert not (tmp_path / "conn-jobs").exists()
