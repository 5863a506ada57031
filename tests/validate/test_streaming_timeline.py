"""Per-shard streaming between stages, with real stages in process and no timing assumption: ingest runs its
units in steps (one shard group at a time, as a Slurm array would), preprocess runs alongside in a thread,
processes only the shards ingest has checkpointed, waits, picks up the rest on its next passes, and then
finishes like any run; the report's timeline shows the overlap from the checkpoint records."""

from __future__ import annotations

import json
import random
import threading
import time

import pytest

from airflow_curation.core import storage
from airflow_curation.core.checkpoint import CheckpointStore
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest
from airflow_curation.stages import stage_class
from airflow_curation.stages.base import StageRunner


def _stage(lake: Lake, name: str, config: dict, run_id: str = "s"):
    return stage_class(name)(lake, config, run_id)


def _wait_for(predicate, what: str, limit_s: float = 120.0) -> None:
    """Wait for a state the test depends on (never asserted on time: the limit only stops a hang)."""
    deadline = time.monotonic() + limit_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def streamed(tmp_path_factory):
    base = tmp_path_factory.mktemp("stream")
    rng = random.Random(5)
    words = "data curation keeps the good documents for training and drops the rest of the web pages".split()
    for k in range(3):  # three input files: three ingest units
        with open(base / f"in-{k}.jsonl", "w") as f:
            for i in range(20):
                text = " ".join(rng.choice(words) for _ in range(rng.randint(60, 120)))
                f.write(json.dumps({"text": f"file {k} doc {i} " + text}) + "\n")
    lake = Lake(str(base / "lake"), "web", "2026-12-01")
    ingest = _stage(lake, "ingest", {"inputs": [str(base)], "unit_bytes": 1, "row_group_rows": 8})
    ingest_uri = ingest.manifest_uri
    # ingest unit 0 only (group 0 of 3 also writes the planned manifest, as an array's first task does)
    StageRunner(ingest).run(shard_group=(0, 3))
    assert Manifest.read(ingest_uri).status == "planned"

    pre = _stage(lake, "preprocess", {"input_manifest": ingest_uri, "stream_poll_s": 0.05, "upstream_wait_s": 120})
    result: dict = {}

    def run_preprocess() -> None:
        try:
            result["manifest"] = StageRunner(pre).run()
        except Exception as e:  # noqa: BLE001 - reported by the test
            result["error"] = e

    thread = threading.Thread(target=run_preprocess)
    thread.start()
    pre_store = CheckpointStore(lake.checkpoint_dir("preprocess", pre.fingerprint))
    first_shards = [s["shard_id"] for s in _ingest_records(lake, ingest)["00000"]["outputs"]]
    _wait_for(lambda: pre_store.scan()[0] >= set(first_shards), "preprocess checkpoints the shards of ingest unit 0")
    seen_while_ingest_ran = set(pre_store.scan()[0])
    alive_while_ingest_ran = thread.is_alive()

    StageRunner(ingest).run(shard_group=(1, 3))
    StageRunner(ingest).run(shard_group=(2, 3))
    ingest_manifest = StageRunner(ingest).run(collect=True)
    thread.join(timeout=300)
    assert "error" not in result, result.get("error")
    return (
        lake,
        ingest,
        ingest_manifest,
        pre,
        result["manifest"],
        first_shards,
        seen_while_ingest_ran,
        alive_while_ingest_ran,
    )


def _ingest_records(lake: Lake, ingest) -> dict:
    store = CheckpointStore(lake.checkpoint_dir("ingest", ingest.fingerprint))
    return {u: storage.read_json(storage.join(store.directory, f"{u}.json")) for u in sorted(store.scan()[0])}


def test_preprocess_starts_on_checkpointed_ingest_shards_and_picks_up_the_rest(streamed):
    lake, ingest, ingest_manifest, pre, pre_manifest, first, seen, alive = streamed
    # while ingest had done only unit 0, preprocess had done exactly that unit's shards, and was still waiting
    assert alive
    assert seen == set(first)
    # then it took the rest and finished like any run: every ingested shard, books closed against ingest
    assert ingest_manifest.status == "complete" and pre_manifest.status == "complete"
    assert [s.shard_id for s in pre_manifest.shards] == [s.shard_id for s in ingest_manifest.shards]
    assert pre_manifest.accounting["read"] == ingest_manifest.rows
    status = {u.unit_id: u.status for u in pre_manifest.units}
    assert {status[s] for s in first} == {"skipped"}  # done while streaming, found done by the final plan
    # the rest: streamed too if its checkpoint landed before ingest's manifest completed, else planned at the end
    assert {v for k, v in status.items() if k not in first} <= {"done", "skipped"}
    # from the checkpoint records: preprocess's first unit began before ingest's last unit ended
    ingest_recs = _ingest_records(lake, ingest)
    pre_store = CheckpointStore(lake.checkpoint_dir("preprocess", pre.fingerprint))
    pre_recs = [pre_store.load(s.shard_id) for s in pre_manifest.shards]
    assert min(r.started_at for r in pre_recs) < max(r["finished_at"] for r in ingest_recs.values())


def test_the_report_timeline_shows_the_overlap(streamed):
    lake, _, ingest_manifest, _, pre_manifest, _, _, _ = streamed
    dedup = StageRunner(_stage(lake, "dedup", {"input_manifest": lake.manifest_uri("s", "preprocess")})).run()
    m = StageRunner(_stage(lake, "validate", {"input_manifest": lake.manifest_uri("s", "dedup")})).run()
    report = json.loads(open(m.config["report_json"]).read())
    tl = report["timeline"]
    assert set(tl["stages"]) >= {"ingest", "preprocess", "dedup"}
    assert tl["stages"]["preprocess"]["units"] == len(pre_manifest.shards)
    assert tl["stages"]["ingest"]["units"] == len(ingest_manifest.units)
    pairs = {(o["upstream"], o["stage"]): o for o in tl["overlaps"]}
    streamed_pair = pairs[("ingest", "preprocess")]
    assert streamed_pair["started_before_upstream_ended"]
    assert streamed_pair["overlap_s"] > 0
    ing, pre = tl["stages"]["ingest"], tl["stages"]["preprocess"]
    assert streamed_pair["overlap_s"] == pytest.approx(
        min(ing["end"], pre["end"]) - max(ing["start"], pre["start"]), abs=1e-3
    )
    # dedup is a barrier: it starts after preprocess's last unit
    assert not pairs[("preprocess", "dedup")]["started_before_upstream_ended"]
    assert dedup.status == "complete"
    html = open(m.config["report_html"]).read()
    assert "<h2>Timeline</h2>" in html and "started before upstream ended" in html
