"""Run a stage from a job spec, with no Airflow: ``python -m airflow_curation.jobs run SPEC.json``.

The protocol (subcommands ``run``, ``collect``, ``reopen``) is in :mod:`airflow_curation.jobs.cli`; the
documents it reads and writes are :class:`JobSpec` and :class:`JobResult`; how far a run has got is
:mod:`airflow_curation.jobs.progress`.
"""

from __future__ import annotations

from airflow_curation.jobs.cli import group_result_uri, main, run_spec
from airflow_curation.jobs.result import EXIT_BAD_SPEC, EXIT_OK, EXIT_STAGE_FAILED, JobResult
from airflow_curation.jobs.spec import JobSpec

__all__ = [
    "EXIT_BAD_SPEC",
    "EXIT_OK",
    "EXIT_STAGE_FAILED",
    "JobResult",
    "JobSpec",
    "group_result_uri",
    "main",
    "run_spec",
]
