"""The lake as a whole (issue 21): a second ingest of a snapshot cannot silently destroy a complete run, and a
copied or moved lake is validated from its own files.

Every run here is the real CLI (``curation <stage>``) in a subprocess, on the sample corpus through ingest,
preprocess and dedup; the lake built once per module is copied (``shutil.copytree``) into each test, which a
lake could not survive while its manifests held absolute URIs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from process_helpers import sample_corpus

from airflow_curation.core import storage
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import FORMAT_VERSION, Manifest, latest_manifest

DATASET = "web"


def curation(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "import sys; from airflow_curation.cli import main; sys.exit(main())", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )


def run_ok(*args: str) -> dict:
    proc = curation(*args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def lake_args(root: Path, run_id: str) -> list[str]:
    return ["--lake", str(root), "--dataset", DATASET, "--run-id", run_id]


def pipeline(root: Path, raw: str, run_id: str, *ingest_flags: str) -> dict[str, str]:
    """ingest -> preprocess -> dedup of ``raw`` into the lake at ``root``: each stage's manifest URI."""
    uris = {"ingest": run_ok("ingest", raw, *lake_args(root, run_id), "--unit-bytes", "60000", *ingest_flags)}
    uris["preprocess"] = run_ok(
        "preprocess", *lake_args(root, run_id), "--input-manifest", uris["ingest"]["manifest_uri"]
    )
    uris["dedup"] = run_ok("dedup", *lake_args(root, run_id), "--input-manifest", uris["preprocess"]["manifest_uri"])
    return {stage: summary["manifest_uri"] for stage, summary in uris.items()}


def validate(root: Path, manifest_uri: str, run_id: str) -> subprocess.CompletedProcess:
    return curation("validate", *lake_args(root, run_id), "--input-manifest", manifest_uri, "--threads", "1")


