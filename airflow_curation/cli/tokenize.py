"""``curation tokenize`` summary: the token totals of the run (from its manifest), beside the row counts."""

from __future__ import annotations

import argparse
from typing import Any


def summary(args: argparse.Namespace, result: dict[str, Any]) -> dict[str, Any]:
    from airflow_curation.core.manifest import Manifest

    tokens = Manifest.read(result["manifest_uri"]).config.get("tokens") or {}
    return {**result, "tokens": {k: v for k, v in tokens.items() if k != "shards"}}
