"""``curation validate`` summary: the verdict and where the report is (the checks' summary on stderr)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def summary(args: argparse.Namespace, result: dict[str, Any]) -> dict[str, Any]:
    from airflow_curation.core import storage
    from airflow_curation.core.manifest import Manifest

    config = Manifest.read(result["manifest_uri"]).config
    report_json, report_html = config.get("report_json"), config.get("report_html")
    if report_json and storage.exists(report_json):
        print(storage.read_json(report_json).get("summary", ""), file=sys.stderr)
    return {**result, "status": config.get("validation"), "report_json": report_json, "report_html": report_html}
