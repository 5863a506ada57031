"""Extra links shown on curation tasks."""
