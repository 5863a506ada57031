"""Stages: one engine each, all run by :class:`airflow_curation.stages.base.StageRunner`."""

STAGES = {
    "dedup": "airflow_curation.stages.dedup.stage:DedupStage",
    "validate": "airflow_curation.stages.validate.stage:ValidateStage",
    "ingest": "airflow_curation.stages.ingest.stage:IngestStage",
    "preprocess": "airflow_curation.stages.preprocess.stage:PreprocessStage",
    "enrich": "airflow_curation.stages.enrich.stage:EnrichStage",
}


def stage_class(name: str):
    import importlib

    try:
        target = STAGES[name]
    except KeyError:
        raise ValueError(f"unknown stage {name!r}; known: {sorted(STAGES)}") from None
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)
