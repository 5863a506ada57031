"""Dedup as an array on an S3 lake (moto server on loopback): two ``jobs run --group i/2`` processes side
by side, as two Slurm array tasks or two Indexed Job pods run them, then ``jobs collect``. Each task signs
its own shards; the global phase runs once, under a lease the other task waits on; the labels are those of
a whole run on a local lake."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from process_helpers import start_job, wait_job

from airflow_curation.core import storage
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest
from airflow_curation.jobs.spec import JobSpec
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.dedup.stage import DedupStage
from airflow_curation.stages.ingest.stage import IngestStage

pytestmark = pytest.mark.s3

WORDS = "lake shard curator bucket signature band cluster keeper token window corpus record".split()
INGEST = {"target_shard_bytes": 1_500, "row_group_rows": 16, "unit_bytes": 1}


def _inputs(root: Path) -> Path:
    """Four files: distinct documents, exact copies and near copies (one word changed) across files."""
    root.mkdir()
    base = [" ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] + str((i * j) % 11) for j in range(40)) for i in range(48)]
    for f in range(4):
        docs = base[f * 12 : (f + 1) * 12]
        docs += [base[(f * 5 + 1) % 48], base[(f * 5 + 2) % 48].replace(WORDS[0], "changed", 1)]
        (root / f"part-{f}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
    return root


def _labels(manifest: Manifest) -> dict[str, tuple]:
    out = {}
    for s in manifest.shards:
        with storage.open_read(s.attrs["dedup"]) as f:
            t = pq.read_table(f)
        for row in t.select(["id", "cluster_id", "is_duplicate"]).to_pylist():
            out[row["id"]] = (row["cluster_id"], row["is_duplicate"])
    return out


def _whole_local_run(inputs: Path, tmp_path: Path) -> tuple[Manifest, dict[str, tuple]]:
    """The baseline: ingest and the whole dedup stage in one process on a local lake (its ingest manifest and
    its labels)."""
    local = Lake(str(tmp_path / "local"), "web")
    up = StageRunner(IngestStage(local, {"inputs": [str(inputs)], **INGEST}, "r1")).run()
    return up, _labels(
        StageRunner(DedupStage(local, {"input_manifest": local.manifest_uri("r1", "ingest")}, "r1")).run()
    )


def _job(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    return start_job(args, log, env)


def test_two_array_tasks_of_dedup_side_by_side_on_s3(s3_bucket, tmp_path):
    inputs = _inputs(tmp_path / "in")
    up, want = _whole_local_run(inputs, tmp_path)
    assert len(up.shards) >= 4 and any(dup for _, dup in want.values())

    lake = Lake(f"s3://{s3_bucket}/lake", "web")
    ingest = StageRunner(IngestStage(lake, {"inputs": [str(inputs)], **INGEST}, "r1")).run()
    assert [s.rows for s in ingest.shards] == [s.rows for s in up.shards]
    spec = JobSpec("dedup", lake.to_dict(), "d1", {"input_manifest": lake.manifest_uri("r1", "ingest")})
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(spec.to_json())
    env = {**os.environ}  # the S3 options: CURATION_STORAGE_OPTIONS_S3 (the s3_bucket fixture)
    go = tmp_path / "go"
    # Task 0 stops at its first signature, in its own share of phase 1: task 1 must not need it to stop.
    # (Before, each task ran the whole signature step under one lease, and task 1 failed with LeaseBusy.)
    held = _job(
        ["run", str(spec_path), "--group", "0/2"],
        {**env, "CURATION_HOLD": f"dedup_signatures.before_unit={go}"},
        tmp_path / "group0.log",
    )
    try:
        other = _job(["run", str(spec_path), "--group", "1/2"], env, tmp_path / "group1.log")
        wait_job(other, tmp_path / "group1.log")
        assert held.poll() is None  # task 0 is still held: task 1 signed its shards and ran the global phase
    finally:
        go.touch()
    wait_job(held, tmp_path / "group0.log")
    text0 = (tmp_path / "group0.log").read_text()
    assert "dedup: global phase already done" in text0  # task 0 read task 1's global phase

    collect = _job(["collect", str(spec_path)], env, tmp_path / "collect.log")
    wait_job(collect, tmp_path / "collect.log")
    m = Manifest.read(lake.manifest_uri("d1", "dedup"))
    assert m.status == "complete" and {u.status for u in m.units} == {"skipped"}
    assert _labels(m) == want


def test_a_task_waits_on_the_global_phase_another_task_holds(s3_bucket, tmp_path):
    """Task 0 holds the global lease (stopped after the signatures); task 1 waits, saying so, rather than
    failing or running the global phase beside it; both finish once task 0 goes on."""
    inputs = _inputs(tmp_path / "in")
    lake = Lake(f"s3://{s3_bucket}/lake", "web")
    StageRunner(IngestStage(lake, {"inputs": [str(inputs)], **INGEST}, "r1")).run()
    spec = JobSpec("dedup", lake.to_dict(), "d1", {"input_manifest": lake.manifest_uri("r1", "ingest")})
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(spec.to_json())
    env = {**os.environ}
    go = tmp_path / "go"
    held = _job(
        ["run", str(spec_path), "--group", "0/2"],
        {**env, "CURATION_HOLD": f"dedup.after_signatures={go}"},
        tmp_path / "group0.log",
    )
    other = None
    try:
        while not storage.exists(lake.path("_locks", "dedup.global.lease")):
            assert held.poll() is None, (tmp_path / "group0.log").read_text()[-3000:]
            time.sleep(0.2)
        other = _job(["run", str(spec_path), "--group", "1/2"], env, tmp_path / "group1.log")
        while "dedup's global phase on" not in (tmp_path / "group1.log").read_text():
            assert other.poll() is None, (tmp_path / "group1.log").read_text()[-3000:]
            time.sleep(0.2)
    finally:
        go.touch()
    wait_job(held, tmp_path / "group0.log")
    wait_job(other, tmp_path / "group1.log")
    text1 = (tmp_path / "group1.log").read_text()
    assert "waiting while its holder lives" in text1 and "dedup: global phase already done" in text1
    wait_job(_job(["collect", str(spec_path)], env, tmp_path / "collect.log"), tmp_path / "collect.log")
    assert Manifest.read(lake.manifest_uri("d1", "dedup")).status == "complete"


def test_the_global_phase_reads_the_spill_packed_on_s3(s3_bucket, tmp_path):
    """On an object store an open is requests: with several units, the global phase packs the shards' spill
    (a GET of each file, a PUT a group) and its units read the packs, and the components and the gather read
    the units' outputs packed; labels are a local whole run's."""
    inputs = _inputs(tmp_path / "in")
    _, want = _whole_local_run(inputs, tmp_path)
    lake = Lake(f"s3://{s3_bucket}/packed", "web")
    StageRunner(IngestStage(lake, {"inputs": [str(inputs)], **INGEST}, "r1")).run()
    config = {"input_manifest": lake.manifest_uri("r1", "ingest"), "memory_budget": 4_500}
    assert _labels(StageRunner(DedupStage(lake, config, "r1")).run()) == want
    (done,) = storage.glob(storage.join(lake.path("dedup"), "*", "_SUCCESS.json"))
    result = storage.read_json(done)
    assert result["units"] > 1 and result["spill_groups"] >= 1
    # the units' edge and exact-duplicate files too: every reader opening every unit's file is requests
    assert result["edge_groups"] >= 1 and result["exact_groups"] >= 1
    for folder in ("packed", "packed-units"):
        assert not storage.glob(storage.join(lake.path("dedup"), "*", folder, "*"))


def test_the_components_steps_read_merged_inputs_on_s3(s3_bucket, tmp_path):
    """The components' middle pass on an object store (``components_merge=on``, 8 partitions forced): each step's
    inputs merged into files under the step's folder, its tasks reading those, the merged files removed once
    read; labels are a local whole run's."""
    inputs = _inputs(tmp_path / "in")
    _, want = _whole_local_run(inputs, tmp_path)
    lake = Lake(f"s3://{s3_bucket}/cc-merged", "web")
    StageRunner(IngestStage(lake, {"inputs": [str(inputs)], **INGEST}, "r1")).run()
    config = {"input_manifest": lake.manifest_uri("r1", "ingest"), "partitions": 8, "components_merge": "on"}
    assert _labels(StageRunner(DedupStage(lake, config, "r1")).run()) == want
    (done,) = storage.glob(storage.join(lake.path("dedup"), "*", "_SUCCESS.json"))
    result = storage.read_json(done)
    assert result["components_partitions"] == 8 and result["components_merged_steps"] >= 1
    assert not storage.glob(storage.join(lake.path("dedup"), "*", "components", "*", "merged", "*", "*"))
