"""The quality classifier (issue 12, item 2): trained by a command from labelled Parquet, scored in the
``quality`` stage as an additive ``quality_score`` column with a threshold rule that drops with a reason.

Data: prose vs navigation/index pages generated from the standard library (``quality_corpus``), split by
module, so held-out rows come from modules the model never saw.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import quality_corpus
from sklearn.metrics import roc_auc_score

from airflow_curation.cli import main as curation
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest
from airflow_curation.core.schema import DROP_REASON, KEEP
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.ingest.stage import IngestStage
from airflow_curation.stages.quality.model import MODEL_FILE, WEIGHTS_FILE, ModelError, QualityModel, train_parquet
from airflow_curation.stages.quality.stage import QualityStage

AUC_MIN = 0.95  # held-out separation of prose from navigation pages


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rows = quality_corpus.labelled()
    train, held = quality_corpus.split(rows)
    folder = tmp_path_factory.mktemp("labelled")

    def write(name, part):
        path = folder / f"{name}.parquet"
        pq.write_table(
            pa.table(
                {
                    "id": [r[0] for r in part],
                    "text": [r[1] for r in part],
                    "label": [r[2] for r in part],
                    "kind": ["prose" if r[2] else "nav" for r in part],
                }
            ),
            path,
        )
        return path

    return {"train": write("train", train), "held": write("held", held), "held_rows": held, "folder": folder}


@pytest.fixture(scope="module")
def model_dir(data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("model") / "m1"
    summary = train_parquet([str(data["train"])], str(out), text_field="text", label_field="label")
    assert summary["holdout_rows"] > 0 and summary["labels"] == {"positive": 1, "negative": 0}
    return out


def _auc(rows, scores) -> float:
    return roc_auc_score([r[2] for r in rows], scores)


def test_trained_model_separates_held_out_modules(model_dir, data):
    model = QualityModel.load(str(model_dir))
    held = data["held_rows"]
    assert _auc(held, model.score([r[1] for r in held])) >= AUC_MIN
    doc = json.loads((model_dir / MODEL_FILE).read_text())
    assert doc["format_version"] == 1 and doc["features"]["buckets"] == 1 << 18
    assert doc["training"]["rows"] == len(pq.read_table(data["train"])) and doc["training"]["holdout_auc"] >= AUC_MIN
    assert model.checksum.startswith("xxh64:")
    # Nothing but model.json and the weights: no temp file left behind.
    assert sorted(p.name for p in model_dir.iterdir()) == [MODEL_FILE, WEIGHTS_FILE]


def test_a_changed_weights_file_is_refused(model_dir, tmp_path):
    copy = tmp_path / "m"
    copy.mkdir()
    (copy / MODEL_FILE).write_bytes((model_dir / MODEL_FILE).read_bytes())
    weights = bytearray((model_dir / WEIGHTS_FILE).read_bytes())
    weights[-1] ^= 0xFF
    (copy / WEIGHTS_FILE).write_bytes(bytes(weights))
    with pytest.raises(ModelError, match="changed after training"):
        QualityModel.load(str(copy))
    with pytest.raises(ModelError, match="model.json is missing"):
        QualityModel.load(str(tmp_path / "nowhere"))


def test_training_refuses_bad_labels(data, tmp_path):
    three = tmp_path / "three.parquet"
    pq.write_table(pa.table({"text": ["a b", "c d", "e f", "g h"], "label": ["x", "y", "z", "x"]}), three)
    with pytest.raises(ValueError, match="not 0/1"):
        train_parquet([str(three)], str(tmp_path / "m"))
    with pytest.raises(ValueError, match="exactly two labels"):
        train_parquet([str(three)], str(tmp_path / "m"), positive="x")
    with pytest.raises(ValueError, match="has no column 'body'"):
        train_parquet([str(data["train"])], str(tmp_path / "m"), text_field="body")
    assert not (tmp_path / "m").exists()


def test_cli_trains_then_scores_plain_parquet(data, tmp_path, capsys):
    model = tmp_path / "cli-model"
    code = curation(
        [
            "quality",  # "curation quality train" is "curation quality-train"
            "train",
            "--input",
            str(data["train"]),
            "--text-field",
            "text",
            "--label-field",
            "kind",
            "--positive",
            "prose",
            "--out",
            str(model),
        ]
    )
    trained = json.loads(capsys.readouterr().out)
    assert code == 0 and trained["labels"] == {"positive": "prose", "negative": "nav"}
    assert trained["holdout_auc"] >= AUC_MIN

    out = tmp_path / "scored"
    assert curation(["quality", str(data["held"]), "--output", str(out), "--model", str(model)]) == 0
    capsys.readouterr()
    attrs = pq.read_table(out / "held.parquet")
    held = data["held_rows"]
    assert attrs.column_names == ["id", "quality_score", KEEP, DROP_REASON]
    assert attrs.column("id").to_pylist() == [r[0] for r in held]
    scores = np.asarray(attrs.column("quality_score").to_pylist())
    assert _auc(held, scores) >= AUC_MIN and ((scores >= 0) & (scores <= 1)).all()
    # The preset's threshold: P(good) >= 0.5 kept, the rest dropped as quality_classifier.
    keep = attrs.column(KEEP).to_pylist()
    assert keep == [bool(s >= 0.5) for s in scores]
    assert set(attrs.column(DROP_REASON).filter(pa.array([not k for k in keep])).to_pylist()) == {"quality_classifier"}

    # A stricter threshold from the command line drops more, with the same reason.
    strict = tmp_path / "strict"
    assert (
        curation(["quality", str(data["held"]), "--output", str(strict), "--model", str(model), "--min-score", "0.9"])
        == 0
    )
    capsys.readouterr()
    kept_strict = pq.read_table(strict / "held.parquet").column(KEEP).to_pylist()
    assert sum(kept_strict) <= sum(keep) and kept_strict == [bool(s >= 0.9) for s in scores]

    assert (
        curation(["quality", str(data["held"]), "--output", str(tmp_path / "x"), "--model", str(tmp_path / "no")]) == 1
    )
    assert "model.json is missing" in capsys.readouterr().err


def _ingest(tmp_path, rows) -> tuple[Lake, str]:
    raw = tmp_path / "raw"
    raw.mkdir()
    half = len(rows) // 2
    for k, part in enumerate((rows[:half], rows[half:])):
        (raw / f"part{k}.jsonl").write_text("".join(json.dumps({"text": r[1]}) + "\n" for r in part))
    lake = Lake(str(tmp_path / "lake"), "docs")
    stage = IngestStage(lake, {"inputs": [str(raw)], "unit_bytes": 1}, "r1")
    assert StageRunner(stage).run().rows == len(rows)
    return lake, stage.manifest_uri


def test_stage_on_a_lake_reruns_only_when_the_model_changes(model_dir, data, tmp_path, capsys):
    held = data["held_rows"]
    lake, ingest_uri = _ingest(tmp_path, held)
    config = {"input_manifest": ingest_uri, "model": str(model_dir)}
    first = QualityStage(lake, config, "r1")
    manifest = StageRunner(first).run()
    acc = manifest.accounting
    assert acc["read"] == len(held) and acc["kept"] + sum(acc["dropped"].values()) == len(held)
    assert set(acc["dropped"]) <= {"quality_classifier"}
    texts = {r[1]: r[2] for r in held}
    labels, scores = [], []
    for shard in manifest.shards:
        shard_text = pq.read_table(shard.uri, columns=["text"]).column("text").to_pylist()
        attrs = pq.read_table(shard.attrs["quality"])
        assert first.fingerprint in shard.attrs["quality"]
        labels += [texts[t] for t in shard_text]
        scores += attrs.column("quality_score").to_pylist()
    assert roc_auc_score(labels, scores) >= AUC_MIN

    # Same model: every shard skipped. Retrained (another C): another fingerprint, every shard recomputed.
    assert {u.status for u in StageRunner(QualityStage(lake, config, "r1")).run().units} == {"skipped"}
    other = tmp_path / "m2"
    train_parquet([str(data["train"])], str(other), c=0.5)
    retrained = QualityStage(lake, {**config, "model": str(other), "workers": 2}, "r2")  # a process pool
    assert retrained.fingerprint != first.fingerprint
    assert {u.status for u in StageRunner(retrained).run().units} == {"done"}
    # Retraining in place (same folder, new content) is a new configuration too.
    inplace = tmp_path / "inplace"
    train_parquet([str(data["train"])], str(inplace))
    fp1 = QualityStage(lake, {**config, "model": str(inplace)}, "r3").fingerprint
    train_parquet([str(data["train"])], str(inplace), c=0.5)
    assert QualityStage(lake, {**config, "model": str(inplace)}, "r3").fingerprint != fp1

    # The CLI on the lake reads the newest complete upstream manifest (ingest's here).
    code = curation(
        ["quality", "--lake", lake.root, "--dataset", lake.dataset, "--run-id", "cli", "--model", str(model_dir)]
    )
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    cli_manifest = Manifest.read(result["manifest_uri"])
    assert cli_manifest.config["input_manifest"] == ingest_uri and cli_manifest.accounting == acc


def test_rules_must_read_the_score(model_dir, tmp_path):
    lake = Lake(str(tmp_path / "lake"), "d")
    with pytest.raises(ValueError, match="read other columns"):
        QualityStage(lake, {"input_manifest": "/m.json", "model": str(model_dir), "preset": "gopher"}, "r")
    with pytest.raises(ValueError, match="no model given|model"):
        QualityStage(lake, {"input_manifest": "/m.json"}, "r")


def test_operator_coerces_its_settings():
    from airflow_curation.operators.quality import QualityOperator

    op = QualityOperator(
        task_id="q", dataset="d", lake="/l", input_manifest="/m.json", model="/models/q", min_score="0.7"
    )
    assert op.build_config({}) == {"input_manifest": "/m.json", "model": "/models/q", "min_score": 0.7}
    assert "min_score" in op.template_fields and "model" in op.template_fields


def test_operator_skips_without_a_model_when_asked():
    from airflow.sdk.exceptions import AirflowSkipException

    from airflow_curation.operators.quality import QualityOperator

    op = QualityOperator(task_id="q", dataset="d", lake="/l", input_manifest="/m.json", model=" ", optional=True)
    with pytest.raises(AirflowSkipException, match="quality skipped: no model configured"):
        op.execute({})


def test_a_min_score_past_a_probability_is_refused(model_dir, tmp_path):
    """The score is a probability: ``min_score`` 5 (a percentage typed as such) dropped every document."""
    lake = Lake(str(tmp_path / "lake"), "docs")
    for bad in (5, 1.01, -0.5):
        with pytest.raises(ValueError, match=f"quality: min_score must be between 0 and 1, not {float(bad)}"):
            QualityStage(lake, {"input_manifest": "/m.json", "model": str(model_dir), "min_score": bad}, "r1")
    assert QualityStage(lake, {"input_manifest": "/m.json", "model": str(model_dir), "min_score": 1}, "r1").rules()
