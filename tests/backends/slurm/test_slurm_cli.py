"""``curation <stage> --backend slurm``: a user without Airflow submits a stage to the real one-node Slurm
through the same backend class the operators use, as an array, and gets the stage's summary back."""

from __future__ import annotations

import json
import sys

import pytest

from airflow_curation.cli import main as curation
from airflow_curation.cli.submit import backend_options
from airflow_curation.core.manifest import Manifest

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
