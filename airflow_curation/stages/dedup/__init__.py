"""Global exact and MinHash-LSH near dedup (see :mod:`airflow_curation.stages.dedup.stage`)."""
