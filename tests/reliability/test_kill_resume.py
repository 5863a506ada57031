"""Issue 9: kill every stage at each fault point (SIGKILL, as a dying node), rerun, and get the very
curated output a clean run gets (what is compared: ``reliability/scenarios.py``).

The clean reference run and the saved lakes are built once per module; each scenario's outcome is
computed once and shared by the two tests that read it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from enrich_models import build_llama
from process_helpers import sample_corpus

from reliability.pipeline import Pipeline
from reliability.scenarios import (
    Outcome,
    Reference,
    Scenario,
    assert_no_temporary_file_survives,
    assert_reran_to_the_reference,
    build_reference,
    killed_with_a_temp_in,
)


def _enrich_resumed_mid_shard(out: Outcome) -> None:
    # The shard killed between two parts restarts after its last part, not from its first row.
    resumed = [r["extra"]["rows_resumed"] for (stage, _), r in out.records.items() if stage == "enrich"]
    assert any(n > 0 for n in resumed), f"no enrich unit resumed from its parts: {resumed}"


def _enrich_took_the_finished_output(out: Outcome) -> None:
    # Killed after the merged attrs file was written, before its checkpoint: the rerun takes that file.
    reused = [
        u
        for (stage, u), r in out.records.items()
        if stage == "enrich" and r["extra"]["rows_computed"] == 0 and r["accounting"]["kept"] > 0
    ]
    assert reused, "the rerun recomputed the unit whose attrs were already complete"


SCENARIOS = [
    Scenario(
        "ingest.mid_shard@3", "ingest", "a shard half written (a temporary file)", killed_with_a_temp_in("web/shards")
    ),
    Scenario("ingest.before_commit", "ingest", "a unit's shards complete, no checkpoint"),
    Scenario("ingest.after_commit@2", "ingest", "two units committed, the job gone"),
    Scenario("ingest.before_manifest", "ingest", "every unit committed, only the planned manifest"),
    Scenario(
        "storage.before_rename@5",
        "preprocess",
        "a checkpoint record written but not renamed",
        killed_with_a_temp_in("web/_checkpoints/preprocess"),
    ),
    Scenario("preprocess.after_attrs_write@2", "preprocess", "a unit's attrs complete, no checkpoint"),
    Scenario("dedup_signatures.before_commit@2", "dedup", "a shard's spill files written, no checkpoint"),
    Scenario("dedup.after_signatures", "dedup", "phase 1 done, phase 2 not started"),
    Scenario("dedup.mid_components@2", "dedup", "connected components half way"),
    Scenario("dedup.before_unit", "dedup", "the global phase done, no shard's attrs yet"),
    Scenario("dedup.before_attrs@2", "dedup", "one shard's attrs committed, the next not written"),
    Scenario(
        "enrich.after_part@9",
        "enrich",
        "a shard committed, the next between two within-shard parts",
        _enrich_resumed_mid_shard,
    ),
    Scenario(
        "enrich.before_commit",
        "enrich",
        "a shard's merged attrs written, no checkpoint",
        _enrich_took_the_finished_output,
    ),
    Scenario("validate.during_query", "validate", "the engine open, the checks not run"),
    Scenario("validate.before_report", "validate", "checks done, no report"),
]


def _sample_corpus(out: Path) -> Path:
    """The demo's generator, small: documents with planted exact/near duplicates, junk, bad records."""
    return sample_corpus(out, 40) / "data"


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Pipeline:
    base = tmp_path_factory.mktemp("reliability")
    return Pipeline(
        root=base / "lake",
        corpus=_sample_corpus(base / "corpus"),
        model=build_llama(str(base / "model"), "score"),
        work=base / "jobs",
    )


@pytest.fixture(scope="module")
def reference(pipeline: Pipeline, tmp_path_factory) -> Reference:
    return build_reference(pipeline, tmp_path_factory.mktemp("saved"))


@pytest.mark.parametrize("scenario", SCENARIOS, ids=str)
def test_killed_stage_reruns_to_the_reference_output(scenario: Scenario, outcomes, reference: Reference):
    assert_reran_to_the_reference(scenario, outcomes(scenario), reference)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=str)
def test_no_temporary_file_survives_the_rerun(scenario: Scenario, outcomes):
    assert_no_temporary_file_survives(outcomes(scenario))
