"""Slurm backend (``get_backend("slurm", ...)``): states, sbatch options, scripts, transport and the launcher."""

from airflow_curation.backends.slurm.backend import SlurmBackend
from airflow_curation.backends.slurm.sbatch import SbatchOptions
from airflow_curation.backends.slurm.script import ATTEMPT, ENV_FILE, EXPORTED, TASK, ScriptRenderer, check_job_dir
from airflow_curation.backends.slurm.states import (
    DEFAULT_RESUBMIT_ON,
    FAILURE_NOTES,
    SlurmJobRecord,
    compress,
    failure_word,
    map_state,
    parse_sacct,
    parse_scontrol_jobs,
    summarize,
)
from airflow_curation.backends.slurm.transport import SlurmCommands, SlurmError

__all__ = [
    "ATTEMPT",
    "DEFAULT_RESUBMIT_ON",
    "ENV_FILE",
    "EXPORTED",
    "FAILURE_NOTES",
    "SbatchOptions",
    "ScriptRenderer",
    "SlurmBackend",
    "SlurmCommands",
    "SlurmError",
    "SlurmJobRecord",
    "TASK",
    "check_job_dir",
    "compress",
    "failure_word",
    "map_state",
    "parse_sacct",
    "parse_scontrol_jobs",
    "summarize",
]
