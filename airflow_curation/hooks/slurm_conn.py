"""The ``slurm`` connection type as provider metadata: plain data, importable without Airflow, so that
``get_provider_info()`` can declare the connection form without importing the hook."""

from __future__ import annotations

from typing import Any

# What get_provider_info() declares for the form (the hook methods for this are deprecated since 3.2).
CONN_FIELDS: dict[str, dict[str, Any]] = {
    "ssh_conn_id": {
        "label": "SSH connection of the login node",
        "description": "An ssh connection (host, user, key, host key): the Slurm commands run "
        "there; empty: on the Airflow worker itself",
        "schema": {"type": ["string", "null"]},
    },
    "partition": {"label": "Partition", "description": "sbatch --partition", "schema": {"type": ["string", "null"]}},
    "account": {"label": "Account", "description": "sbatch --account", "schema": {"type": ["string", "null"]}},
    "qos": {"label": "QOS", "description": "sbatch --qos", "schema": {"type": ["string", "null"]}},
    "time_limit": {
        "label": "Time limit",
        "description": "sbatch --time, e.g. 04:00:00",
        "schema": {"type": ["string", "null"]},
    },
    "sbatch_options": {
        "label": "Default sbatch options",
        "description": "More sbatch options, split like a shell would (never run by one), "
        "e.g. --gres=gpu:1 --constraint=a100",
        "schema": {"type": ["string", "null"]},
    },
    "work_dir": {
        "label": "Shared work folder",
        "description": "Folder every node sees for job scripts, specs, results and logs "
        "(default: the lake's _jobs/ folder when the lake is local)",
        "schema": {"type": ["string", "null"]},
    },
    "python": {
        "label": "Python on the compute nodes",
        "description": "Interpreter with airflow-curation installed (default: the worker's)",
        "schema": {"type": ["string", "null"]},
    },
    "shard_groups": {
        "label": "Shard groups",
        "description": "1: one allocation; N: an array of N tasks",
        "schema": {"type": ["integer", "null"], "minimum": 1},
    },
    "array_parallelism": {
        "label": "Array parallelism",
        "description": "The K of --array=0-N%K (0: no limit)",
        "schema": {"type": ["integer", "null"], "minimum": 0},
    },
}
UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    # The login node is an ssh connection of its own (Airflow's SSH provider): no SSH fields here.
    "hidden-fields": ["schema", "password", "host", "login", "port"],
    "relabeling": {},
    "placeholders": {"ssh_conn_id": "slurm_login"},
}
CONNECTION_TYPE: dict[str, Any] = {
    "connection-type": "slurm",
    "hook-class-name": "airflow_curation.hooks.slurm.SlurmHook",
    "hook-name": "Slurm",
    "conn-fields": CONN_FIELDS,
    "ui-field-behaviour": UI_FIELD_BEHAVIOUR,
}
