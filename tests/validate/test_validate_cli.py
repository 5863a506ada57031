"""``curation validate`` end to end in a subprocess, as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from .synth import build_run


def _curation(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "import sys; from airflow_curation.cli import main; sys.exit(main())", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_cli_passes_then_fails_on_a_tighter_threshold(tmp_path):
    root = str(tmp_path)
    uris = build_run(root, shards=2, rows=80)
    ok = _curation(
        "validate",
        "--lake",
        root,
        "--dataset",
        "demo",
        "--run-id",
        "cli1",
        "--input-manifest",
        uris["dedup"],
        "--min-rows",
        "5",
    )
    assert ok.returncode == 0, ok.stderr
    out = json.loads(ok.stdout)
    assert out["status"] == "passed" and out["rows"] == 160
    assert os.path.exists(out["report_html"]) and out["report_html"].endswith("_manifests/cli1/report.html")

    bad = _curation(
        "validate",
        "--lake",
        root,
        "--dataset",
        "demo",
        "--run-id",
        "cli2",
        "--input-manifest",
        uris["dedup"],
        "--min-rows",
        "100000",
    )
    assert bad.returncode == 1
    assert "[FAIL] min_rows" in bad.stderr and "expected >= 100000" in bad.stderr
    # --warn-only reports the same failure and exits 0.
    warn = _curation(
        "validate",
        "--lake",
        root,
        "--dataset",
        "demo",
        "--run-id",
        "cli3",
        "--input-manifest",
        uris["dedup"],
        "--min-rows",
        "100000",
        "--warn-only",
    )
    assert warn.returncode == 0 and json.loads(warn.stdout)["status"] == "failed"
