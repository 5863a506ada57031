"""Enrich streams on dedup's per-shard output: dedup (a job) holds after its first shard's attrs
(``CURATION_HOLD``) until enrich, running alongside, has embedded that shard; the checkpoint records then
show enrich's first unit starting before dedup's last unit ended. No timing assumption: the hold orders it."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import threading
import time

import pyarrow as pa

from airflow_curation.core.checkpoint import CheckpointStore
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest, ShardEntry
from airflow_curation.core.shards import write_parquet
from airflow_curation.jobs.spec import JobSpec
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.enrich.stage import EnrichStage


def _lake(root) -> tuple[Lake, str]:
    lake = Lake(str(root), "d")
    entries = []
    for k in range(2):
        ids = [f"s{k}-{i}" for i in range(12)]
        texts = [f"shard {k} document {i} says something of its own about topic {i * 7 + k}" for i in range(12)]
        texts[5] = texts[4]  # an exact duplicate, so dedup has work and enrich skips a row
        t = pa.table({"id": ids, "text": texts, "source": ["x"] * 12, "meta": [None] * 12})
        sid = f"part-{k:05d}"
        n, ck = write_parquet(lake.shard_uri(sid), t)
        entries.append(ShardEntry(shard_id=sid, uri=lake.shard_uri(sid), rows=12, bytes=n, checksum=ck))
    uri = lake.manifest_uri("r", "ingest")
    Manifest(
        dataset="d", stage="ingest", run_id="r", fingerprint="f", lake=lake.to_dict(), shards=entries, status="complete"
    ).write(uri)
    return lake, uri


def test_enrich_starts_on_dedup_shards_before_dedup_ends(tmp_path, minilm):
    lake, ingest_uri = _lake(tmp_path / "lake")
    release = tmp_path / "release-dedup"
    spec = tmp_path / "dedup.json"
    spec.write_text(JobSpec("dedup", lake.to_dict(), "r", {"input_manifest": ingest_uri}).to_json())
    env = {**os.environ, "CURATION_HOLD": f"dedup.before_attrs@2={release}"}
    env.pop("CURATION_FAULT", None)
    log_path = tmp_path / "dedup.log"  # a file, not a pipe: the held job is not read while it waits
    with open(log_path, "w") as log:
        dedup = subprocess.Popen(
            [sys.executable, "-m", "airflow_curation.jobs", "run", str(spec)], env=env, stdout=log, stderr=log
        )
    dedup_uri = lake.manifest_uri("r", "dedup")
    try:
        deadline = time.monotonic() + 300  # only against a hang
        while not os.path.exists(dedup_uri):  # dedup plans its units after its global phase
            assert dedup.poll() is None and time.monotonic() < deadline, "dedup never planned"
            time.sleep(0.05)
        records = os.path.join(lake.base, "_checkpoints", "enrich", "*", "*.json")

        def release_once_enrich_has_a_shard() -> None:
            end = time.monotonic() + 300
            while time.monotonic() < end and not [p for p in glob.glob(records) if ".failed" not in p]:
                time.sleep(0.05)
            release.touch()

        watcher = threading.Thread(target=release_once_enrich_has_a_shard, daemon=True)
        watcher.start()
        config = {
            "input_manifest": dedup_uri,
            "task": "embed",
            "model": minilm,
            "model_runtime": "transformers",
            "mapper": "local",
            "max_input_tokens": 32,
            "batch_size": 8,
            "stream_poll_s": 0.05,
            "upstream_wait_s": 300,
        }
        enrich = EnrichStage(lake, config, "r")
        manifest = StageRunner(enrich).run()
        watcher.join()
        dedup.wait(timeout=300)
        out = log_path.read_text()
        assert dedup.returncode == 0, out[-3000:]
    finally:
        release.touch()
        if dedup.poll() is None:
            dedup.kill()
    dedup_manifest = Manifest.read(dedup_uri)
    assert manifest.status == "complete" and dedup_manifest.status == "complete"
    assert [s.shard_id for s in manifest.shards] == ["part-00000", "part-00001"]
    assert manifest.accounting["read"] == 24
    dedup_recs = CheckpointStore(lake.checkpoint_dir("dedup", dedup_manifest.fingerprint))
    enrich_recs = CheckpointStore(lake.checkpoint_dir("enrich", manifest.fingerprint))
    d = {s: dedup_recs.load(s) for s in ("part-00000", "part-00001")}
    e = {s: enrich_recs.load(s) for s in ("part-00000", "part-00001")}
    # enrich embedded dedup's first shard while dedup had not written its second one
    assert e["part-00000"].started_at >= d["part-00000"].finished_at
    assert e["part-00000"].finished_at <= d["part-00001"].finished_at
    assert min(r.started_at for r in e.values()) < max(r.finished_at for r in d.values())
    status = {u.unit_id: u.status for u in manifest.units}
    assert status["part-00000"] == "skipped"  # done while streaming, found done by the final plan
    # the second shard: streamed too if its checkpoint landed before dedup's manifest did, else planned at the end
    assert status["part-00001"] in ("skipped", "done")
