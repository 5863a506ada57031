"""Ingest's plan is listed once per run (issue 20: "a task reads only its slice"): the first task of an array to
take the plan lease lists and groups every input and writes the plan as pages; the others read their block of it
and list nothing. The array's manifest, shards and ids are those of one process; a task touches only the
inputs of its own block; a rerun with the same inputs reuses the plan, a changed input set makes a new one."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from ingest_helpers import books_close, quarantined
from process_helpers import start_job, wait_job

from airflow_curation.core import storage
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest, group_range
from airflow_curation.jobs.spec import JobSpec
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.ingest import stage as ingest_stage
from airflow_curation.stages.ingest.plans import RunPlans
from airflow_curation.stages.ingest.stage import IngestStage

FILES = 12
# One unit per file; min_units is what an array launcher sets (its groups), so the one process gets it too.
CONFIG = {"unit_bytes": 1, "target_shard_bytes": 2_000, "row_group_rows": 8, "min_units": 3}


def _inputs(root: Path) -> Path:
    root.mkdir()
    for f in range(FILES):
        rows = [json.dumps({"text": f"file {f} row {r} " + "words " * 20}) for r in range(30)]
        if f == 5:
            rows.insert(3, "{not json")  # quarantined, in group 1's block
        (root / f"{f:03d}.jsonl").write_text("\n".join(rows) + "\n")
    return root


def _view(m: Manifest) -> dict:
    return {
        "units": [(u.unit_id, [os.path.basename(i) for i in u.inputs], u.input_checksum) for u in m.units],
        "shards": [(s.shard_id, s.unit_id, s.rows, s.bytes, s.checksum) for s in m.shards],
        "accounting": m.accounting,
    }


def _job(args: list[str], log: Path) -> subprocess.Popen:
    return start_job(args, log, {**os.environ, "PYTHONPATH": str(Path(ingest_stage.__file__).parents[3])})


def test_three_group_processes_make_what_one_process_makes(tmp_path):
    src = _inputs(tmp_path / "in")
    one = Lake(str(tmp_path / "one"), "web")
    want = StageRunner(IngestStage(one, {"inputs": [str(src)], **CONFIG}, "r1")).run()
    assert len(want.units) == FILES and want.accounting["quarantined"]

    lake = Lake(str(tmp_path / "lake"), "web")
    spec = tmp_path / "spec.json"
    spec.write_text(JobSpec("ingest", lake.to_dict(), "r1", {"inputs": [str(src)], **CONFIG}).to_json())
    # The three tasks start together: one takes the plan lease and lists, the others wait and read its plan.
    logs = [tmp_path / f"group{i}.log" for i in range(3)]
    procs = [_job(["run", str(spec), "--group", f"{i}/3"], logs[i]) for i in range(3)]
    for proc, log in zip(procs, logs):
        wait_job(proc, log)
    texts = [log.read_text() for log in logs]
    assert sum("ingest: plan " in t and " written: " in t for t in texts) == 1, texts  # one listing
    wait_job(_job(["collect", str(spec)], tmp_path / "collect.log"), tmp_path / "collect.log")

    got = Manifest.read(lake.manifest_uri("r1", "ingest"))
    assert got.status == "complete" and {u.status for u in got.units} == {"skipped"}
    assert _view(got) == _view(want)
    assert books_close(got.accounting)
    strip = [{k: v for k, v in q.items() if k != "input"} for q in quarantined(lake)]
    assert strip == [{k: v for k, v in q.items() if k != "input"} for q in quarantined(one)] and strip
    assert not storage.exists(RunPlans(IngestStage(lake, json.loads(spec.read_text())["config"], "r1")).pointer_uri)


class _Touches:
    """What the ingest stage of this process lists and which inputs it stats or opens."""

    def __init__(self, monkeypatch) -> None:
        self.listed = 0
        self.inputs: set[str] = set()
        listed, size, opened = ingest_stage.list_local, IngestStage._size, IngestStage._open

        def list_local(spec):
            self.listed += 1
            return listed(spec)

        def _size(url):
            self.inputs.add(url)
            return size(url)

        def _open(url, inputs, size=None):
            self.inputs.add(url)
            return opened(url, inputs, size)

        monkeypatch.setattr(ingest_stage, "list_local", list_local)
        monkeypatch.setattr(IngestStage, "_size", staticmethod(_size))
        monkeypatch.setattr(IngestStage, "_open", staticmethod(_open))


@pytest.mark.parametrize("first", [0, 2])
def test_a_task_after_the_first_lists_nothing_and_reads_only_its_block(tmp_path, monkeypatch, first):
    src = _inputs(tmp_path / "in")
    lake = Lake(str(tmp_path / "lake"), "web")
    config = {"inputs": [str(src)], **CONFIG}
    StageRunner(IngestStage(lake, config, "r1")).run(shard_group=(first, 3))  # lists: the plan's holder
    touches = _Touches(monkeypatch)
    StageRunner(IngestStage(lake, config, "r1")).run(shard_group=(1, 3))
    block = group_range(FILES, 1, 3)
    mine = {str(src / f"{f:03d}.jsonl") for f in block}
    assert touches.listed == 0
    assert touches.inputs == mine  # read its own block's files, and no other input


def test_a_rerun_reuses_the_plan_and_a_changed_input_makes_a_new_one(tmp_path):
    src = _inputs(tmp_path / "in")
    lake = Lake(str(tmp_path / "lake"), "web")
    config = {"inputs": [str(src)], **CONFIG}
    plans = lake.path("ingest", "plans")

    def array(run_id: str, **more) -> Manifest:
        for i in range(3):
            StageRunner(IngestStage(lake, {**config, **more}, run_id)).run(shard_group=(i, 3))
        return StageRunner(IngestStage(lake, {**config, **more}, run_id)).run(collect=True)

    first = array("r1")
    made = storage.glob(storage.join(plans, "*.json"))
    assert len(made) == 1
    again = array("r2")  # the holder of r2 lists, finds the same plan: reused, every unit skipped
    assert storage.glob(storage.join(plans, "*.json")) == made
    assert {u.status for u in again.units} == {"skipped"} and _view(again) == _view(first)

    (src / "000.jsonl").write_text(json.dumps({"text": "changed " + "words " * 20}) + "\n")
    changed = array("r3", replace=True)  # --replace as before: r1 and r2 are superseded
    assert len(storage.glob(storage.join(plans, "*.json"))) == 2
    moved = [u.unit_id for u, v in zip(changed.units, first.units) if u.input_checksum != v.input_checksum]
    assert moved == ["00000"] and changed.status == "complete"
    assert changed.rows == first.rows - 29
    assert {Manifest.read(lake.manifest_uri(r, "ingest")).status for r in ("r1", "r2")} == {"superseded"}


def test_collect_finds_inputs_changed_under_a_run_and_its_relaunch_runs_them(tmp_path):
    """A task's plan is the run's, read without a listing; the collect step lists, and where the inputs
    changed (here: under a killed launch of the same run id) the units the tasks missed fail as lost, and
    the run's tasks then follow the new plan."""
    src = _inputs(tmp_path / "in")
    lake = Lake(str(tmp_path / "lake"), "web")
    config = {"inputs": [str(src)], **CONFIG}
    StageRunner(IngestStage(lake, config, "r1")).run(shard_group=(0, 3))  # then the launch was killed
    (src / "011.jsonl").write_text(json.dumps({"text": "changed " + "words " * 20}) + "\n")
    for i in range(3):
        StageRunner(IngestStage(lake, config, "r1")).run(shard_group=(i, 3))  # the old plan: nothing listed
    with pytest.raises(Exception, match="units failed"):
        StageRunner(IngestStage(lake, config, "r1")).run(collect=True)
    failed = Manifest.read(lake.manifest_uri("r1", "ingest"))
    assert [u.unit_id for u in failed.units if u.status == "failed"] == ["00011"]
    StageRunner(IngestStage(lake, config, "r1")).run(shard_group=(2, 3))  # the relaunch of the lost group
    done = StageRunner(IngestStage(lake, config, "r1")).run(collect=True)
    assert done.status == "complete" and books_close(done.accounting)
    assert done.rows == FILES * 30 - 29


