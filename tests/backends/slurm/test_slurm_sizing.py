"""An array's size on Slurm follows the same rule as a Kubernetes sweep's: ``shard_groups`` tasks at most, and
few enough that each reads ``min_group_bytes`` of shards (issue 20: a task's fixed cost, 0.8-2 CPU-s, is paid
once for several small shards). No live cluster: the site's configuration is the only Slurm answer needed."""

from __future__ import annotations

import subprocess

import pytest

from airflow_curation.backends import get_backend
from airflow_curation.backends.slurm import SlurmBackend
from airflow_curation.core.manifest import Manifest, ShardEntry
from airflow_curation.jobs.spec import JobSpec

MIB = 1 << 20


class SiteConfig:
    """Where the Slurm commands would run: answers ``scontrol show config`` as a site with the given
    MaxArraySize does (what the backend asks before sizing an array); anything else is refused."""

    remote = False

    def __init__(self, max_array_size: int = 1001) -> None:
        self.text = f"Configuration data as of now\nMaxArraySize            = {max_array_size}\n"

    def run(self, argv, data, timeout):
        if argv[:3] != ["scontrol", "show", "config"]:
            raise OSError(f"not on this test's site: {argv}")
        return subprocess.CompletedProcess(argv, 0, self.text.encode(), b"")


def _spec(tmp_path, shards: int, shard_bytes: int) -> JobSpec:
    lake = {"root": str(tmp_path), "dataset": "d", "snapshot": None}
    uri = str(tmp_path / "d" / "_manifests" / "r1" / "ingest.json")
    entries = [
        ShardEntry(f"part-{i:05d}", f"/x/part-{i:05d}.parquet", 1, shard_bytes, "xxh64:0") for i in range(shards)
    ]
    Manifest("d", "ingest", "r1", "f", lake, shards=entries, status="complete").write(uri)
    return JobSpec(stage="preprocess", lake=lake, run_id="r1", config={"input_manifest": uri})


@pytest.mark.parametrize(
    ("requested", "shards", "shard_bytes", "expected"),
    [
        (64, 300, MIB, 4),  # 300 MiB: four tasks of 75 small shards, not 64 tasks of 4-5
        (64, 10, MIB, 1),  # 10 MiB: one task
        (64, 40, 100 * MIB, 40),  # big shards: one task a shard where fewer than requested
        (64, 200, 100 * MIB, 64),  # never more than requested
        (5000, 3000, 100 * MIB, 1001),  # nor than the site's MaxArraySize
    ],
)
def test_small_shards_go_several_to_an_array_task(tmp_path, requested, shards, shard_bytes, expected):
    backend = SlurmBackend(shard_groups=requested, transport=SiteConfig(), work_dir=str(tmp_path / "jobs"))
    assert backend.groups_for(_spec(tmp_path, shards, shard_bytes)) == expected


def test_the_floor_is_an_option_kept_for_the_trigger_and_0_turns_it_off(tmp_path):
    spec = _spec(tmp_path, 10, MIB)
    unfloored = SlurmBackend(shard_groups=8, min_group_bytes=0, transport=SiteConfig())
    assert unfloored.groups_for(spec) == 8
    backend = SlurmBackend(shard_groups=8, min_group_bytes=4 * MIB, transport=SiteConfig())
    assert backend.groups_for(spec) == 2
    again = get_backend("slurm", **backend.options())
    assert again.min_group_bytes == 4 * MIB
    # Without an input manifest (ingest) the array is as requested: ingest sizes its units to the tasks.
    ingest = JobSpec(stage="ingest", lake=spec.lake, run_id="r1", config={"inputs": ["/raw"]})
    assert backend.groups_for(ingest) == 8


def test_the_job_folder_holds_an_array_of_that_size(tmp_path):
    backend = SlurmBackend(shard_groups=64, transport=SiteConfig(), work_dir=str(tmp_path / "jobs"))
    base = backend._prepare(_spec(tmp_path, 300, MIB))
    assert base["groups"] == 4
