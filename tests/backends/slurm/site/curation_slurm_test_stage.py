"""A small stage for the Slurm tests: N units, each sleeps a while and writes one tiny Parquet file.

``fail_units`` fail while the file ``fail_flag`` exists, so that a test can fail some shards, "fix" the
cause and check that only those are run again; with ``slow_flag``, units sleep only while that file
exists (a job that times out, then a resubmission that does not).
"""

from __future__ import annotations

import hashlib
import os
import time

import pyarrow as pa

from airflow_curation.core.accounting import RowAccounting
from airflow_curation.core.manifest import ShardEntry, UnitEntry
from airflow_curation.core.shards import write_parquet
from airflow_curation.stages.base import Stage, UnitResult


class SleepyStage(Stage):
    name = "slurmtest"
    version = "1"
    DEFAULTS = {"units": 4, "rows": 5, "sleep_s": 0.0, "fail_units": [], "fail_flag": None, "slow_flag": None}
    RUNTIME_KEYS = Stage.RUNTIME_KEYS | {"sleep_s", "fail_units", "fail_flag", "slow_flag"}

    def default_mapper(self):
        if self.config.get("scheduler_address"):  # a Dask cluster, e.g. the one a Slurm allocation started
            from airflow_curation.stages.mappers.dask import dask_mapper

            return dask_mapper(self.config["scheduler_address"])
        return super().default_mapper()

    def plan(self) -> list[UnitEntry]:
        return [
            UnitEntry(unit_id=f"u{i:03d}", inputs=[], input_checksum=f"in-{i}")
            for i in range(int(self.config["units"]))
        ]

    def process_unit(self, unit: UnitEntry) -> UnitResult:
        flag = self.config["fail_flag"]
        if unit.unit_id in self.config["fail_units"] and flag and os.path.exists(flag):
            raise RuntimeError(f"{unit.unit_id} fails while {flag} exists")
        slow = self.config["slow_flag"]
        if not slow or os.path.exists(slow):  # with a slow_flag, units are slow only while it exists
            time.sleep(float(self.config["sleep_s"]))
        rows = int(self.config["rows"])
        table = pa.table({"id": [f"{unit.unit_id}-{i}" for i in range(rows)], "n": list(range(rows))})
        uri = self.lake.attrs_uri(self.name, unit.unit_id)
        nbytes, checksum = write_parquet(uri, table)
        acc = RowAccounting()
        acc.keep(rows)
        # A digest, never the value: the secrets tests check that the job got them and wrote them nowhere.
        secret = os.environ.get("CURATION_STORAGE_OPTIONS_S3")
        extra = {
            "echo": os.environ.get("CURATION_TEST_ECHO"),
            "task": os.environ.get("SLURM_ARRAY_TASK_ID"),
            "storage_options_sha256": hashlib.sha256(secret.encode()).hexdigest() if secret else None,
            "slurm_job": os.environ.get("SLURM_JOB_ID"),
            "slurm_step": os.environ.get("SLURM_STEP_ID"),
            "pid": os.getpid(),
        }
        return UnitResult(
            [
                ShardEntry(
                    shard_id=unit.unit_id, uri=uri, rows=rows, bytes=nbytes, checksum=checksum, unit_id=unit.unit_id
                )
            ],
            acc,
            extra,
        )