def digests(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A lake after ingest, preprocess and dedup of the sample corpus (run ``r1``), and the corpus."""
    base = tmp_path_factory.mktemp("built")
    sample_corpus(base / "raw", 16)
    pipeline(base / "lake", str(base / "raw" / "data"), "r1")
    return base


@pytest.fixture
def lake(built, tmp_path):
    """This test's own copy of the built lake (and of the corpus: an input's mtime is part of its unit)."""
    shutil.copytree(built / "lake", tmp_path / "lake", symlinks=True)
    shutil.copytree(built / "raw", tmp_path / "raw", symlinks=True)
    return tmp_path / "lake", str(tmp_path / "raw" / "data")


def uri(root: Path, run_id: str, stage: str) -> str:
    return Lake(str(root), DATASET).manifest_uri(run_id, stage)


# --- a copied lake reads its own files -----------------------------------------------------------------


def names_original(document: str, original: str) -> bool:
    """Whether a JSON document of the lake names ``original``, besides the root a manifest records (which
    only a manifest read outside the layout falls back on)."""
    doc = json.loads(document)
    if isinstance(doc, dict) and isinstance(doc.get("lake"), dict):
        doc["lake"].pop("root", None)
    return original in json.dumps(doc)


def test_a_copied_lake_validates_from_its_own_files_with_the_original_gone(lake, tmp_path):
    _, raw = lake
    original = tmp_path / "lake-a"  # built here, so that nothing of it lives on elsewhere
    pipeline(original, raw, "r1")
    copy = tmp_path / "moved" / "lake2"
    shutil.copytree(original, copy, symlinks=True)
    shutil.rmtree(original)  # every read of the original now fails

    m = Manifest.read(uri(copy, "r1", "dedup"))
    assert m.lake["root"] == str(copy) and m.shards[0].uri.startswith(str(copy) + "/")
    proc = validate(copy, uri(copy, "r1", "dedup"), "v1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(Path(copy, DATASET, "_manifests", "v1", "report.json").read_text())
    assert report["status"] == "passed", report["summary"]
    assert report["metrics"]["rows"] == m.rows
    # The whole chain was read from the copy: the funnel has every stage, and no document names the original.
    assert [f["label"] for f in report["metrics"]["funnel"]][:1] == ["ingested"]
    assert len(report["metrics"]["funnel"]) == 3
    for p in copy.rglob("*.json"):
        assert not names_original(p.read_text(), str(original)), p
    for p in copy.rglob("*.pages"):  # a manifest's lists: JSON lines
        assert not names_original("[" + ",".join(p.read_text().splitlines()) + "]", str(original)), p
    # What is stored is relative to the lake root; in memory it is absolute, under the lake it was read from.
    head_uri = Path(uri(copy, "r1", "dedup"))
    stored = json.loads(head_uri.read_text())
    pages = head_uri.parent / stored["index"]["shards"]["file"]  # the shard list: one entry a line
    first = json.loads(pages.read_text().splitlines()[0])
    assert first["uri"].startswith(f"{DATASET}/shards/part-")
    assert first["attrs"]["preprocess"].startswith(f"{DATASET}/attrs/preprocess/")
    assert stored["config"]["input_manifest"] == f"{DATASET}/_manifests/r1/preprocess.json"


def test_a_copied_lake_reruns_from_its_own_checkpoints(lake, tmp_path):
    """A rerun in the copy skips every unit on the strength of the copy's own files, not the original's."""
    original, raw = lake
    copy = tmp_path / "lake2"
    shutil.copytree(original, copy, symlinks=True)
    shutil.rmtree(original)
    again = pipeline(copy, raw, "r2")
    for stage, m_uri in again.items():
        m = Manifest.read(m_uri)
        assert m.status == "complete" and {u.status for u in m.units} == {"skipped"}, stage
        assert all(s.uri.startswith(str(copy) + "/") for s in m.shards)


def test_manifests_with_absolute_uris_still_read(lake):
    """Manifests written before URIs were stored relative hold absolute ones: they read as they are."""
    root, _ = lake
    for stage in ("ingest", "preprocess", "dedup"):
        m_uri = uri(root, "r1", stage)
        m = Manifest.read(m_uri)
        # The old form: format 1 (both lists inline), every URI absolute, as in memory.
        storage.write_json(m_uri, {**m.to_dict(), "format_version": 1})
        assert json.loads(Path(m_uri).read_text())["shards"][0]["uri"].startswith(str(root) + "/")
        assert {**Manifest.read(m_uri).to_dict(), "format_version": FORMAT_VERSION} == m.to_dict()
    proc = validate(root, uri(root, "r1", "dedup"), "v1")
    assert proc.returncode == 0, proc.stderr[-3000:]


# --- a second ingest of a snapshot ----------------------------------------------------------------------


def test_a_second_ingest_with_other_inputs_is_refused_and_the_first_run_stays_valid(lake, tmp_path):
    root, raw = lake
    before = digests(root / DATASET / "shards")
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps({"text": f"another corpus, document {i}"}) + "\n" for i in range(50)))

    proc = curation("ingest", str(other), *lake_args(root, "r2"), "--unit-bytes", "60000")
    assert proc.returncode != 0
    assert "complete run r1" in proc.stderr and uri(root, "r1", "ingest") in proc.stderr
    assert "--replace" in proc.stderr
    # Nothing was written: no shard touched, no manifest of the refused run.
    assert digests(root / DATASET / "shards") == before
    assert not os.path.exists(os.path.dirname(uri(root, "r2", "ingest")))
    assert Manifest.read(uri(root, "r1", "ingest")).status == "complete"
    proc = validate(root, uri(root, "r1", "dedup"), "v1")
    assert proc.returncode == 0, proc.stderr[-3000:]

    # The same inputs and settings rewrite nothing: that rerun goes ahead (every unit skipped).
    same = Manifest.read(run_ok("ingest", raw, *lake_args(root, "r3"), "--unit-bytes", "60000")["manifest_uri"])
    assert {u.status for u in same.units} == {"skipped"} and digests(root / DATASET / "shards") == before


def test_replace_supersedes_the_first_run_and_everything_that_read_it(lake, tmp_path):
    root, raw = lake
    old = {stage: uri(root, "r1", stage) for stage in ("ingest", "preprocess", "dedup")}
    other = tmp_path / "other"  # other inputs: two of the corpus's files
    other.mkdir()
    for name in ("stdlib-000.jsonl", "stdlib-001.jsonl"):
        shutil.copy(os.path.join(raw, name), other / name)

    new = pipeline(root, str(other), "r2", "--replace")
    m = Manifest.read(new["ingest"])
    assert m.status == "complete" and m.supersedes == [old["ingest"]] and m.rows > 0
    for stage, m_uri in old.items():
        gone = Manifest.read(m_uri)
        assert (gone.status, gone.superseded_by) == ("superseded", "r2"), stage
    assert latest_manifest(Lake(str(root), DATASET), ["dedup"]) == new["dedup"]
    # Only the new run's shards are left.
    assert sorted(p.name for p in (root / DATASET / "shards").iterdir()) == sorted(
        s.uri.rsplit("/", 1)[-1] for s in m.shards
    )
    proc = validate(root, new["dedup"], "v2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    # What was pinned to the old run says why it cannot be read, instead of failing on a checksum.
    proc = validate(root, old["dedup"], "v1")
    assert proc.returncode != 0 and "superseded by run r2" in proc.stderr and "IntegrityError" not in proc.stderr
    proc = curation("preprocess", *lake_args(root, "r3"), "--input-manifest", old["ingest"])
    assert proc.returncode != 0 and "superseded by run r2" in proc.stderr
