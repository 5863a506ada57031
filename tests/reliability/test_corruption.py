"""Corruption of every kind of file a run leaves (shard, attrs, checkpoint record, manifest): the run that
meets it says what and where, and once the damaged file is removed a rerun restores the reference output
exactly, redoing only what the damage touched.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from process_helpers import sample_corpus

from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest, ManifestError
from airflow_curation.stages.base import StageFailed, StageRunner
from airflow_curation.stages.dedup.stage import DedupStage
from airflow_curation.stages.ingest.stage import IngestStage
from airflow_curation.stages.preprocess.stage import PreprocessStage


def _write_raw(folder: Path) -> None:
    """The demo's corpus generator, small: real text with planted duplicates, junk and bad records."""
    sample_corpus(folder, 24)


def _pipeline(lake: Lake, raw: str) -> dict[str, Manifest]:
    out = {}
    ingest = IngestStage(lake, {"inputs": [raw], "unit_bytes": 60_000}, "r")
    out["ingest"] = StageRunner(ingest).run()
    pre = PreprocessStage(lake, {"input_manifest": ingest.manifest_uri, "mapper": "local"}, "r")
    out["preprocess"] = StageRunner(pre).run()
    out["dedup"] = StageRunner(DedupStage(lake, {"input_manifest": pre.manifest_uri}, "r")).run()
    return out


def _curated(manifest: Manifest) -> pa.Table:
    """Shard rows joined with every attrs file, by position (attrs hold the shard's rows in order)."""
    tables = []
    for s in manifest.shards:
        t = pq.read_table(s.uri)
        for stage in sorted(s.attrs):
            attrs = pq.read_table(s.attrs[stage])
            assert attrs.column("id").equals(t.column("id"))
            for name in attrs.column_names[1:]:
                t = t.append_column(f"{stage}.{name}", attrs.column(name))
        tables.append(t)
    return pa.concat_tables(tables)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("ref")
    _write_raw(root / "raw")
    manifests = _pipeline(Lake(str(root / "lake"), "web"), str(root / "raw" / "data"))
    books = {k: m.accounting for k, m in manifests.items()}
    # The corpus exercises every stage: rows kept, rows dropped by preprocess, duplicates found.
    assert books["preprocess"]["kept"] and books["preprocess"]["dropped"] and books["dedup"]["kept"]
    assert books["dedup"]["dropped"].get("exact_duplicate")
    return _curated(manifests["dedup"]), books


@pytest.fixture
def lake(tmp_path, reference):
    raw = tmp_path / "raw"
    _write_raw(raw)
    lake = Lake(str(tmp_path / "lake"), "web")
    _pipeline(lake, str(raw / "data"))
    return lake, str(raw / "data")


def _rerun_matches(lake: Lake, raw: str, reference) -> dict[str, Manifest]:
    manifests = _pipeline(lake, raw)
    curated, books = reference
    assert _curated(manifests["dedup"]).equals(curated)
    assert {k: m.accounting for k, m in manifests.items()} == books
    return manifests


def test_a_corrupted_shard_fails_the_stage_that_reads_it_and_a_reingest_restores_it(lake, reference, flip_byte):
    lake, raw = lake
    shard = Manifest.read(lake.manifest_uri("r", "ingest")).shards[1]
    flip_byte(shard.uri)
    # Another preset reads the shards again (the default one's checkpoints would skip them).
    pre = PreprocessStage(
        lake, {"input_manifest": lake.manifest_uri("r", "ingest"), "mapper": "local", "preset": "c4"}, "r2"
    )
    with pytest.raises(StageFailed, match=f"IntegrityError: shard {shard.shard_id} {shard.uri} has checksum"):
        StageRunner(pre).run()
    os.remove(shard.uri)  # the checkpoint no longer vouches for its unit: ingest redoes that unit only
    manifests = _rerun_matches(lake, raw, reference)
    statuses = [u.status for u in manifests["ingest"].units]
    assert statuses.count("done") == 1 and set(statuses) == {"done", "skipped"}


def test_corrupted_attrs_fail_the_next_stage_and_the_producing_stage_redoes_them(lake, reference, flip_byte):
    lake, raw = lake
    attrs = Manifest.read(lake.manifest_uri("r", "preprocess")).shards[0].attrs["preprocess"]
    flip_byte(attrs)
    with pytest.raises(StageFailed, match=f"preprocess attrs of shard .* {attrs} has checksum"):
        StageRunner(
            DedupStage(lake, {"input_manifest": lake.manifest_uri("r", "preprocess"), "threshold": 0.7}, "r2")
        ).run()
    os.remove(attrs)
    manifests = _rerun_matches(lake, raw, reference)
    assert {u.unit_id: u.status for u in manifests["preprocess"].units if u.status != "skipped"} == {
        Manifest.read(lake.manifest_uri("r", "ingest")).shards[0].shard_id: "done"
    }


def test_a_rerun_over_same_size_corrupted_outputs_redoes_exactly_those_units(lake, reference, flip_byte):
    """A checkpoint vouches for its outputs' content, not their size: preprocess and dedup reruns find their
    own corrupted attrs (one byte each, same size) and redo those units, not "already done"."""
    lake, raw = lake
    pre = Manifest.read(lake.manifest_uri("r", "preprocess")).shards[0]
    ded = Manifest.read(lake.manifest_uri("r", "dedup")).shards[2]
    flip_byte(pre.attrs["preprocess"])
    flip_byte(ded.attrs["dedup"])
    manifests = _rerun_matches(lake, raw, reference)

    def redone(stage: str) -> dict[str, str]:
        return {u.unit_id: u.status for u in manifests[stage].units if u.status != "skipped"}

    assert redone("ingest") == {}
    assert redone("preprocess") == {pre.shard_id: "done"}
    assert redone("dedup") == {ded.shard_id: "done"}


def test_a_torn_checkpoint_record_redoes_only_its_unit(lake, reference):
    lake, raw = lake
    stage = PreprocessStage(lake, {"input_manifest": lake.manifest_uri("r", "ingest"), "mapper": "local"}, "r")
    torn = Manifest.read(stage.manifest_uri).units[2].unit_id
    record = os.path.join(stage.checkpoints.directory, f"{torn}.json")
    with open(record, "r+b") as f:  # torn: what a disk that lost the last write leaves
        f.truncate(os.path.getsize(record) * 2 // 3)
    manifests = _rerun_matches(lake, raw, reference)
    assert {u.unit_id: u.status for u in manifests["preprocess"].units if u.status != "skipped"} == {torn: "done"}


def test_a_corrupted_manifest_is_refused_by_name_and_rewritten_by_its_stage(lake, reference):
    lake, raw = lake
    uri = lake.manifest_uri("r", "preprocess")
    with open(uri, "r+b") as f:
        f.truncate(os.path.getsize(uri) // 2)
    with pytest.raises(ManifestError, match=f"manifest {uri} is not valid JSON"):
        StageRunner(DedupStage(lake, {"input_manifest": uri}, "r2")).run()
    manifests = _rerun_matches(lake, raw, reference)  # preprocess skips every unit and writes its manifest anew
    assert {u.status for u in manifests["preprocess"].units} == {"skipped"}
