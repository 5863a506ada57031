"""``curation export`` summary: what was written (counts, formats, where), from the run's manifest."""

from __future__ import annotations

import argparse
from typing import Any


def summary(args: argparse.Namespace, result: dict[str, Any]) -> dict[str, Any]:
    from airflow_curation.core.manifest import Manifest

    export = Manifest.read(result["manifest_uri"]).config.get("export") or {}
    return {
        **result,
        "export": {k: v for k, v in export.items() if k not in ("megatron_prefixes", "parquet", "bucket_sequences")},
    }
