"""The quality stage: a trained classifier's score for every document, and a keep/drop decision from a
threshold rule on it, as additive columns.

Writes ``attrs/quality/<fingerprint>/<shard>.parquet`` (or ``DIR/<file>.parquet`` for plain Parquet):
``id``, ``quality_score`` (P(good), float32), ``keep`` and ``drop_reason`` (the first failing rule's
name: ``quality_classifier`` for the preset's threshold). The model is a folder written by
``curation quality-train`` (:mod:`airflow_curation.stages.quality.model`); its checksum is part of the
stage's fingerprint, so a retrained model never reuses the old model's checkpoints or files. An
embedding-based model also puts its embedding model folder's checksum there (checked against the one the
head was trained on) and scores through the enrich stage's model runtime.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property
from typing import Any

import pyarrow as pa

from airflow_curation.core.filters import Rule, apply_rules, resolve_rules
from airflow_curation.core.fingerprint import config_fingerprint
from airflow_curation.core.schema import TEXT
from airflow_curation.stages.attrs import AttrsStage
from airflow_curation.stages.settings import Setting, str_or_list

SCORE = "quality_score"


class QualityStage(AttrsStage):
    """Score documents with a trained quality classifier and drop those below the threshold.

    Writes id, quality_score (P(good) from the model), keep and drop_reason per row: attrs/quality/ in a
    lake, or DIR/<file>.parquet for plain Parquet files. Train the model with curation quality-train. See
    docs/quality.md.
    """

    name = "quality"
    version = "1"
    UPSTREAM = ("dedup", "boilerplate", "preprocess", "ingest")
    OPTIONAL_WITHOUT = "model"
    SETTINGS = AttrsStage.SETTINGS.extend(
        Setting("model", str, None, "quality model folder (written by curation quality-train)", required=True),
        Setting("preset", str_or_list, "quality", "filter preset(s) over quality_score: quality, or none"),
        Setting(
            "min_score",
            float,
            None,
            "lowest quality_score kept (default: the preset's threshold, 0.5)",
            minimum=0,  # a probability: past 1 (a percentage typed as such) every row is dropped
            maximum=1,
        ),
        Setting("rules", list, [], "extra rules, a JSON list of {name, signal, min, max} over quality_score"),
        Setting("batch_rows", int, 4096, "rows per batch and per output row group", runtime=True, minimum=1),
        Setting(
            "embed_model",
            str,
            None,
            "embedding-based model: where its embedding model folder is on the workers (default: the folder "
            "model.json names; its checksum must match)",
            runtime=True,
        ),
    )

    @classmethod
    def check_config(cls, config: dict[str, Any]) -> None:
        super().check_config(config)
        quality_rules(config)  # a bad preset or rule

    def __init__(self, lake, config, run_id) -> None:
        super().__init__(lake, config, run_id)
        self.model_checksum  # noqa: B018 - and so does a missing model
        self.embed_checksum  # noqa: B018 - or a changed embedding model

    def rules(self) -> list[Rule]:
        return quality_rules(self.config)

    @cached_property
    def model_checksum(self) -> str:
        from airflow_curation.stages.quality.model import model_checksum

        return model_checksum(self.config["model"])

    @cached_property
    def embed_checksum(self) -> str | None:
        """An embedding-based model's embedding model folder, checked now (so a changed folder fails the
        plan, not every shard): its checksum, or None for a hashed n-gram model."""
        from dataclasses import replace

        from airflow_curation.stages.quality.model import EmbeddingFeatures, model_features

        features = model_features(self.config["model"])
        if not isinstance(features, EmbeddingFeatures):
            return None
        features = replace(features, model=self.config.get("embed_model") or features.model)
        features.verify()
        return features.model_checksum

    @property
    def fingerprint(self) -> str:
        # The model's content, not its path: a moved copy is the same configuration, a retrained model another.
        config = {**self.SETTINGS.fingerprint_config(self.config), "model": self.model_checksum}
        if self.embed_checksum:
            config["embed_model"] = self.embed_checksum
        return config_fingerprint(self.name, config, self.version)

    @cached_property
    def model(self):
        from airflow_curation.stages.quality.model import ModelError, QualityModel

        model = QualityModel.load(self.config["model"], embed_model=self.config.get("embed_model"))
        if model.checksum != self.model_checksum:
            raise ModelError(f"quality: model {self.config['model']} changed while this run was planned; rerun")
        return model

    def __getstate__(self) -> dict:
        # Workers load the weights themselves (a process pool pickles the stage per unit).
        return {k: v for k, v in self.__dict__.items() if k != "model"}

    def compute(self, table: pa.Table) -> pa.Table:
        scores = pa.array(self.model.score(table.column(TEXT).to_pylist()), type=pa.float32())
        decisions = apply_rules(pa.table({SCORE: scores}), self.rules())
        return pa.table({SCORE: scores, **{n: decisions.column(n) for n in decisions.column_names}})


def quality_rules(config: dict[str, Any]) -> list[Rule]:
    """The rules on the score ``config`` (the stage's settings) gives: its preset and rules, ``min_score``."""
    rules = resolve_rules(config["preset"], config["rules"])
    bad = [r.name for r in rules if r.signal != SCORE]
    if bad:
        raise ValueError(f"quality: rules {bad} read other columns; the quality stage has only {SCORE}")
    if config.get("min_score") is not None:
        if not any(r.name == "quality_classifier" for r in rules):
            rules.append(Rule("quality_classifier", SCORE, min=float(config["min_score"])))
        else:
            rules = [replace(r, min=float(config["min_score"])) if r.name == "quality_classifier" else r for r in rules]
    return rules
