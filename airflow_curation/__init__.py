"""airflow-curation: an Apache Airflow 3 provider for curating LLM training data."""

__version__ = "0.1.0"


def get_provider_info() -> dict:
    return {"package-name": "airflow-curation", "name": "Curation", "description": "x", "versions": [__version__]}
