"""A small lake through preprocess, boilerplate and dedup, for the tests that count what each unit reads
(``tests/reliability/test_read_once.py``, ``tests/s3/test_s3_read_once.py``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest
from airflow_curation.stages.attrs import AttrsStage
from airflow_curation.stages.base import Stage, StageRunner
from airflow_curation.stages.boilerplate.stage import BoilerplateCountStage, BoilerplateStage
from airflow_curation.stages.dedup.stage import DedupSignaturesStage, DedupStage
from airflow_curation.stages.ingest.stage import IngestStage
from airflow_curation.stages.preprocess.stage import PreprocessStage

WORDS = (
    "the river carried old boats past the quiet town while children watched from the stone bridge and "
    "their parents talked about the harvest the weather and the price of bread at the market"
).split()
MENU = "Home | About | Contact | Privacy policy"
# The classes whose process_unit reads a shard: every attrs stage's, boilerplate's counts, dedup's signatures.
UNIT_READERS = (AttrsStage, BoilerplateCountStage, DedupSignaturesStage)
# What runs units of those in the stages below (subclasses named as by_unit names them).
UNIT_STAGES = {"PreprocessStage", "BoilerplateCountStage", "BoilerplateStage", "DedupSignaturesStage", "DedupStage"}


def texts(n: int = 24) -> list[str]:
    """Prose documents with a menu line every one repeats (boilerplate) and some exact copies (dedup)."""
    docs = []
    for i in range(n):
        lines = [MENU]
        for j in range(6):
            words = [WORDS[(i * 5 + j * 7 + k * 3) % len(WORDS)] for k in range(14)]
            lines.append(" ".join(words).capitalize() + f" number {i} {j}.")
        docs.append("\n".join(lines))
    return docs + docs[:4]


def ingest(root: Path, lake: Lake) -> tuple[Manifest, str]:
    """Three JSONL files of :func:`texts` ingested into ``lake`` (a shard each): the manifest and its URI."""
    raw = root / "raw"
    raw.mkdir(parents=True)
    docs = texts()
    for k in range(3):
        (raw / f"part{k}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in docs[k::3]))
    stage = IngestStage(lake, {"inputs": [str(raw)], "unit_bytes": 1}, "r1")
    return StageRunner(stage).run(), stage.manifest_uri


def stages(lake: Lake, ingest_uri: str) -> Iterator[Stage]:
    """Preprocess, boilerplate (its counts, then its attrs), dedup (its signatures, then its labels), in order."""
    pre = PreprocessStage(lake, {"input_manifest": ingest_uri, "mapper": "local"}, "r1")
    yield pre
    bp = BoilerplateStage(lake, {"input_manifest": pre.manifest_uri, "min_documents": 3}, "r1")
    yield bp
    yield DedupStage(lake, {"input_manifest": bp.manifest_uri}, "r1")


def checked(manifest: Manifest) -> set[str]:
    """The files ``manifest`` recorded a checksum for: what a downstream unit verifies when it reads them."""
    out = {s.uri for s in manifest.shards if s.checksum}
    return out | {s.attrs[k] for s in manifest.shards for k in s.attrs if s.attrs_checksums.get(k)}
