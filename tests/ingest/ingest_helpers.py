"""What the ingest tests share: a run on given inputs, and what it kept, quarantined and counted."""

from __future__ import annotations

import json
import os

import pyarrow.parquet as pq

from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest
from airflow_curation.core.quarantine import read_quarantine
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.ingest.stage import IngestStage


def ingest(tmp_path, inputs, **config) -> tuple[Lake, Manifest]:
    lake = Lake(str(tmp_path / "lake"), "web")
    return lake, StageRunner(IngestStage(lake, {"inputs": [str(i) for i in inputs], **config}, "r1")).run()


def shard_texts(m: Manifest) -> list[str]:
    return [t for s in m.shards for t in pq.read_table(s.uri, columns=["text"]).column("text").to_pylist()]


def quarantined(lake: Lake) -> list[dict]:
    folder = lake.path("_quarantine", "ingest")
    names = sorted(f for f in os.listdir(folder) if not f.startswith(".")) if os.path.isdir(folder) else []
    return [r for f in names for r in read_quarantine(os.path.join(folder, f)).to_pylist()]


def books_close(acc: dict) -> bool:
    return acc["read"] == acc["kept"] + sum(acc["dropped"].values()) + sum(acc["quarantined"].values())


def records(n: int, tag: str = "r") -> list[bytes]:
    return [json.dumps({"text": f"{tag} {i} " + "words " * 8}).encode() + b"\n" for i in range(n)]
