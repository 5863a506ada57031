"""``--shard-group I/N`` and ``--collect`` of the jobs entrypoint, in-process (what each array task and
the collect job of a Slurm array run)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest
from airflow_curation.jobs import main as jobs_main
from airflow_curation.stages import stage_class
from airflow_curation.stages.base import Stage, StageFailed, StageRunner

from .conftest import spec_for  # importing conftest registers the test stage ``slurmtest``


def _stage(tmp_path, **config) -> Stage:
    return stage_class("slurmtest")(Lake(str(tmp_path / "lake"), "ds"), config, "r1")


def test_groups_partition_the_plan_and_collect_writes_the_manifest(tmp_path):
    seen = []
    for i in range(3):
        m = StageRunner(_stage(tmp_path, units=7)).run(shard_group=(i, 3))
        seen.append([u.unit_id for u in m.units])
        assert all(u.status == "done" for u in m.units)
    assert seen == [["u000", "u001"], ["u002", "u003"], ["u004", "u005", "u006"]]  # contiguous blocks
    # Only group 0 wrote the (planned) manifest; the collect step completes it without running anything.
    stage = _stage(tmp_path, units=7)
    assert Manifest.read(stage.manifest_uri).status == "planned"
    m = StageRunner(stage).run(collect=True)
    assert m.status == "complete" and m.rows == 35 and len(m.shards) == 7
    assert {u.status for u in m.units} == {"skipped"}


def test_a_failed_unit_fails_its_group_and_collect_applies_the_budget(tmp_path):
    flag = tmp_path / "flag"
    flag.touch()
    config = {"units": 4, "fail_units": ["u002"], "fail_flag": str(flag), "max_attempts": 1}
    StageRunner(_stage(tmp_path, **config)).run(shard_group=(0, 2))
    with pytest.raises(StageFailed, match="shard group 1/2: 1 of 2 units failed"):
        StageRunner(_stage(tmp_path, **config)).run(shard_group=(1, 2))
    with pytest.raises(StageFailed, match="1 of 4 units failed"):
        StageRunner(_stage(tmp_path, **config)).run(collect=True)
    m = Manifest.read(_stage(tmp_path, **config).manifest_uri)
    assert m.status == "failed"
    assert {u.unit_id: u.error for u in m.units if u.status == "failed"} == {
        "u002": f"RuntimeError: u002 fails while {flag} exists"
    }
    # Within the budget, collect completes with the missing unit counted as failed.
    m = StageRunner(_stage(tmp_path, **config, max_failed_fraction=0.25)).run(collect=True)
    assert m.status == "complete" and len(m.shards) == 3


def test_collect_counts_units_no_group_ran(tmp_path):
    StageRunner(_stage(tmp_path, units=4)).run(shard_group=(0, 2))
    with pytest.raises(StageFailed, match="no checkpoint"):
        StageRunner(_stage(tmp_path, units=4)).run(collect=True)


def test_cli_options(tmp_path):
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(spec_for({"root": str(tmp_path / "lake"), "dataset": "ds"}, units=5).to_json())
    assert jobs_main(["run", str(spec_path), "--result", str(tmp_path / "g1.json"), "--shard-group", "1/2"]) == 0
    g1 = json.loads((tmp_path / "g1.json").read_text())
    assert g1["group"] == "1/2" and g1["kind"] == "group" and g1["shards"] == 3  # units 2..4 of 5
    for bad in ("2/2", "x/2", "1"):
        proc = subprocess.run(
            [sys.executable, "-m", "airflow_curation.jobs", "run", str(spec_path), "--shard-group", bad],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 2 and "shard-group" in proc.stderr
