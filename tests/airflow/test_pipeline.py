"""The pipeline DAG is built from the stages' declarations (``airflow_curation/pipeline.py``): one TaskGroup per
stage, its inputs, its trigger rules and its optional skip, with nothing about the order written by hand."""

from __future__ import annotations

import importlib.util
from datetime import datetime
from pathlib import Path

import pytest
from airflow.sdk import DAG

from airflow_curation.operators.base import CurationStageOperator
from airflow_curation.pipeline import Pipeline
from airflow_curation.stages import STAGES
from airflow_curation.stages.attrs import AttrsStage

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dag():
    spec = importlib.util.spec_from_file_location("curation_pipeline_groups", REPO / "dags" / "curation_pipeline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def test_one_group_per_stage_and_validate_after_all(dag):
    groups = {g: set(tg.children) for g, tg in dag.task_group_dict.items()}
    streamed_on = {"ingest", "dedup", "quality", "decontaminate", "pii"}  # a later stage streams on their shards
    stages = (
        "ingest",
        "preprocess",
        "boilerplate",
        "dedup",
        "quality",
        "decontaminate",
        "pii",
        "mix",
        "enrich",
        "tokenize",
        "export",
    )
    assert set(groups) == set(stages)
    for stage in stages:
        gates = {"launch", "checkpoints"} | ({"first_shards"} if stage in streamed_on else set())
        assert groups[stage] == {f"{stage}.{g}" for g in gates}, stage
    # every task is in a stage's group but validate, which runs after every group
    assert set(dag.task_ids) - set().union(*groups.values()) == {"validate"}
    assert dag.task_dict["validate"].upstream_task_ids >= {f"{s}.checkpoints" for s in stages}


def test_a_streamed_on_stages_full_gate_runs_between_its_readers_launch_and_gate(dag):
    """dag.test() runs one deferred gate at a time: the upstream's full gate (the one that relaunches a cancelled
    task) must come after its reader's launch (the reader streams meanwhile) and before its reader's full gate
    (which would wait inline for a reader that waits on that relaunch). Not from an optional upstream: its skip
    would skip the reader's gate."""
    t = dag.task_dict
    for upstream, reader in (("ingest", "preprocess"), ("dedup", "pii")):  # readers that always run
        assert f"{reader}.launch" in t[f"{upstream}.checkpoints"].upstream_task_ids, (upstream, reader)
    for upstream, reader in (("ingest", "preprocess"), ("dedup", "pii"), ("dedup", "quality"), ("pii", "enrich")):
        assert f"{upstream}.checkpoints" in t[f"{reader}.checkpoints"].upstream_task_ids, (upstream, reader)
    assert "quality.checkpoints" not in t["pii.checkpoints"].upstream_task_ids  # quality is optional


def test_optional_stages_and_their_readers(dag):
    t = dag.task_dict
    candidates = ("boilerplate", "quality", "decontaminate", "mix", "enrich", "tokenize", "export")
    optional = {s for s in candidates if t[f"{s}.launch"].optional}
    assert optional == set(candidates)
    assert not any(t[f"{s}.launch"].optional for s in ("ingest", "preprocess", "dedup", "pii"))
    # a stage that reads an optional one runs when it was skipped; one that reads only required stages does not
    none_failed = {s for s in ("preprocess", "dedup", "quality", "pii", "mix", "enrich", "tokenize", "export")
                   if t[f"{s}.launch"].trigger_rule == "none_failed"}  # fmt: skip
    assert none_failed == {"dedup", "pii", "mix", "tokenize", "export"}
    # dedup reads boilerplate's cleaned text when it ran, else preprocess's manifest
    assert t["dedup.launch"].upstream_task_ids == {"boilerplate.checkpoints", "preprocess.checkpoints"}
    assert t["dedup.launch"].input_manifest == (
        "{{ ti.xcom_pull(task_ids='boilerplate.checkpoints', key='manifest_uri') or "
        "ti.xcom_pull(task_ids='preprocess.checkpoints', key='manifest_uri') }}"
    )
    # tokenize reads mix's selection when it ran, else what it read before
    assert "'mix.checkpoints'" in t["tokenize.launch"].input_manifest
    assert t["validate"].trigger_rule == "none_failed"
    # backend options are keyed by stage, not by task id
    assert "task.stage" in t["dedup.launch"].backend_options


class _Loop(AttrsStage):
    name = "loop_a"
    UPSTREAM = ("loop_b",)


class _LoopB(AttrsStage):
    name = "loop_b"
    UPSTREAM = ("loop_a",)


def _op(stage: str) -> type[CurationStageOperator]:
    return type(f"Op_{stage}", (CurationStageOperator,), {"stage": stage})


def test_a_cycle_or_a_missing_upstream_is_refused_with_the_stages_named(monkeypatch):
    monkeypatch.setitem(STAGES, "loop_a", _Loop)
    monkeypatch.setitem(STAGES, "loop_b", _LoopB)
    with DAG("cycle", schedule=None, start_date=datetime(2026, 1, 1)):
        pipeline = Pipeline(common={"dataset": "d"})
        pipeline.add(_op("loop_a"))
        pipeline.add(_op("loop_b"))
        with pytest.raises(ValueError, match="form a cycle: (loop_a -> loop_b -> loop_a|loop_b -> loop_a -> loop_b)"):
            pipeline.build()
    with DAG("missing", schedule=None, start_date=datetime(2026, 1, 1)):
        pipeline = Pipeline(common={"dataset": "d"})
        pipeline.add(_op("loop_a"))
        with pytest.raises(ValueError, match=r"stage 'loop_a' reads one of \['loop_b'\], and none is in the pipeline"):
            pipeline.build()