def test_a_new_launch_after_a_killed_one_lists_again(tmp_path):
    """The killed launch's first task wrote the run's plan pointer; the inputs change; a new launch of the same
    run id (``Stage.new_launch``, which ``Backend.submit`` calls: below) forgets the pointer, so the new
    launch's array tasks list again and the run completes in one attempt with the changed file's rows (no
    failed collect first, as when the inputs change under one launch: the test above)."""
    src = _inputs(tmp_path / "in")
    lake = Lake(str(tmp_path / "lake"), "web")
    config = {"inputs": [str(src)], **CONFIG}
    StageRunner(IngestStage(lake, config, "r1")).run(shard_group=(0, 3))  # then the launch was killed
    pointers = storage.join(lake.path("ingest", "plans"), "runs", "*.json")
    other = RunPlans(IngestStage(lake, config, "r0"))  # another run's pointer: kept
    storage.write_json(other.pointer_uri, {"plan": "x.json", "run_id": "r0"})
    assert len(storage.glob(pointers)) == 2
    (src / "011.jsonl").write_text(json.dumps({"text": "changed " + "words " * 20}) + "\n")

    IngestStage.new_launch(lake, "r1")
    assert storage.glob(pointers) == [other.pointer_uri]
    for i in range(3):
        StageRunner(IngestStage(lake, config, "r1")).run(shard_group=(i, 3))
    done = StageRunner(IngestStage(lake, config, "r1")).run(collect=True)
    assert done.status == "complete" and books_close(done.accounting)
    assert done.rows == FILES * 30 - 29


def test_a_backends_submit_is_a_new_launch(tmp_path):
    """``Backend.submit`` (attempt 1) runs the stage's ``new_launch`` before the job starts: the real local
    backend here, whose job then runs the whole stage."""
    from airflow_curation.backends.local import LocalBackend
    from airflow_curation.jobs.status import JobState

    src = _inputs(tmp_path / "in")
    lake = Lake(str(tmp_path / "lake"), "web")
    config = {"inputs": [str(src)], **CONFIG}
    StageRunner(IngestStage(lake, config, "r1")).run(shard_group=(0, 3))  # a killed launch's first task
    pointer = RunPlans(IngestStage(lake, config, "r1")).pointer_uri
    assert storage.exists(pointer)
    backend = LocalBackend(str(tmp_path / "jobs"), env={"PYTHONPATH": str(Path(ingest_stage.__file__).parents[3])})
    handle = backend.submit(JobSpec(stage="ingest", lake=lake.to_dict(), run_id="r1", config=config))
    assert not storage.exists(pointer)
    deadline = time.monotonic() + 300
    while not (st := backend.status(handle)).state.finished:
        assert time.monotonic() < deadline, st
        time.sleep(0.3)
    assert st.state == JobState.SUCCEEDED, backend.logs(handle)[0][-3000:]
    assert Manifest.read(lake.manifest_uri("r1", "ingest")).rows == FILES * 30
