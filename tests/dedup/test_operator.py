"""DedupOperator: templated settings become the dedup stage's config (and the stage accepts them)."""

from __future__ import annotations

import pytest

from airflow_curation.core.layout import Lake
from airflow_curation.stages.dedup.stage import DedupStage


def test_templated_strings_become_typed_settings():
    from airflow_curation.operators.dedup import DedupOperator

    op = DedupOperator(
        task_id="dedup",
        dataset="ds",
        lake="/tmp/lake",
        input_manifest="/tmp/m.json",
        threshold="0.7",
        num_perm="64",
        verify="true",
        mapper="",
        memory_budget="1000000",
        max_failed_fraction="None",
        config={"tokenizer": "space"},
    )
    config = op.build_config({})
    assert config == {
        "input_manifest": "/tmp/m.json",
        "threshold": 0.7,
        "num_perm": 64,
        "verify": True,
        "memory_budget": 1000000,
        "tokenizer": "space",
    }
    assert {"input_manifest", "threshold", "verify", "mapper"} <= set(op.template_fields)
    stage = DedupStage(Lake("/tmp/lake", "ds"), config, "r1")
    assert (stage.params.bands, stage.params.rows) != (9, 13)  # derived from 0.7 / 64


def test_missing_manifest_is_a_clear_error():
    from airflow_curation.operators.dedup import DedupOperator

    op = DedupOperator(task_id="dedup", dataset="ds", lake="/tmp/lake", input_manifest="")
    with pytest.raises(ValueError, match="no input_manifest"):
        op.build_config({})
