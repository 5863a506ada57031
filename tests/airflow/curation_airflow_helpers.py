"""Helpers for the Airflow layer's tests (a unique module name: tests/airflow is not a package)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import stat
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from airflow_curation.backends import JobState, JobStatus
from airflow_curation.backends.local import LocalBackend
from airflow_curation.core.checkpoint import CheckpointRecord, CheckpointStore
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest, UnitEntry
from airflow_curation.triggers.shard_checkpoint import ShardCheckpointTrigger

# The daily scheduled run of 2026-11-30: Airflow names it by the time it was due (the interval's end).
RUN_ID = "scheduled__2026-12-01T00:00:00+00:00"
LOGICAL_DATE = datetime(2026, 11, 30, tzinfo=timezone.utc)


def write_jsonl(path: Path, n: int, start: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for i in range(start, start + n):
            f.write(
                json.dumps({"text": f"document number {i} about curation and data quality " * 3, "lang": "en"}) + "\n"
            )
    return path


class Gate:
    """A job that waits for the test to open its gate before it starts working.

    The local backend runs ``python -m airflow_curation.jobs ...``; this wrapper stands in for the
    interpreter, blocks until the gate file exists and then ``exec``s the real one (same pid), so a test
    can inspect a job that is certainly still running, without any timing assumption.
    """

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.file = folder / "gate-open"
        self.python = folder / "gated-python"
        self.python.write_text(
            f'#!/bin/sh\nwhile [ ! -e "{self.file}" ]; do sleep 0.05; done\nexec "{sys.executable}" "$@"\n'
        )
        self.python.chmod(self.python.stat().st_mode | stat.S_IXUSR)

    def open(self) -> None:
        self.file.touch()

    def backend_options(self, work_dir: Path) -> dict:
        return {"work_dir": str(work_dir), "python": str(self.python)}


def job_dirs(work_dir: Path) -> list[Path]:
    return sorted(p for p in Path(work_dir).iterdir() if p.is_dir()) if Path(work_dir).exists() else []


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class MemoryTaskStateStore:
    """The task state store's API over a dict (what survives a worker restart lives here)."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    def set(self, key: str, value: Any, *, retention=None) -> None:
        if value is None:
            raise ValueError("Cannot set value as None")
        self.data[key] = value

    def delete(self, key: str) -> None:
        self.data.pop(key, None)


class RecordingTI:
    """Collects what the operator pushes to XCom (extra links)."""

    stats_tags: dict[str, str] = {}

    def __init__(self) -> None:
        self.pushed: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


def task_context(store: MemoryTaskStateStore, run_id: str = RUN_ID) -> dict[str, Any]:
    """What the task runner hands ``execute()``, as far as the stage operator uses it."""
    return {
        "run_id": run_id,
        "logical_date": LOGICAL_DATE,
        "dag_run": SimpleNamespace(
            dag_id="curation_test", run_type=run_id.partition("__")[0] if "__" in run_id else "manual", conf={}
        ),
        "task_state_store": store,
        "ti": RecordingTI(),
    }


class RelaunchableLocalBackend(LocalBackend):
    """The local backend with every failure retryable and one relaunch allowed; a relaunch first removes
    the stage's ``fail_flag`` (the cause fixed), so the next attempt succeeds. Registered as
    ``relaunchable_local`` by the tests that use it."""

    name = "relaunchable_local"

    def __init__(self, work_dir: str | None = None, max_resubmits: int = 1) -> None:
        super().__init__(work_dir)
        self.max_resubmits = max_resubmits

    def status(self, handle: dict[str, Any]) -> JobStatus:
        st = super().status(handle)
        st.retryable = st.state == JobState.FAILED
        return st

    def launch(self, spec, groups=None, *, previous=None):
        if previous is not None:
            Path(spec.config["fail_flag"]).unlink(missing_ok=True)
        return super().launch(spec, groups, previous=previous)


# A planned stage run for the gate tests (sensor, triggers).
FP = "fp0123456789abcd"


class Run:
    """A planned stage run: a manifest with ``n`` units, and its checkpoint store."""

    def __init__(self, root, n: int, budget: float = 0.0, stage: str = "preprocess") -> None:
        self.lake = Lake(str(root), "web", "2026-11-30")
        self.units = [UnitEntry(unit_id=f"part-{i:05d}", inputs=[f"in-{i}"], input_checksum=f"c{i}") for i in range(n)]
        self.manifest = Manifest(
            dataset="web",
            stage=stage,
            run_id="r1",
            fingerprint=FP,
            lake=self.lake.to_dict(),
            units=self.units,
            config={"max_failed_fraction": budget},
        )
        self.uri = self.manifest.write(self.lake.manifest_uri("r1", stage))
        self.store = CheckpointStore(self.lake.checkpoint_dir(stage, FP))

    def commit(self, i: int, rows: int = 10, checksum: str | None = None) -> None:
        unit = self.units[i]
        out = {
            "shard_id": unit.unit_id,
            "uri": f"/x/{unit.unit_id}.parquet",
            "rows": rows,
            "bytes": rows * 100,
            "checksum": "s",
            "unit_id": unit.unit_id,
        }
        self.store.commit(
            CheckpointRecord(
                unit_id=unit.unit_id,
                stage=self.manifest.stage,
                fingerprint=FP,
                input_checksum=checksum or unit.input_checksum,
                outputs=[out],
            )
        )
        self._finish_when_all_accounted()

    def fail(self, i: int) -> None:
        self.store.mark_failed(self.units[i].unit_id, "ValueError: boom", 2)
        self._finish_when_all_accounted()

    def _finish_when_all_accounted(self) -> None:
        """What the job does after its last unit: the final manifest, complete or failed by budget."""
        if not self.auto_finish:
            return
        done, failed = self.store.scan()
        if len(done) + len(failed) == len(self.units):
            allowed = int(self.manifest.config["max_failed_fraction"] * len(self.units))
            self.manifest.status = "failed" if len(failed) > allowed else "complete"
            self.manifest.write(self.uri)

    auto_finish = True


def _first_event(trigger: ShardCheckpointTrigger) -> dict:
    async def go():
        async for event in trigger.run():
            return event.payload

    return asyncio.run(go())


REPO_ROOT = Path(__file__).resolve().parents[2]


def pipeline_module(name: str) -> ModuleType:
    """The shipped ``dags/curation_pipeline.py`` loaded as module ``name`` (its ``dag`` for ``dag.test()``)."""
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "dags" / "curation_pipeline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def final_manifest(uri: str, timeout: float = 300.0) -> Manifest:
    """A stage's manifest once its job has written the final one (its gate opens a moment before)."""
    deadline = time.monotonic() + timeout
    while (manifest := Manifest.read(uri)).status == "planned":
        assert time.monotonic() < deadline, f"{uri}: the job never finished its manifest"
        time.sleep(0.2)
    return manifest
