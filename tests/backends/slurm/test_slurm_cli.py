"""``curation <stage> --backend slurm``: a user without Airflow submits a stage to the real one-node Slurm
through the same backend class the operators use, as an array, and gets the stage's summary back."""

from __future__ import annotations

import json
import sys

import pytest

from airflow_curation.cli import main as curation
from airflow_curation.cli.submit import backend_options
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.ingest.stage import IngestStage

from .conftest import JOB_PYTHONPATH

pytestmark = pytest.mark.slurm


def test_backend_options_as_json_or_key_value_pairs():
    assert backend_options('{"shard_groups": 4, "partition": "debug"}') == {"shard_groups": 4, "partition": "debug"}
    assert backend_options("shard_groups=4,partition=debug,exclusive=true") == {
        "shard_groups": 4,
        "partition": "debug",
        "exclusive": True,
    }
    with pytest.raises(Exception, match="key=value"):
        backend_options("shard_groups")


def test_cli_runs_ingest_on_slurm_as_an_array(slurm_cluster, tmp_path, capsys):
    inputs = tmp_path / "in"
    inputs.mkdir()
    for f in range(3):
        (inputs / f"part-{f}.jsonl").write_text(
            "".join(json.dumps({"text": f"doc {f}-{i} " * 20}) + "\n" for i in range(10))
        )
    options = {"shard_groups": 2, "python": sys.executable, "env": {"PYTHONPATH": JOB_PYTHONPATH}}
    rc = curation(
        ["ingest", str(inputs), "--lake", str(tmp_path / "lake"), "--dataset", "web", "--run-id", "cli1"]
        + ["--backend", "slurm", "--backend-options", json.dumps(options)]
    )
    captured = capsys.readouterr()
    assert rc == 0, captured.err[-3000:]
    summary = json.loads(captured.out)
    assert summary["backend"] == "slurm" and summary["rows"] == 30
    assert "submitted ingest job" in captured.err
    manifest = Manifest.read(summary["manifest_uri"])
    # No unit size given: the default no longer makes this small input one unit, which the second array
    # task would have had nothing of; the plan has a unit for each task.
    assert manifest.status == "complete" and len(manifest.units) == 2
    # Both array tasks ran units (the job's log, streamed to stderr, has each group's result), then the
    # collect step wrote the manifest.
    assert '"group": "0/2"' in captured.err and '"group": "1/2"' in captured.err
    assert summary["kind"] == "collect"
    # The inputs were listed once, by the task that took the plan lease first; the other task read its
    # block of that plan (issue 20: a task reads only its slice). The result is one process's.
    assert captured.err.count("written: 2 units, 3 files") == 1, captured.err[-3000:]
    one = Lake(str(tmp_path / "one"), "web")
    alone = StageRunner(IngestStage(one, {"inputs": [str(inputs)], "min_units": 2}, "cli1")).run()
    assert [(s.shard_id, s.rows, s.checksum) for s in manifest.shards] == [
        (s.shard_id, s.rows, s.checksum) for s in alone.shards
    ]
    assert [(u.unit_id, u.input_checksum) for u in manifest.units] == [
        (u.unit_id, u.input_checksum) for u in alone.units
    ]


def test_cli_refuses_settings_the_stage_refuses_before_submitting(slurm_cluster, tmp_path, capsys):
    """``curation dedup --no-exact --no-near --backend slurm``: refused before sbatch, as the operator does
    (the backend's ``submit`` checks them), not by the job after the queue."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "a.jsonl").write_text("".join(json.dumps({"text": f"doc {i} " * 20}) + "\n" for i in range(10)))
    lake = tmp_path / "lake"
    StageRunner(IngestStage(Lake(str(lake), "web"), {"inputs": [str(inputs)]}, "r1")).run()
    options = {"python": sys.executable, "env": {"PYTHONPATH": JOB_PYTHONPATH}}
    rc = curation(
        ["dedup", "--lake", str(lake), "--dataset", "web", "--no-exact", "--no-near"]
        + ["--backend", "slurm", "--backend-options", json.dumps(options)]
    )
    err = capsys.readouterr().err
    assert rc == 1 and "curation dedup: ValueError: dedup: nothing to do with exact=False and near=False" in err
    assert "submitted" not in err and not (lake / "web" / "_jobs").exists()  # no job folder, no sbatch
