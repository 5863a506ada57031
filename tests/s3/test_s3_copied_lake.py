"""A lake on S3 copied to another prefix validates from the copy's objects (moto server on loopback): manifests
and checkpoint records store URIs relative to the lake root, resolved against the prefix they are read from."""

from __future__ import annotations

import json
import random

import pytest

from airflow_curation.core import storage
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.dedup.stage import DedupStage
from airflow_curation.stages.ingest.stage import IngestStage
from airflow_curation.stages.preprocess.stage import PreprocessStage
from airflow_curation.stages.validate.stage import ValidateStage

pytestmark = pytest.mark.s3


def _corpus(folder) -> str:
    rng = random.Random(3)  # varied prose that passes the default preset, and one exact duplicate
    vocab = (
        "the of and to that with have be river mountain village winter morning letter garden window "
        "station market teacher doctor kitchen bridge harbour evening summer painting history music "
        "walked carried opened noticed remembered quietly slowly across under between after"
    ).split()
    docs = [" ".join(rng.choice(vocab) for _ in range(150)) + "." for _ in range(30)]
    docs.append(docs[0])
    for i in range(3):
        (folder / f"part-{i}.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs[i::3]))
    return str(folder)


def test_a_copied_s3_prefix_validates_from_its_own_objects(s3_bucket, tmp_path):
    original = Lake(f"s3://{s3_bucket}/lake-a", "web", snapshot="2026-11-30")
    raw = tmp_path / "raw"
    raw.mkdir()
    ingest = IngestStage(original, {"inputs": [_corpus(raw)], "unit_bytes": 1}, "r1")
    StageRunner(ingest).run()
    pre = PreprocessStage(original, {"input_manifest": ingest.manifest_uri, "mapper": "local"}, "r1")
    StageRunner(pre).run()
    dedup = DedupStage(original, {"input_manifest": pre.manifest_uri, "mapper": "local"}, "r1")
    rows = StageRunner(dedup).run().rows

    fs, _ = storage.filesystem(original.root)
    objects = fs.find(f"{s3_bucket}/lake-a")
    assert len(objects) > 20
    for key in objects:  # copy the prefix, then delete the original: every read of it now fails
        fs.copy(key, key.replace(f"{s3_bucket}/lake-a/", f"{s3_bucket}/copy-b/", 1))
    fs.rm(f"{s3_bucket}/lake-a", recursive=True)
    assert not fs.find(f"{s3_bucket}/lake-a")

    copy = Lake(f"s3://{s3_bucket}/copy-b", "web", snapshot="2026-11-30")
    m = Manifest.read(copy.manifest_uri("r1", "dedup"))
    assert m.lake["root"] == copy.root and all(s.uri.startswith(copy.base + "/") for s in m.shards)
    validate = ValidateStage(copy, {"input_manifest": copy.manifest_uri("r1", "dedup"), "threads": 1}, "v1")
    StageRunner(validate).run()
    report = json.loads(storage.read_bytes(copy.path("_manifests", "v1", "report.json")))
    assert report["status"] == "passed", report["summary"]
    assert report["metrics"]["rows"] == rows > 0
    assert [f["label"] for f in report["metrics"]["funnel"]][0] == "ingested"
    for key in fs.find(f"{s3_bucket}/copy-b"):  # no document of the copy names the original
        if key.endswith(".json"):
            doc = json.loads(fs.cat_file(key))
            if isinstance(doc.get("lake"), dict):  # a manifest's recorded root: only a fallback
                doc["lake"].pop("root")
            assert "lake-a" not in json.dumps(doc), key
