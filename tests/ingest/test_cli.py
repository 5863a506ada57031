"""``curation ingest`` as a user runs it: a real console script in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from airflow_curation.core.manifest import Manifest

CURATION = os.path.join(os.path.dirname(sys.executable), "curation")


def test_cli_ingest_then_rerun_skips(tmp_path):
    src = tmp_path / "corpus.jsonl"
    src.write_text("".join(json.dumps({"text": f"line {i}"}) + "\n" for i in range(30)) + "not json\n")
    args = [CURATION, "ingest", str(src), "--lake", str(tmp_path / "lake"), "--dataset", "demo",
            "--snapshot", "2026-11-30", "--target-shard-size", "64KiB"]
    out = subprocess.run(args + ["--run-id", "one"], capture_output=True, text=True, check=True)
    summary = json.loads(out.stdout)
    assert summary["rows"] == 30 and summary["accounting"]["quarantined"] == {"invalid_json": 1}
    assert summary["manifest_uri"].endswith("demo/snapshot=2026-11-30/_manifests/one/ingest.json")
    again = subprocess.run(args + ["--run-id", "two"], capture_output=True, text=True, check=True)
    assert "1 units already done" in again.stderr
    assert [u.status for u in Manifest.read(json.loads(again.stdout)["manifest_uri"]).units] == ["skipped"]


def test_cli_help_and_bad_size(tmp_path):
    assert "ingest" in subprocess.run([CURATION, "--help"], capture_output=True, text=True, check=True).stdout
    bad = subprocess.run([CURATION, "ingest", "x", "--lake", "l", "--dataset", "d", "--target-shard-size", "lots"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "not a size" in bad.stderr
