"""A small synthetic lake run (ingest -> preprocess -> dedup manifests, attrs and checkpoints) written
with the core library only, so that validate is tested on the same layout the real stages produce."""

from __future__ import annotations

import random
import time

import pyarrow as pa

from airflow_curation.core import storage
from airflow_curation.core.accounting import RowAccounting
from airflow_curation.core.checkpoint import CheckpointRecord, CheckpointStore
from airflow_curation.core.fingerprint import checksum_url
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest, ShardEntry, UnitEntry
from airflow_curation.core.schema import SHARD_SCHEMA
from airflow_curation.core.shards import write_parquet

WORDS = "the data curation pipeline keeps good documents and drops noisy ones quickly".split()


def _entry(uri: str, shard_id: str, rows: int, nbytes: int, checksum: str, attrs=None) -> ShardEntry:
    return ShardEntry(
        shard_id=shard_id,
        uri=uri,
        rows=rows,
        bytes=nbytes,
        checksum=checksum,
        unit_id=shard_id,
        attrs=dict(attrs or {}),
    )


def _finish(
    lake: Lake, stage: str, run_id: str, shards: list[ShardEntry], accs: list[RowAccounting], fp: str = "fp0001"
) -> str:
    store = CheckpointStore(lake.checkpoint_dir(stage, fp))
    total = RowAccounting()
    units = []
    for s, acc in zip(shards, accs):
        now = time.time()
        store.commit(
            CheckpointRecord(
                unit_id=s.shard_id,
                stage=stage,
                fingerprint=fp,
                input_checksum=s.checksum,
                outputs=[s.__dict__],
                accounting=acc.to_dict(),
                started_at=now - 0.25,
                finished_at=now,
            )
        )
        units.append(UnitEntry(unit_id=s.shard_id, inputs=[s.uri], input_checksum=s.checksum, status="done"))
        total.merge(acc)
    m = Manifest(
        dataset=lake.dataset,
        stage=stage,
        run_id=run_id,
        fingerprint=fp,
        lake=lake.to_dict(),
        units=units,
        shards=shards,
        status="complete",
        accounting=total.to_dict(),
    )
    uri = lake.manifest_uri(run_id, stage)
    m.write(uri)
    return uri


def build_run(
    root: str,
    dataset: str = "demo",
    snapshot: str | None = None,
    run_id: str = "run1",
    shards: int = 3,
    rows: int = 120,
    stages: tuple[str, ...] = ("preprocess", "dedup"),
    seed: int = 0,
    null_text_rows: int = 0,
) -> dict[str, str]:
    """Returns ``{stage: manifest_uri}`` for each stage written (``ingest`` always)."""
    rng = random.Random(seed)
    lake = Lake(root, dataset, snapshot)
    out: dict[str, str] = {}
    ingest, ingest_accs, ids_by_shard = [], [], []
    for k in range(shards):
        sid = f"part-{k:05d}"
        ids = [f"{sid}-{i}" for i in range(rows)]
        texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 60))) for _ in range(rows)]
        for i in range(null_text_rows):
            texts[i] = None
        schema = SHARD_SCHEMA if not null_text_rows else pa.schema([f.with_nullable(True) for f in SHARD_SCHEMA])
        table = pa.table(
            {"id": ids, "text": texts, "source": ["in.jsonl"] * rows, "meta": ["{}"] * rows}, schema=schema
        )
        uri = lake.shard_uri(sid)
        nbytes, checksum = write_parquet(uri, table, row_group_rows=64)
        ingest.append(_entry(uri, sid, rows, nbytes, checksum))
        acc = RowAccounting()
        acc.keep(rows)
        acc.drop("invalid_utf8", 1)
        ingest_accs.append(acc)
        ids_by_shard.append((ids, texts))
    out["ingest"] = _finish(lake, "ingest", run_id, ingest, ingest_accs)
    upstream = ingest
    for stage in stages:
        entries, accs = [], []
        seen: set[str] = set()  # dedup is global: the first member of a cluster, in shard order, is kept
        for s, (ids, texts) in zip(upstream, ids_by_shard):
            acc = RowAccounting()
            if stage == "preprocess":
                wc = [len(t.split()) if t else 0 for t in texts]
                keep = [w >= 8 for w in wc]
                table = pa.table(
                    {
                        "id": ids,
                        "word_count": pa.array(wc, pa.int64()),
                        "alpha_ratio": [rng.uniform(0.6, 0.95) for _ in ids],
                        "keep": keep,
                        "drop_reason": [None if k else "too_short" for k in keep],
                    }
                )
                for k in keep:
                    acc.keep() if k else acc.drop("too_short")
            elif stage == "dedup":
                cluster = [f"c{rng.randint(0, len(ids) // 2)}" for _ in ids]
                dup = []
                for c in cluster:
                    dup.append(c in seen)
                    seen.add(c)
                table = pa.table({"id": ids, "cluster_id": cluster, "is_duplicate": dup})
                for d in dup:
                    acc.drop("duplicate") if d else acc.keep()
            else:
                table = pa.table({"id": ids, "label": ["en"] * len(ids), "score": [rng.random() for _ in ids]})
                acc.keep(len(ids))
            auri = lake.attrs_uri(stage, s.shard_id)
            _, achecksum = write_parquet(auri, table, row_group_rows=64)
            entries.append(s.with_attrs(stage, auri, achecksum))
            accs.append(acc)
        out[stage] = _finish(lake, stage, run_id, entries, accs)
        upstream = entries
    return out


def record_checksums(uris: dict[str, str]) -> None:
    """Record in every manifest of ``uris`` the checksums its files have now: what a stage that had written
    the files as a test edited them would have recorded (validate re-hashes what it reads)."""
    for uri in uris.values():
        m = Manifest.read(uri)
        for s in m.shards:
            s.bytes, s.checksum = storage.size(s.uri), checksum_url(s.uri)
            s.attrs_checksums = {k: checksum_url(a) for k, a in s.attrs.items()}
        m.write(uri)
