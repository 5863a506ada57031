"""Validate: declared checks over the curated view (DuckDB, or Daft on Ray) and the curation report."""

from airflow_curation.stages.validate.checks import CheckResult, ValidationFailed, load_checks
from airflow_curation.stages.validate.stage import ValidateStage
from airflow_curation.stages.validate.view import CuratedView

__all__ = ["CheckResult", "CuratedView", "ValidateStage", "ValidationFailed", "load_checks"]
