"""Small lakes and enrich runs for the enrich tests (a unique module name: tests/enrich is not a package)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_curation.core.checkpoint import CheckpointStore
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest, ShardEntry
from airflow_curation.core.schema import SHARD_SCHEMA
from airflow_curation.core.shards import write_parquet
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.enrich.stage import EnrichStage


def run_enrich(lake, manifest_uri: str, run_id: str = "e1", **config):
    stage = EnrichStage(lake, {"input_manifest": manifest_uri, "mapper": "local", **config}, run_id)
    manifest = StageRunner(stage).run()
    return stage, manifest


def read_attrs(uri: str):
    return pq.read_table(uri)


def record(stage: EnrichStage, unit_id: str):
    return CheckpointStore(stage.lake.checkpoint_dir(stage.name, stage.fingerprint)).load(unit_id)


def make_docs(n: int, prefix: str = "d") -> list[dict]:
    words = ["data", "curation", "model", "token", "filter", "shard", "quality", "python", "lake", "vector"]
    docs = []
    for i in range(n):
        text = " ".join(words[(i * 7 + k) % len(words)] for k in range(3 + i % 9)) + f" number {i}."
        docs.append({"id": f"{prefix}{i:05d}", "text": text})
    return docs


def write_lake(
    root: str,
    shards: dict[str, list[dict]],
    keep: dict[str, set[str]] | None = None,
    duplicates: dict[str, set[str]] | None = None,
    run_id: str = "r1",
    recorded: bool = False,
) -> tuple[Lake, str]:
    """Shards plus an upstream ``dedup`` manifest whose entries carry preprocess/dedup attrs.

    :param keep: shard -> ids that preprocess drops (``keep = false``).
    :param duplicates: shard -> ids that dedup marks ``is_duplicate``.
    :param recorded: the entries record their attrs files' checksums and columns (``attrs_columns``), as the
        stages write them now; without, as a manifest from before: a plan hashes the files and reads their footers.
    """
    lake = Lake(root=root, dataset="ds")
    entries = []
    for shard_id, docs in shards.items():
        table = pa.table(
            {
                "id": [d["id"] for d in docs],
                "text": [d["text"] for d in docs],
                "source": ["test.jsonl"] * len(docs),
                "meta": [None] * len(docs),
            },
            schema=SHARD_SCHEMA,
        )
        uri = lake.shard_uri(shard_id)
        nbytes, checksum = write_parquet(uri, table, row_group_rows=64)
        attrs, columns, checksums = {}, {}, {}
        if keep is not None:
            dropped = keep.get(shard_id, set())
            attrs["preprocess"] = lake.attrs_uri("preprocess", shard_id)
            _, checksums["preprocess"] = write_parquet(
                attrs["preprocess"],
                pa.table({"id": table.column("id"), "keep": [d["id"] not in dropped for d in docs]}),
            )
            columns["preprocess"] = ["id", "keep"]
        if duplicates is not None:
            dup = duplicates.get(shard_id, set())
            attrs["dedup"] = lake.attrs_uri("dedup", shard_id)
            _, checksums["dedup"] = write_parquet(
                attrs["dedup"], pa.table({"id": table.column("id"), "is_duplicate": [d["id"] in dup for d in docs]})
            )
            columns["dedup"] = ["id", "is_duplicate"]
        entries.append(
            ShardEntry(
                shard_id=shard_id,
                uri=uri,
                rows=len(docs),
                bytes=nbytes,
                checksum=checksum,
                unit_id=shard_id,
                attrs=attrs,
                attrs_checksums=checksums if recorded else {},
                attrs_columns=columns if recorded else {},
            )
        )
    manifest = Manifest(
        dataset="ds",
        stage="dedup",
        run_id=run_id,
        fingerprint="f" * 16,
        lake=lake.to_dict(),
        shards=entries,
        status="complete",
    )
    uri = lake.manifest_uri(run_id, "dedup")
    manifest.write(uri)
    return lake, uri
