"""``curation ingest`` as a user runs it: a real console script in a subprocess."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

from airflow_curation.core.manifest import Manifest

CURATION = os.path.join(os.path.dirname(sys.executable), "curation")


def test_cli_ingest_then_rerun_skips(tmp_path):
    src = tmp_path / "corpus.jsonl"
    src.write_text("".join(json.dumps({"text": f"line {i}"}) + "\n" for i in range(30)) + "not json\n")
    args = [
        CURATION,
        "ingest",
        str(src),
        "--lake",
        str(tmp_path / "lake"),
        "--dataset",
        "demo",
        "--snapshot",
        "2026-11-30",
        "--target-shard-size",
        "64KiB",
    ]
    out = subprocess.run(args + ["--run-id", "one"], capture_output=True, text=True, check=True)
    summary = json.loads(out.stdout)
    assert summary["rows"] == 30 and summary["accounting"]["quarantined"] == {"invalid_json": 1}
    assert summary["manifest_uri"].endswith("demo/snapshot=2026-11-30/_manifests/one/ingest.json")
    again = subprocess.run(args + ["--run-id", "two"], capture_output=True, text=True, check=True)
    assert "1 units already done" in again.stderr
    assert [u.status for u in Manifest.read(json.loads(again.stdout)["manifest_uri"]).units] == ["skipped"]


def test_cli_help_and_bad_size(tmp_path):
    assert "ingest" in subprocess.run([CURATION, "--help"], capture_output=True, text=True, check=True).stdout
    version = subprocess.run([CURATION, "--version"], capture_output=True, text=True, check=True).stdout
    assert version.startswith("curation ") and version.split()[1][0].isdigit(), version  # the installed release
    bad = subprocess.run(
        [CURATION, "ingest", "x", "--lake", "l", "--dataset", "d", "--target-shard-size", "lots"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "not a size" in bad.stderr


def test_cli_stages_chain_on_a_lake_without_naming_manifests(tmp_path):
    """Each lake-mode subcommand reads the newest complete manifest of the stage before it."""
    src = tmp_path / "corpus.jsonl"
    rng = random.Random(7)  # varied prose that passes the gopher preset: stop words, no repetition
    vocab = (
        "the of and to that with have be river mountain village winter morning letter garden window "
        "station market teacher doctor kitchen bridge harbour evening summer painting history music "
        "walked carried opened noticed remembered quietly slowly across under between after"
    ).split()
    docs = [" ".join(rng.choice(vocab) for _ in range(150)) + "." for _ in range(20)]
    docs.append(docs[0])  # one exact duplicate
    src.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    lake = ["--lake", str(tmp_path / "lake"), "--dataset", "demo"]

    def run(*args):
        out = subprocess.run([CURATION, *args, *lake], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout)

    ingested = run("ingest", str(src))
    pre = run("preprocess", "--mapper", "local")
    assert Manifest.read(pre["manifest_uri"]).config["input_manifest"] == ingested["manifest_uri"]
    dedup = run("dedup")
    assert Manifest.read(dedup["manifest_uri"]).config["input_manifest"] == pre["manifest_uri"]
    assert dedup["accounting"]["dropped"].get("exact_duplicate") == 1
    report = run("validate")
    assert report["status"] == "passed"
    assert Manifest.read(report["manifest_uri"]).config["input_manifest"] == dedup["manifest_uri"]
    missing = subprocess.run(
        [CURATION, "dedup", "--lake", str(tmp_path / "empty"), "--dataset", "x"], capture_output=True, text=True
    )
    assert missing.returncode != 0 and "run that stage first" in missing.stderr
