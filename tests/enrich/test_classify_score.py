"""classify and score with real vLLM on CPU (tiny random Llamas), checked against the transformers engine."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from enrich_helpers import make_docs, read_attrs, run_enrich, write_lake

from airflow_curation.core.checkpoint import CheckpointStore
from airflow_curation.core.manifest import Manifest
from airflow_curation.stages.base import StageFailed
from airflow_curation.stages.enrich.model_runtimes import ModelLoadError, release_engines

pytestmark = pytest.mark.usefixtures("release_engines_after")

COMMON = {"dtype": "float32", "max_input_tokens": 40, "batch_size": 6, "checkpoint_rows": 10, "max_model_len": 256}


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    docs = make_docs(24)
    docs[7]["text"] = "long " * 300
    lake, uri = write_lake(str(tmp_path_factory.mktemp("lake")), {"s0": docs}, duplicates={"s0": {"d00002"}})
    return lake, uri, docs


def _probs_by_engine(lake_fixture, model, task, **extra):
    lake, uri, _ = lake_fixture
    out = {}
    for engine in ("vllm", "transformers"):
        _, m = run_enrich(
            lake,
            uri,
            run_id=f"{task}-{engine}",
            **{**COMMON, "task": task, "model": model, "model_runtime": engine, "name": f"{task}-{engine}", **extra},
        )
        out[engine] = read_attrs(m.shards[0].attrs[f"enrich-{task}-{engine}"]).to_pydict()
        if engine == "vllm":
            release_engines()  # one engine in memory at a time
    return out


def test_classify_labels_and_probabilities_match_transformers(lake, llama_classify):
    out = _probs_by_engine(lake, llama_classify, "classify")
    v, t = out["vllm"], out["transformers"]
    assert v["id"] == t["id"] == [d["id"] for d in lake[2]]
    rows = [i for i, e in enumerate(v["enriched"]) if e]
    assert len(rows) == 23 and v["skip_reason"][2] == "duplicate" and v["probs"][2] is None
    for i in rows:
        p = np.asarray(v["probs"][i])
        assert p.shape == (3,) and abs(p.sum() - 1) < 1e-4
        assert v["label"][i] == ["low", "medium", "high"][int(p.argmax())]  # names from the model's id2label
        assert abs(v["label_prob"][i] - p.max()) < 1e-6
        assert np.allclose(p, t["probs"][i], atol=2e-3), (i, p, t["probs"][i])
    assert v["truncated"][7] is True and v["input_tokens"][7] > 40


def test_score_is_a_scalar_matching_transformers(lake, llama_score):
    out = _probs_by_engine(lake, llama_score, "score")
    v, t = out["vllm"], out["transformers"]
    rows = [i for i, e in enumerate(v["enriched"]) if e]
    sv = np.asarray([v["score"][i] for i in rows])
    st = np.asarray([t["score"][i] for i in rows])
    assert np.all(np.isfinite(sv)) and np.allclose(sv, st, atol=2e-3)
    assert len(set(np.round(sv, 5))) > 1  # different documents, different scores


def test_labels_setting_must_match_the_model(lake, llama_classify):
    l, uri, _ = lake
    with pytest.raises(StageFailed, match="2 labels configured"):
        run_enrich(
            l,
            uri,
            run_id="badlabels",
            **{
                **COMMON,
                "task": "classify",
                "model": llama_classify,
                "model_runtime": "transformers",
                "labels": ["a", "b"],
                "name": "badlabels",
                "max_attempts": 1,
            },
        )


def test_missing_model_fails_fast_with_a_clear_error(lake, tmp_path):
    l, uri, _ = lake
    with pytest.raises(
        StageFailed,
        match=r"ModelLoadError: cannot load model '.*/nowhere' with the vllm "
        r"engine: no such folder",
    ):
        run_enrich(l, uri, run_id="nomodel", **{**COMMON, "task": "score", "model": str(tmp_path / "nowhere")})


def test_broken_model_folder_fails_with_a_clear_error_and_no_checkpoint(lake, tmp_path):
    l, uri, _ = lake
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "llama", "hidden_size": "not a number"')
    from airflow_curation.stages.base import StageRunner
    from airflow_curation.stages.enrich.stage import EnrichStage

    stage = EnrichStage(
        l,
        {**COMMON, "input_manifest": uri, "mapper": "local", "task": "score", "model": str(broken), "max_attempts": 2},
        "broken",
    )
    with pytest.raises(StageFailed) as err:
        StageRunner(stage).run()
    assert f"cannot load model '{broken}' with the vllm engine" in str(err.value)
    store = CheckpointStore(l.checkpoint_dir("enrich", stage.fingerprint))
    assert store.load("s0") is None and store.failure("s0") is not None
    assert not os.path.exists(stage.output_uri("s0"))
    # The engine cache remembers the failure: the retry did not try to load it again.
    from airflow_curation.stages.enrich import model_runtimes

    assert any(s.model == str(broken) for s in model_runtimes._FAILED)
    with pytest.raises(ModelLoadError):
        model_runtimes.get_engine(stage.engine_spec)


def test_cli_on_a_lake(lake, llama_score, capsys):
    from airflow_curation.cli import main

    l, uri, docs = lake
    rc = main(
        [
            "enrich",
            "--lake",
            l.root,
            "--dataset",
            l.dataset,
            "--input-manifest",
            uri,
            "--run-id",
            "cli",
            "--task",
            "score",
            "--model",
            llama_score,
            "--model-runtime",
            "transformers",
            "--mapper",
            "local",
            "--name",
            "quality",
            "--dtype",
            "float32",
            "--batch-size",
            "5",
        ]
    )
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["rows"] == len(docs) and summary["manifest_uri"] == l.manifest_uri("cli", "enrich")
    out = read_attrs(Manifest.read(summary["manifest_uri"]).shards[0].attrs["enrich-quality"])
    assert out.column("skip_reason").to_pylist()[2] == "duplicate"
    assert sum(out.column("enriched").to_pylist()) == len(docs) - 1
