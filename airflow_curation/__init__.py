"""airflow-curation: an Apache Airflow 3 provider for curating LLM training data."""

__version__ = "0.1.0"


def get_provider_info() -> dict:
    """Provider metadata read by Airflow's ProvidersManager (entry point ``apache_airflow_provider``).

    Plain data, no heavy imports: Airflow calls this at start-up in every component.
    """
    return {
        # Must equal the distribution name or Airflow refuses the provider.
        "package-name": "airflow-curation",
        "name": "Curation",
        "description": "Curate LLM training data at scale: ingest, preprocess, dedup, enrich and validate "
        "shards of a data lake, as durable, resumable backend jobs (local, Slurm, Kubernetes).",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "Curation",
                "external-doc-url": "https://github.com/airflow-curation/airflow-curation",
                "tags": ["software"],
            }
        ],
        "operators": [{"integration-name": "Curation", "python-modules": _operator_modules()}],
        "sensors": [{"integration-name": "Curation", "python-modules": ["airflow_curation.sensors.shard_checkpoint"]}],
        "triggers": [
            {
                "integration-name": "Curation",
                "python-modules": ["airflow_curation.triggers.stage_job", "airflow_curation.triggers.shard_checkpoint"],
            }
        ],
        "hooks": [
            {
                "integration-name": "Curation",
                "python-modules": ["airflow_curation.hooks.curation", "airflow_curation.hooks.slurm"],
            }
        ],
        "connection-types": [
            {
                "connection-type": "curation",
                "hook-class-name": "airflow_curation.hooks.curation.CurationHook",
                "hook-name": "Curation",
                "conn-fields": {
                    "backend": {
                        "label": "Backend",
                        "schema": {"type": ["string", "null"]},
                        "description": "Where stage jobs run: local, slurm or kubernetes",
                    }
                },
                "ui-field-behaviour": {
                    "hidden-fields": ["schema", "port"],
                    "relabeling": {"host": "Lake URL", "login": "Storage key", "password": "Storage secret"},
                    "placeholders": {
                        "host": "s3://bucket/lake",
                        "extra": '{"backend_options": {}, "storage_options": {"s3": {}}}',
                    },
                },
            },
            _slurm_connection_type(),
        ],
        "extra-links": [
            "airflow_curation.links.curation.CurationManifestLink",
            "airflow_curation.links.curation.CurationJobLogLink",
            "airflow_curation.links.curation.CurationReportLink",
            "airflow_curation.operators.enrich.RayDashboardLink",
        ],
    }


def _operator_modules() -> list[str]:
    """The base operator's module and each installed stage's ``airflow_curation.operators.<stage>``: derived
    from the stage entry points, so a stage's operator is listed once it is installed (found, not imported)."""
    from importlib.metadata import entry_points
    from importlib.util import find_spec

    stages = sorted(ep.name for ep in entry_points(group="airflow_curation.stages"))
    found = [f"airflow_curation.operators.{name}" for name in stages]
    return ["airflow_curation.operators.base", *(m for m in found if find_spec(m) is not None)]


def _slurm_connection_type() -> dict:
    # The slurm connection form (partition, account, QOS, sbatch options, the login node's ssh connection).
    from airflow_curation.hooks.slurm_conn import CONNECTION_TYPE

    return CONNECTION_TYPE
