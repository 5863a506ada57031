"""The filters between ingest and the model stages, killed: SIGKILL (as a dying node) at each fault point of
boilerplate, dedup after it, quality, decontaminate and pii, rerun from that stage, and get the very curated
rows a clean run gets (``reliability/scenarios.py``).

The chain is ingest -> preprocess -> boilerplate (lines held by 3 documents) -> dedup -> quality (a model
trained here on the quality tests' labelled pages) -> decontaminate (an evaluation set cut from the corpus's
own documents, so that some match) -> pii.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from process_helpers import sample_corpus
from quality import quality_corpus

from airflow_curation.core.manifest import Manifest
from airflow_curation.stages.quality.model import train_parquet
from reliability.pipeline import MID_STAGES, Pipeline
from reliability.scenarios import (
    Reference,
    Scenario,
    assert_no_temporary_file_survives,
    assert_reran_to_the_reference,
    build_reference,
    killed_with_a_temp_in,
)

SCENARIOS = [
    Scenario(
        "storage.before_rename@10",
        "boilerplate",
        "two shards' line counts spilled, the third's a temporary file",
        killed_with_a_temp_in("web/boilerplate"),
    ),
    Scenario("boilerplate.after_counts", "boilerplate", "every shard's counts, no global step"),
    Scenario("boilerplate.before_attrs@2", "boilerplate", "the global step done, one shard's attrs written"),
    Scenario("boilerplate.before_manifest", "boilerplate", "every shard committed, only the planned manifest"),
    Scenario("dedup.before_attrs@2", "dedup", "over boilerplate's cleaned text: one shard's attrs committed"),
    Scenario("quality.after_attrs_write@2", "quality", "a shard's scores complete, no checkpoint"),
    Scenario("quality.after_commit@3", "quality", "three shards committed"),
    Scenario("quality.before_manifest", "quality", "every shard committed, only the planned manifest"),
    Scenario(
        "storage.before_rename@1",
        "decontaminate",
        "the evaluation n-gram index a temporary file",
        killed_with_a_temp_in("web/decontaminate"),
    ),
    Scenario(
        "storage.before_rename@2",
        "decontaminate",
        "the index written, its _SUCCESS.json a temporary file",
        killed_with_a_temp_in("web/decontaminate"),
    ),
    Scenario("decontaminate.after_attrs_write@2", "decontaminate", "a shard's matches complete, no checkpoint"),
    Scenario("decontaminate.after_commit@3", "decontaminate", "three shards committed"),
    Scenario("pii.after_attrs_write@2", "pii", "a shard's findings complete, no checkpoint"),
    Scenario("pii.before_manifest", "pii", "every shard committed, only the planned manifest"),
]


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Pipeline:
    base = tmp_path_factory.mktemp("reliability-mid")
    corpus = sample_corpus(base / "corpus", 40) / "data"
    train, _ = quality_corpus.split(quality_corpus.labelled())
    labelled = base / "labelled.parquet"
    pq.write_table(pa.table({"text": [r[1] for r in train], "label": [r[2] for r in train]}), labelled)
    model = str(base / "quality-model")
    train_parquet([str(labelled)], model, text_field="text", label_field="label")
    # The evaluation set: 55 words from every fourth long document of the first file (some survive the filters).
    docs = []
    for line in (corpus / "stdlib-000.jsonl").read_text(errors="replace").splitlines()[:80]:
        try:
            docs.append(json.loads(line))
        except ValueError:
            continue  # the corpus's planted bad records
    texts = [d["text"] for d in docs if isinstance(d, dict) and isinstance(d.get("text"), str)]
    long = [t for t in texts if len(t.split()) > 40][::4]
    eval_set = base / "eval.jsonl"
    eval_set.write_text("".join(json.dumps({"text": " ".join(t.split()[5:60])}) + "\n" for t in long))
    return Pipeline(
        root=base / "lake",
        corpus=corpus,
        model="",
        work=base / "jobs",
        stages=MID_STAGES,
        quality_model=model,
        eval_set=str(eval_set),
    )


@pytest.fixture(scope="module")
def reference(pipeline: Pipeline, tmp_path_factory) -> Reference:
    ref = build_reference(pipeline, tmp_path_factory.mktemp("saved-mid"))
    # What the scenarios rely on: each filter drops some rows.
    for stage in ("boilerplate", "dedup", "quality", "decontaminate"):
        assert Manifest.read(pipeline.manifest_uri(stage)).accounting["dropped"], stage
    return ref


@pytest.mark.parametrize("scenario", SCENARIOS, ids=str)
def test_killed_stage_reruns_to_the_reference_output(scenario: Scenario, outcomes, reference: Reference):
    assert_reran_to_the_reference(scenario, outcomes(scenario), reference)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=str)
def test_no_temporary_file_survives_the_rerun(scenario: Scenario, outcomes):
    assert_no_temporary_file_survives(outcomes(scenario))
