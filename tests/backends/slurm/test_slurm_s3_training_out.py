"""Training data out as a data engineer deploys it: mix, tokenize and export (after ingest and preprocess),
each a Slurm array of three groups plus its collect job, on a lake on S3 (moto on loopback) with the
tokenizer file on S3 too (no node shares a disk with the submitter). The tasks of mix share one plan (its
plan lease), those of export one scatter and one merge of the spill files (each its lease and done mark)
before each gathers its block: the exported files must be, byte for byte, the ones one process writes on a
local lake from the same inputs (without the merge), and each task must gather its own buckets."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from s3.conftest import s3_bucket, s3_endpoint, storage_options  # noqa: F401 - the moto S3 fixtures
from tokenizer_files import stdlib_prose, train_bpe

from airflow_curation.backends.base import JobState
from airflow_curation.core import storage
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest
from airflow_curation.jobs.spec import JobSpec
from airflow_curation.stages import stage_class
from airflow_curation.stages.base import StageRunner

from .conftest import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.s3]

GROUPS = 3


def _stages(tokenizer: str) -> list[tuple[str, str | None, dict]]:
    return [
        ("ingest", None, {"target_shard_bytes": 4_000, "row_group_rows": 16, "unit_bytes": 1}),
        ("preprocess", "ingest", {}),
        # up-sampled past what is kept: rows packed more than once, epochs planned across every task's shards
        ("mix", "preprocess", {"key": "source_dir", "targets": {"a": 0.5, "b": 0.5}, "total": 200, "seed": 4}),
        ("tokenize", "mix", {"tokenizer": tokenizer, "seq_len": 32}),
        (
            "export",
            "tokenize",
            {"formats": ["megatron", "mds", "parquet"], "file_size": 2048, "mds_size_limit": 4096, "seed": 9},
        ),
    ]


def _inputs(root: Path) -> Path:
    """Prose in two source folders (the mix keys), several files each."""
    prose = stdlib_prose(240)
    for k, folder in enumerate(("a", "b")):
        (root / folder).mkdir(parents=True)
        for f in range(3):
            docs = prose[k * 120 + f * 40 : k * 120 + (f + 1) * 40]
            (root / folder / f"part-{f}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
    return root


def _exported(manifest: Manifest) -> dict[str, str]:
    """<format folder>/<file> -> SHA-256 of every file the export wrote."""
    out = manifest.config["export"]["output_dir"]
    files = json.loads(storage.read_bytes(storage.join(out, "_SUCCESS.json")))["files"]
    return {name: hashlib.sha256(storage.read_bytes(storage.join(out, name))).hexdigest() for name in files}


def test_mix_tokenize_export_as_slurm_arrays_on_s3_write_what_one_process_writes(
    make_backend,
    s3_bucket,  # noqa: F811
    s3_endpoint,  # noqa: F811
    tmp_path,
):
    inputs = _inputs(tmp_path / "in")
    local_tok = train_bpe(str(tmp_path / "tokenizer.json"), stdlib_prose(200))
    s3_tok = f"s3://{s3_bucket}/models/tokenizer.json"
    storage.write_bytes(s3_tok, Path(local_tok).read_bytes())

    # One process, a local lake: the reference.
    local = Lake(str(tmp_path / "local"), "web")
    for stage, upstream, config in _stages(local_tok):
        source = {"input_manifest": local.manifest_uri("r", upstream)} if upstream else {"inputs": [str(inputs)]}
        StageRunner(stage_class(stage)(local, {**source, **config}, "r")).run()
    want = _exported(Manifest.read(local.manifest_uri("r", "export")))
    assert any(name.startswith("mds/") for name in want) and len(want) > 10

    lake = Lake(f"s3://{s3_bucket}/lake", "web", "2026-12-06")
    backend = make_backend(
        shard_groups=GROUPS,
        work_dir=str(tmp_path / "jobs"),
        env={"CURATION_STORAGE_OPTIONS_S3": json.dumps(storage_options(s3_endpoint))},
    )
    # The array's export merges the spill files first, with a budget that makes two gather units a task.
    tokens = Manifest.read(local.manifest_uri("r", "tokenize")).config["tokens"]
    budget = 4 * tokens["sequences"] * tokens["seq_len"] * 2 // (2 * GROUPS) + 1
    merge = {"spill_merge": "on", "memory_budget": budget}
    submitted: dict[str, dict] = {}
    for stage, upstream, config in _stages(s3_tok):
        source = {"input_manifest": lake.manifest_uri("j1", upstream)} if upstream else {"inputs": [str(inputs)]}
        submitted[stage] = {**source, **config, **(merge if stage == "export" else {})}
        handle = backend.submit(JobSpec(stage, lake.to_dict(), "j1", submitted[stage]))
        st = wait_for(backend, handle, timeout=900)
        assert st.state == JobState.SUCCEEDED, (stage, st, backend.logs(handle)[0][-4000:])
        assert handle["groups"] == GROUPS and handle["array_job_id"], stage
        m = Manifest.read(lake.manifest_uri("j1", stage))
        assert m.status == "complete", stage
        ref = Manifest.read(local.manifest_uri("r", stage))
        assert m.accounting == ref.accounting, stage
    export = Manifest.read(lake.manifest_uri("j1", "export"))
    assert _exported(export) == want
    # Each task gathered its own buckets (before min_units, a budget that makes fewer units than tasks left
    # tasks idle); the gather units read merged files, one a group of shards.
    stage = stage_class("export")(lake, submitted["export"], "j1")
    pids = {stage.checkpoints.load(u.unit_id).pid for u in export.units}
    assert len(export.units) == 2 * GROUPS and len(pids) == GROUPS, (len(export.units), pids)
    merged = Manifest.read(lake.manifest_uri("j1", "export_merge"))
    assert merged.status == "complete" and len(merged.units) >= 2, merged.units
    assert merged.accounting["kept"] == export.config["export"]["sequences"]
