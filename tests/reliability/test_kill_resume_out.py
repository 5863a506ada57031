"""Training data out, killed: SIGKILL (as a dying node) at each fault point of mix, tokenize and export,
rerun from that stage, and get the very rows, packed sequences and exported files a clean run gets.

The chain is ingest -> preprocess -> mix (three keys, up-sampled: rows packed more than once) -> tokenize
-> export (Megatron, MDS and Parquet; ~35 buckets in ~6 gather units, the spill files merged first). What is compared is
``reliability/scenarios.py``'s, with every exported file's bytes (``Pipeline.output_view``): a trainer
reads them, so "the same" means the same bytes, not the same sequences in another order.
"""

from __future__ import annotations

import pytest
from process_helpers import sample_corpus
from tokenizer_files import stdlib_prose, train_bpe

from airflow_curation.core.manifest import Manifest
from reliability.pipeline import OUT_STAGES, Pipeline
from reliability.scenarios import (
    Outcome,
    Reference,
    Scenario,
    assert_no_temporary_file_survives,
    assert_reran_to_the_reference,
    build_reference,
    killed_with_a_temp_in,
)


def _scatter_resumed(out: Outcome) -> None:
    # The rerun's scatter took the spill files the killed run had committed, and wrote the rest.
    kept = [u for (stage, u) in out.records if stage == "export_scatter"]
    assert kept, "no scatter unit has a checkpoint after the rerun"


def _merge_resumed(out: Outcome) -> None:
    kept = [u for (stage, u) in out.records if stage == "export_merge"]
    assert kept, "no merge unit has a checkpoint after the rerun"


SCENARIOS = [
    Scenario(
        "storage.before_rename@3",
        "mix",
        "two shards' tallies kept, the third's a temporary file",
        killed_with_a_temp_in("web/mix/_tally"),
    ),
    Scenario("mix.after_attrs_write@2", "mix", "a shard's mix attrs complete, no checkpoint"),
    Scenario("mix.after_commit@3", "mix", "three shards committed, the job gone"),
    Scenario("mix.before_manifest", "mix", "every shard committed, only the planned manifest"),
    Scenario(
        "storage.before_rename@12",
        "tokenize",
        "a shard's packed sequences and attrs temporary files, two shards committed",
        killed_with_a_temp_in("web/packed"),
    ),
    Scenario("tokenize.after_attrs_write@2", "tokenize", "a shard's packed file and attrs complete, no checkpoint"),
    Scenario("tokenize.after_commit@3", "tokenize", "three shards committed, the job gone"),
    Scenario("tokenize.before_manifest", "tokenize", "every shard committed, only the planned manifest"),
    Scenario(
        "export_scatter.before_commit@2",
        "export",
        "one shard scattered, the next one's spill written without a checkpoint",
        _scatter_resumed,
    ),
    Scenario("export.after_scatter", "export", "the scatter done and marked, no bucket gathered"),
    Scenario(
        "storage.before_rename@39",
        "export",
        "the middle pass: one merged file committed, the next a temporary file",
        killed_with_a_temp_in("web/export"),
    ),
    Scenario(
        "export_merge.before_commit@2",
        "export",
        "the middle pass: a merged file written without a checkpoint",
        _merge_resumed,
    ),
    Scenario("export.after_merge", "export", "the merge done and marked, no bucket gathered"),
    Scenario(
        "storage.before_rename@80",
        "export",
        "the first gather unit's files half written (an MDS shard a temporary file)",
        killed_with_a_temp_in("web/export"),
    ),
    Scenario("export.before_commit@2", "export", "a gather unit's files written, no checkpoint"),
    Scenario("export.after_commit@3", "export", "three gather units committed, the job gone"),
    Scenario(
        "export.before_manifest",
        "export",
        "every unit committed, the MDS index and _SUCCESS.json written, only the planned manifest",
    ),
]


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Pipeline:
    base = tmp_path_factory.mktemp("reliability-out")
    return Pipeline(
        root=base / "lake",
        corpus=sample_corpus(base / "corpus", 40) / "data",
        model="",
        work=base / "jobs",
        stages=OUT_STAGES,
        tokenizer=train_bpe(str(base / "tokenizer.json"), stdlib_prose(200)),
    )


@pytest.fixture(scope="module")
def reference(pipeline: Pipeline, tmp_path_factory) -> Reference:
    ref = build_reference(pipeline, tmp_path_factory.mktemp("saved-out"))
    # What the scenarios rely on: up-sampled rows, and several gather units each of several buckets.
    assert Manifest.read(pipeline.manifest_uri("tokenize")).config["tokens"]["repeats"] > 0
    assert len(Manifest.read(pipeline.manifest_uri("export")).units) >= 4
    assert len(Manifest.read(pipeline.lake.manifest_uri("run1", "export_merge")).units) >= 3  # the middle pass
    return ref


@pytest.mark.parametrize("scenario", SCENARIOS, ids=str)
def test_killed_stage_reruns_to_the_reference_output(scenario: Scenario, outcomes, reference: Reference):
    assert_reran_to_the_reference(scenario, outcomes(scenario), reference)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=str)
def test_no_temporary_file_survives_the_rerun(scenario: Scenario, outcomes):
    assert_no_temporary_file_survives(outcomes(scenario))
