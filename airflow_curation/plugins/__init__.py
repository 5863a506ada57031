"""Airflow UI plugins of the curation provider (loaded by the api-server through the
``airflow.plugins`` entry point)."""
