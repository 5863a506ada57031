"""Shared fixtures of the enrich tests: tiny offline models (built once per session) and small lakes.

vLLM engines load in ~25 s on CPU, so each model's engine is loaded once per session (the engine cache
in ``engines.py``) and released when the test module that uses it ends (``release_model`` fixtures),
so that no more than one or two engines hold memory at any time.
"""

from __future__ import annotations

import os
import sys

import pyarrow as pa
import pytest

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, os.path.dirname(__file__))

from models import build_llama, minilm_path  # noqa: E402

from airflow_curation.core.layout import Lake  # noqa: E402
from airflow_curation.core.manifest import Manifest, ShardEntry  # noqa: E402
from airflow_curation.core.schema import SHARD_SCHEMA  # noqa: E402
from airflow_curation.core.shards import write_parquet  # noqa: E402


@pytest.fixture(scope="session")
def model_root(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def llama_causal(model_root):
    return build_llama(str(model_root / "llama-causal"), "causal")


@pytest.fixture(scope="session")
def llama_classify(model_root):
    return build_llama(str(model_root / "llama-classify"), "classify")


@pytest.fixture(scope="session")
def llama_score(model_root):
    return build_llama(str(model_root / "llama-score"), "score")


@pytest.fixture(scope="session")
def minilm():
    return minilm_path()


@pytest.fixture(scope="module")
def release_engines_after():
    """Close every cached engine when the module ends (one model's engine alive at a time)."""
    yield
    from airflow_curation.stages.enrich.engines import release_engines

    release_engines()


def make_docs(n: int, prefix: str = "d") -> list[dict]:
    words = ["data", "curation", "model", "token", "filter", "shard", "quality", "python", "lake", "vector"]
    docs = []
    for i in range(n):
        text = " ".join(words[(i * 7 + k) % len(words)] for k in range(3 + i % 9)) + f" number {i}."
        docs.append({"id": f"{prefix}{i:05d}", "text": text})
    return docs


def write_lake(root: str, shards: dict[str, list[dict]], keep: dict[str, set[str]] | None = None,
               duplicates: dict[str, set[str]] | None = None, run_id: str = "r1") -> tuple[Lake, str]:
    """Shards plus an upstream ``dedup`` manifest whose entries carry preprocess/dedup attrs.

    :param keep: shard -> ids that preprocess drops (``keep = false``).
    :param duplicates: shard -> ids that dedup marks ``is_duplicate``.
    """
    lake = Lake(root=root, dataset="ds")
    entries = []
    for shard_id, docs in shards.items():
        table = pa.table({"id": [d["id"] for d in docs], "text": [d["text"] for d in docs],
                          "source": ["test.jsonl"] * len(docs), "meta": [None] * len(docs)}, schema=SHARD_SCHEMA)
        uri = lake.shard_uri(shard_id)
        nbytes, checksum = write_parquet(uri, table, row_group_rows=64)
        attrs = {}
        if keep is not None:
            dropped = keep.get(shard_id, set())
            attrs["preprocess"] = lake.attrs_uri("preprocess", shard_id)
            write_parquet(attrs["preprocess"], pa.table({"id": table.column("id"),
                                                         "keep": [d["id"] not in dropped for d in docs]}))
        if duplicates is not None:
            dup = duplicates.get(shard_id, set())
            attrs["dedup"] = lake.attrs_uri("dedup", shard_id)
            write_parquet(attrs["dedup"], pa.table({"id": table.column("id"),
                                                    "is_duplicate": [d["id"] in dup for d in docs]}))
        entries.append(ShardEntry(shard_id=shard_id, uri=uri, rows=len(docs), bytes=nbytes, checksum=checksum,
                                  unit_id=shard_id, attrs=attrs))
    manifest = Manifest(dataset="ds", stage="dedup", run_id=run_id, fingerprint="f" * 16, lake=lake.to_dict(),
                        shards=entries, status="complete")
    uri = lake.manifest_uri(run_id, "dedup")
    manifest.write(uri)
    return lake, uri
