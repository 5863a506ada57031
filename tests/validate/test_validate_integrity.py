"""Validate judges only the bytes the stages wrote (issue 21, item 1): every shard and attrs file it reads is
checked against its manifest's checksum, on a first run and before an earlier verdict is reused."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest
from airflow_curation.stages.base import StageFailed, StageRunner
from airflow_curation.stages.validate import ValidateStage

from .synth import build_run


def _validate(root: str, input_manifest: str, run_id: str) -> tuple[ValidateStage, Manifest]:
    stage = ValidateStage(Lake(root, "demo"), {"input_manifest": input_manifest}, run_id)
    return stage, StageRunner(stage).run()


@pytest.fixture
def run(tmp_path) -> tuple[str, dict[str, str]]:
    root = str(tmp_path / "lake")
    return root, build_run(root)


def _rewrite(uri: str, change) -> None:
    """Write ``uri`` again, as a stray job would: a valid Parquet file whose content differs."""
    table = pq.read_table(uri)
    pq.write_table(change(table), uri, compression="zstd")


def test_a_flipped_keep_in_an_attrs_file_fails_validate_naming_the_file(run):
    root, uris = run
    attrs = Manifest.read(uris["dedup"]).shards[1].attrs["preprocess"]

    def flip_first_keep(t: pa.Table) -> pa.Table:
        keep = t.column("keep").to_pylist()
        keep[0] = not keep[0]
        return t.set_column(t.schema.get_field_index("keep"), "keep", pa.array(keep))

    _rewrite(attrs, flip_first_keep)
    with pytest.raises(StageFailed, match=f"IntegrityError: preprocess attrs of shard part-00001 {attrs} has checksum"):
        _validate(root, uris["dedup"], "v1")


def test_a_rewritten_shard_fails_validate(run):
    root, uris = run
    shard = Manifest.read(uris["dedup"]).shards[0].uri

    def shout_first_text(t: pa.Table) -> pa.Table:
        text = t.column("text")
        return t.set_column(
            1,
            "text",
            pa.concat_arrays([pc.utf8_upper(text.slice(0, 1)).combine_chunks(), text.slice(1).combine_chunks()]),
        )

    _rewrite(shard, shout_first_text)
    with pytest.raises(StageFailed, match=f"IntegrityError: shard part-00000 {shard} has checksum"):
        _validate(root, uris["dedup"], "v1")


def test_one_flipped_byte_in_a_shard_fails_validate_as_corruption(run, flip_byte):
    root, uris = run
    shard = Manifest.read(uris["dedup"]).shards[2].uri
    flip_byte(shard)
    with pytest.raises(StageFailed, match=f"IntegrityError: shard part-00002 {shard} has checksum .* corrupted"):
        _validate(root, uris["dedup"], "v1")


def test_a_rerun_does_not_reuse_the_verdict_over_a_corrupted_shard(run, flip_byte):
    root, uris = run
    stage, first = _validate(root, uris["dedup"], "v1")
    assert first.status == "complete" and first.config["validation"] == "passed"
    _, again = _validate(root, uris["dedup"], "v2")  # untouched files: the verdict is reused
    assert [u.status for u in again.units] == ["skipped"]
    shard = Manifest.read(uris["dedup"]).shards[1].uri
    flip_byte(shard)
    with pytest.raises(StageFailed, match=f"IntegrityError: shard part-00001 {shard} has checksum"):
        _validate(root, uris["dedup"], "v3")
    failed = Manifest.read(stage.lake.manifest_uri("v3", "validate"))
    assert failed.status == "failed" and [u.status for u in failed.units] == ["failed"]
