"""The provider is discovered by a real Airflow: CLI listing, connection type, extra links, DAG import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import airflow_curation

pytestmark = pytest.mark.airflow
REPO = Path(__file__).resolve().parents[2]


def _airflow() -> str:
    candidate = Path(sys.executable).with_name("airflow")
    return str(candidate) if candidate.exists() else "airflow"


def test_provider_info_is_importable_data():
    info = airflow_curation.get_provider_info()
    assert info["package-name"] == "airflow-curation"
    assert info["versions"] == [airflow_curation.__version__]
    for kind in ("operators", "sensors", "triggers", "hooks"):
        for group in info[kind]:
            for module in group["python-modules"]:
                __import__(module)
    for link in info["extra-links"]:
        module, _, cls = link.rpartition(".")
        assert getattr(__import__(module, fromlist=[cls]), cls)().name


def test_airflow_providers_list_shows_the_provider(airflow_db):
    proc = subprocess.run(
        [_airflow(), "providers", "list", "--output", "json"],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Log lines may precede the JSON document on stdout.
    listing = next(line for line in proc.stdout.splitlines() if line.startswith("[{"))
    providers = {p["package_name"]: p for p in json.loads(listing)}
    assert "airflow-curation" in providers, sorted(providers)
    assert providers["airflow-curation"]["version"] == airflow_curation.__version__
    assert "Curate LLM training data" in providers["airflow-curation"]["description"]


def test_providers_manager_knows_the_connection_type_and_links(airflow_db):
    from airflow.providers_manager import ProvidersManager
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    hooks = ProvidersManagerTaskRuntime().hooks
    assert "curation" in hooks
    assert hooks["curation"].hook_class_name == "airflow_curation.hooks.curation.CurationHook"
    pm = ProvidersManager()
    assert "airflow_curation.links.curation.CurationManifestLink" in pm.extra_links_class_names
    # The connection form comes from provider info (conn-fields / ui-field-behaviour), not hook methods.
    assert "extra__curation__backend" in pm.connection_form_widgets
    assert pm.field_behaviours["curation"]["relabeling"]["host"] == "Lake URL"


def test_the_dag_folder_imports_cleanly(airflow_db):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert not bag.import_errors, bag.import_errors
    dag = bag.get_dag("curation_pipeline")
    assert dag is not None
    assert {"ingest.launch", "ingest.checkpoints"} <= set(dag.task_ids)
    assert dag.catchup is False
    assert set(dag.params) >= {"input", "lake", "dataset", "backend", "max_failed_fraction"}
