"""``curation mix`` summary: the mixture (per key: target, available, selected, epochs, achieved share)."""

from __future__ import annotations

import argparse
from typing import Any


def summary(args: argparse.Namespace, result: dict[str, Any]) -> dict[str, Any]:
    from airflow_curation.core.manifest import Manifest

    mixture = Manifest.read(result["manifest_uri"]).config.get("mixture") or {}
    return {**result, "mixture": {k: v for k, v in mixture.items() if k not in ("plans", "inputs")}}
