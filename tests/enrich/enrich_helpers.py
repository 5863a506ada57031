"""Running the enrich stage in tests."""

from __future__ import annotations

import pyarrow.parquet as pq

from airflow_curation.core.checkpoint import CheckpointStore
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.enrich.stage import EnrichStage


def run_enrich(lake, manifest_uri: str, run_id: str = "e1", **config):
    stage = EnrichStage(lake, {"input_manifest": manifest_uri, "executor": "local", **config}, run_id)
    manifest = StageRunner(stage).run()
    return stage, manifest


def read_attrs(uri: str):
    return pq.read_table(uri)


def record(stage: EnrichStage, unit_id: str):
    return CheckpointStore(stage.lake.checkpoint_dir(stage.name, stage.fingerprint)).load(unit_id)
