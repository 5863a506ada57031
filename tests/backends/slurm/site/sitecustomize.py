"""Loaded at start-up by the Python processes that the test Slurm jobs run (their PYTHONPATH points
here): registers the test-only stage so that the real jobs entrypoint can run it."""

from airflow_curation.stages import STAGES

STAGES.setdefault("slurmtest", "curation_slurm_test_stage:SleepyStage")
