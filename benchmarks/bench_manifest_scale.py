"""What one task of an array and one gate look cost as a run grows to 50,000 shards (issue 20, item 2: a task
reads only its slice), between two commits: by default main against this tree.

Each size gets a synthetic lake: a complete upstream manifest of S shards (URIs, checksums and two stages'
attrs, like a preprocess + quality run) and a complete downstream run of S units with one checkpoint record
each (the records written once per size; both manifests written again in each process by the code under
test, so each is in that code's format). Measured, in one process per code and round:

* **task plan**: what task ``i`` of an array over ``N`` groups does before its first unit: the units of its
  group (``AttrsStage.plan_group(i, N)``: since format 2 the upstream pages that hold them; a group is
  positions ``i::N`` in format 2's first version, a contiguous block (``group_range``) since; before format 2
  ``plan()[i::N]``, the whole upstream manifest). Also how many bytes of pages it read;
* **full read**: ``Manifest.read`` of the upstream manifest (both lists, what validate and reports read);
* **gate look**: ``CheckpointWatcher.look()`` of a fresh watcher on the finished run (a sensor's first
  look at a stage that has ended, and the trigger's last one after the final manifest is written);
* **gate look mid-run**: the same stage as a second run still going, half through each of 64 blocks (the
  driver writes the checkpoint records of those units only; the code under test writes the planned manifest
  and, where it has them, the 64 tasks' tallies): a fresh watcher's look (a poke in reschedule mode, a
  triggerer's first), and a kept watcher's next look after 64 more units ended (the trigger's steady look);
* **dedup task plan** (``--measures slice``): task ``i`` of ``N`` of dedup once its global phase is done (a
  rerun, a task that starts after the barrier): ``DedupStage.plan_group(i, N)`` over the same upstream, every
  shard with a real preprocess attrs file (its footer is read for the keep and cleaned-text columns). The
  global phase's ``_SUCCESS.json`` is left by a whole plan in each process (set-up, not timed) whose global
  phases are replaced by writing that file;
* **ingest guard** (``--measures slice``): the check of task ``i`` of ``N`` of an ingest run against an
  earlier complete ingest run of S units (``--replace``'s conflict check, no conflict): the whole check
  (``_guard_earlier_runs``) where the code has no per-group one, else ``_guard_group_only(units, i, N)``.
* **ingest task plan** (``--measures ingest-plan``): over S tiny input files on local disk (no manifests
  built), ``min_units`` = N (what an array launch sets): the *first* task's plan (group 0, no plan written yet:
  before, a listing; after, the listing, the plan's pages written and read back whole) and a later task's
  (``plan_group(i, N)``, not group 0, the plan written: before, a listing of every input; after, the run's
  pointer, the plan's head and the pages of its block).
* **validate task plan** (``--measures validate``): task ``i`` of ``N`` of validate's array (not group 0)
  up to its parts' shard entries: ``ValidateStage.plan_group(i, N)`` and each part's shards, once group 0's
  whole plan and planned manifest are written (set-up).
* **tokenize task plan** (``--measures plans``): task ``i`` of ``N`` of tokenize, an attrs stage whose plan
  asks of every shard of its block which upstream attrs hold ``keep``/``is_duplicate`` and the cleaned text:
  ``TokenizeStage.plan_group(i, N)`` over a complete dedup manifest of S shards, each with a real preprocess
  (``id, keep, clean_text``) and dedup (``id, is_duplicate``) attrs file. The upstream manifest is written by
  the code under test (set-up), with the columns in its entries where that code records them;
* **export task plan** (``--measures plans``): task ``i`` of ``N`` of export once the scatter is done (a rerun,
  a task that starts after the barrier): ``ExportStage.plan_group(i, N)`` over a complete tokenize manifest of
  S shards written by the code under test (set-up): its packed files in its head (``tokens.shards``) or in its
  shard entries, as that code writes them; the scatter's done mark left by a whole plan in the same process.
* **boilerplate task plan** (``--measures boilerplate``): task ``i`` of ``N`` of boilerplate once its global
  step is done (a rerun, a late task, or one that waited on the lease while another did the step):
  ``BoilerplateStage.plan_group(i, N)`` over a complete preprocess manifest of S shards whose attrs hold the
  cleaned text; the step's ``_SUCCESS.json`` left by a whole plan in the same process (set-up).

"Before" is the same script run against ``git archive`` of the base commit (``--base``); rounds alternate
before/after and the table gives medians with min-max over every sample.

Usage: ``python benchmarks/bench_manifest_scale.py [--sizes 1000,10000,50000] [--rounds 3] [--base main]
[--measures all|slice|gate|validate|ingest-plan] [--write-results]``; ``--render`` rewrites the RESULTS.md section from the JSON.
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
FP = "fp0123456789abcd"


# --- one measurement, in a process of the code under test --------------------------------------------------


def _build(root: Path, shards: int, records: bool):
    """The two manifests, written by the code under test; with ``records``, the checkpoint records too (plain
    writes: set-up, once per size, shared by both codes: the stage's fingerprint and units are the same)."""
    from airflow_curation.core.checkpoint import CheckpointRecord, CheckpointStore
    from airflow_curation.core.layout import Lake
    from airflow_curation.core.manifest import Manifest, ShardEntry, UnitEntry

    lake = Lake(str(root), "web", "2026-12-02")
    entries = []
    for i in range(shards):
        sid = f"part-{i:06d}"
        attrs = {st: lake.attrs_uri(st, sid, f"{st[:4]}0123456789ab") for st in ("preprocess", "quality")}
        entries.append(
            ShardEntry(
                shard_id=sid,
                uri=lake.shard_uri(sid),
                rows=25_000,
                bytes=512 << 20,
                checksum=f"xxh64:{i:016x}",
                unit_id=sid,
                attrs=attrs,
                attrs_checksums={st: f"xxh64:{i + 7:016x}" for st in attrs},
            )
        )
    up = Manifest(
        dataset="web",
        stage="quality",
        run_id="up",
        fingerprint=FP,
        lake=lake.to_dict(),
        units=[UnitEntry(s.shard_id, [s.uri, *s.attrs.values()], s.checksum, status="done") for s in entries],
        shards=entries,
        status="complete",
        accounting={"read": 25_000 * shards, "kept": 25_000 * shards},
    )
    up_uri = up.write(lake.manifest_uri("up", "quality"))
    # The downstream run: every unit checkpointed, its final manifest written.
    stage = _stage(lake, up_uri)
    units = [stage.unit_for(e.shard_id, e) for e in entries]  # what plan() gives, without reading it back
    store = CheckpointStore(lake.checkpoint_dir(stage.name, stage.fingerprint))
    os.makedirs(store.directory, exist_ok=True)
    outs = []
    for u, e in zip(units, entries):
        out = e.with_attrs(stage.name, lake.attrs_uri(stage.name, u.unit_id, stage.fingerprint), "xxh64:0")
        if records and _half_done_cached(shards)[len(outs)]:  # the mid-run look's; a final look reads the head
            rec = CheckpointRecord(
                unit_id=u.unit_id,
                stage=stage.name,
                fingerprint=stage.fingerprint,
                input_checksum=u.input_checksum,
                outputs=[out.__dict__],
                accounting={"read": e.rows, "kept": e.rows},
            )
            Path(store._uri(u.unit_id)).write_text(json.dumps(rec.__dict__))
        u.status = "done"
        outs.append(out)
    down = Manifest(
        dataset="web",
        stage=stage.name,
        run_id="r1",
        fingerprint=stage.fingerprint,
        lake=lake.to_dict(),
        units=units,
        shards=outs,
        status="complete",
        config={"input_manifest": up_uri},
        accounting={"read": 25_000 * shards, "kept": 25_000 * shards},
    )
    down.write(stage.manifest_uri)
    return lake, up_uri, stage.manifest_uri


MID_GROUPS = 64  # the running stage of the mid-run look: an array of 64 tasks, each half through its block


def _half_done(shards: int) -> list[bool]:
    """Which positions a run half through each of its :data:`MID_GROUPS` blocks has ended (tasks go in order)."""
    ended = [False] * shards
    for g in range(MID_GROUPS):
        start, stop = g * shards // MID_GROUPS, (g + 1) * shards // MID_GROUPS
        for i in range(start, start + (stop - start) // 2):
            ended[i] = True
    return ended


def _midrun(lake, up_uri: str, shards: int):
    """The same stage as a second run ``r2``, still going: its planned manifest (written by the code under
    test, with tallies where that code has them) over the same checkpoint records, of which the driver wrote
    those of :func:`_half_done`; the tasks' tallies for those, as each task would have left them."""
    from airflow_curation.core.manifest import Manifest

    stage = _stage(lake, up_uri)
    stage.run_id = "r2"
    from airflow_curation.core.manifest import ManifestHead

    units = ManifestHead.read(lake.manifest_uri("r1", stage.name)).units()
    for u in units:
        u.status = "pending"
    fields = Manifest.__dataclass_fields__
    extra = {"tallies": True} if "tallies" in fields else {}
    planned = Manifest(
        dataset="web",
        stage=stage.name,
        run_id="r2",
        fingerprint=stage.fingerprint,
        lake=lake.to_dict(),
        units=units,
        config={"input_manifest": up_uri},
        **extra,
    )
    uri = planned.write(lake.manifest_uri("r2", stage.name))
    writers = []
    if extra:
        from airflow_curation.core import tally

        shutil.rmtree(tally.folder(uri), ignore_errors=True)
        for g in range(MID_GROUPS):
            block = units[g * shards // MID_GROUPS : (g + 1) * shards // MID_GROUPS]
            writer = tally.TallyWriter(uri, stage.fingerprint, [u.unit_id for u in block])
            writer.ended({u.unit_id: tally.entry("done", _record(stage, u)) for u in block if _is_ended(u, shards)})
            writers.append(writer)
    return stage, units, uri, writers


def _is_ended(unit, shards: int) -> bool:
    return _half_done_cached(shards)[int(unit.unit_id.split("-")[1])]


_HALF: dict[int, list[bool]] = {}


def _half_done_cached(shards: int) -> list[bool]:
    if shards not in _HALF:
        _HALF[shards] = _half_done(shards)
    return _HALF[shards]


def _record(stage, unit) -> dict:
    """The checkpoint record of ``unit`` as :func:`_build` writes it (a dict)."""
    out = {"shard_id": unit.unit_id, "rows": unit.rows or 0, "bytes": 512 << 20}
    return {"outputs": [out], "accounting": {"read": unit.rows, "kept": unit.rows}}


def _undo(written: list[str], writers) -> None:
    """The units :func:`_end_more` ended are running again: their records and tally entries gone."""
    for path in written:
        os.remove(path)
    if writers:
        from airflow_curation.core import storage

        ids = [Path(p).name.removesuffix(".json") for p in written]
        for w in writers:
            chunks = {w._chunk[u] for u in ids if u in w._chunk}
            for u in ids:
                if u in w._chunk:
                    w._entries[w._chunk[u]].pop(u, None)
            for c in chunks:
                doc = {"fingerprint": w.fingerprint, "units": w._entries[c]}
                storage.write_json(f"{w.folder}/{w._names[c]}.json", doc)


def _end_more(stage, units, uri, writers, shards: int, n: int) -> list[str]:
    """``n`` more units end (the next ones in plan order): their records, and their tasks' tallies. Returns
    the record paths written (removed after the measurement: the records are shared by every process)."""
    from airflow_curation.core.checkpoint import CheckpointRecord, CheckpointStore

    ended = _half_done_cached(shards)
    todo = [u for i, u in enumerate(units) if not ended[i]][:n]
    store = CheckpointStore(stage.lake.checkpoint_dir(stage.name, stage.fingerprint))
    paths = []
    for u in todo:
        rec = CheckpointRecord(
            unit_id=u.unit_id,
            stage=stage.name,
            fingerprint=stage.fingerprint,
            input_checksum=u.input_checksum,
            outputs=[_record(stage, u)["outputs"][0] | {"uri": "x", "checksum": "xxh64:0"}],
            accounting={"read": u.rows, "kept": u.rows},
        )
        Path(store._uri(u.unit_id)).write_text(json.dumps(rec.__dict__))
        paths.append(store._uri(u.unit_id))
    if writers:
        from airflow_curation.core import tally

        for w in writers:  # each unit in its own task's tally
            w.ended({u.unit_id: tally.entry("done", _record(stage, u)) for u in todo if u.unit_id in w._chunk})
    return paths


def _stage(lake, up_uri):
    from airflow_curation.stages.attrs import AttrsStage

    class Downstream(AttrsStage):
        name = "enrich"

    return Downstream(lake, {"input_manifest": up_uri, "stream": False}, "r1")


def _task_plan(stage, index: int, count: int):
    plan_group = getattr(stage, "plan_group", None)
    return plan_group(index, count) if plan_group else stage.plan()[index::count]


def worker(root: Path, shards: int, groups: list[int], reps: int, measures: str = "all") -> dict:
    from airflow_curation.core.manifest import Manifest

    if measures in ("plans", "boilerplate"):  # a lake of its own (the driver's files under root/plans)
        out: dict[str, list[float]] = {}
        cpu: dict[str, list[float]] = {}
        read_bytes: dict[str, int] = {}

        def timed_plans(key, fn, n=reps):
            for _ in range(n):
                gc.collect()
                started, started_cpu = time.perf_counter(), time.process_time()
                got = fn()
                out.setdefault(key, []).append(time.perf_counter() - started)
                cpu.setdefault(key, []).append(time.process_time() - started_cpu)
            return got

        measure = _boilerplate_measures if measures == "boilerplate" else _plans_measures
        size = measure(root, shards, groups, reps, timed_plans, read_bytes)
        return {"shards": shards, "seconds": out, "cpu": cpu, "manifest_json_bytes": size, "read_bytes": read_bytes}
    if measures != "ingest-plan":
        lake, up_uri, down_uri = _build(root, shards, records=False)
    ids = {f"part-{i:06d}" for i in range(shards)}
    out: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}  # CPU seconds of the same samples (wall time queues on a loaded machine)
    read_bytes: dict[str, int] = {}

    def timed(key, fn, n=reps):
        for _ in range(n):
            # The set-up's garbage (a whole plan's objects, in the same process) is not the sample's to collect.
            gc.collect()
            started, started_cpu = time.perf_counter(), time.process_time()
            result = fn()
            out.setdefault(key, []).append(time.perf_counter() - started)
            cpu.setdefault(key, []).append(time.process_time() - started_cpu)
        return result

    def result() -> dict:
        size = os.path.getsize(up_uri) if measures != "ingest-plan" else 0
        return {"shards": shards, "seconds": out, "cpu": cpu, "manifest_json_bytes": size, "read_bytes": read_bytes}

    if measures == "ingest-plan":
        _ingest_plan_measures(root, shards, groups, reps, timed, read_bytes)
        return result()
    if measures == "slice":
        _slice_measures(lake, up_uri, shards, groups, reps, timed, read_bytes)
        return result()
    if measures == "gate":
        _gate_measures(lake, up_uri, down_uri, shards, reps, timed)
        return result()
    if measures == "validate":
        _validate_measures(lake, up_uri, groups, reps, timed, read_bytes)
        return result()

    for n in groups:
        count = min(n, shards)
        index = count // 2 + 1 if count > 2 else 0  # a group in the middle, never group 0
        read_bytes[f"task_plan_N{n}"] = _counting_pages()
        # One group is the whole plan (as long as a full read): one sample a process.
        plan = lambda c=count, i=index: _task_plan(_stage(lake, up_uri), i, c)  # noqa: E731
        samples = reps if count > 1 else 1
        units = timed(f"task_plan_N{n}", plan, samples)
        read_bytes[f"task_plan_N{n}"] = (_counting_pages() - read_bytes[f"task_plan_N{n}"]) // samples
        # Both codes' groups (positions i::N, or a block) hold the same number of units, all from the plan.
        assert len(units) in (shards // count, -(-shards // count)), (len(units), shards, count)
        assert {u.unit_id for u in units} <= ids
    full = timed("full_read", lambda: Manifest.read(up_uri), 1)
    assert len(full.shards) == shards
    _gate_measures(lake, up_uri, down_uri, shards, reps, timed)
    return result()


def _gate_measures(lake, up_uri: str, down_uri: str, shards: int, reps: int, timed) -> None:
    """A gate's looks: at the ended run, and at a run half through each of its 64 blocks (fresh, next)."""
    from airflow_curation.jobs.progress import CheckpointWatcher

    look = timed("gate_look", lambda: CheckpointWatcher(down_uri).look())
    assert look.done == look.total == shards and look.complete and not look.books, look
    # While the run goes: half of each of 64 blocks ended. A fresh watcher's look (a poke in reschedule mode,
    # a triggerer's first), and a kept watcher's next look once 64 more units have ended (the trigger's).
    stage, units, mid_uri, writers = _midrun(lake, up_uri, shards)
    half = sum(_half_done_cached(shards))
    fresh = timed("gate_look_midrun_fresh", lambda: CheckpointWatcher(mid_uri).look())
    assert (fresh.done, fresh.total, fresh.manifest_status) == (half, shards, "planned"), fresh
    for _ in range(reps):
        watcher = CheckpointWatcher(mid_uri)
        watcher.look()
        written = _end_more(stage, units, mid_uri, writers, shards, 64)
        nxt = timed("gate_look_midrun_next", watcher.look, 1)
        assert nxt.done == half + 64 and len(watcher.new_units) == 64, nxt
        _undo(written, writers)


def _middle(n: int, shards: int) -> tuple[int, int]:
    count = min(n, shards)
    return (count // 2 + 1 if count > 2 else 0), count  # a group in the middle, never group 0


def _slice_measures(lake, up_uri: str, shards: int, groups: list[int], reps: int, timed, read_bytes) -> None:
    """A dedup task's plan after the global phase, and an ingest task's check against an earlier run."""
    from airflow_curation.core import storage
    from airflow_curation.stages.dedup.stage import DedupStage

    config = {"input_manifest": up_uri}
    real = DedupStage._global_phases

    def globals_done(self, sig, params, shards_, run_key, out_parts, *lease):  # set-up: the barrier as done
        uri = self.lake.path("dedup", run_key, "_SUCCESS.json")
        if not storage.exists(uri):
            doc = {"labels": [], "exact": [], "gathered": True, "out_partitions": out_parts, "units": 1}
            storage.write_json(uri, doc | {"partitions": params.partitions})
        real(self, sig, params, shards_, run_key, out_parts, *lease)

    DedupStage._global_phases = globals_done
    try:
        DedupStage(lake, config, "r3").plan()  # the whole plan, as group 0 ran it
    finally:
        DedupStage._global_phases = real
    for n in groups:
        index, count = _middle(n, shards)
        key = f"dedup_plan_N{n}"
        before = _counting_pages()
        samples = reps if count > 1 else 1
        units = timed(key, lambda c=count, i=index: DedupStage(lake, config, "r3").plan_group(i, c), samples)
        read_bytes[key] = (_counting_pages() - before) // samples
        assert len(units) in (shards // count, -(-shards // count)), (len(units), shards, count)
    # Ingest: an earlier complete run of S units, and this run's plan (the same units: no conflict).
    from airflow_curation.core.manifest import Manifest, ShardEntry, UnitEntry, group_range
    from airflow_curation.stages.ingest.stage import IngestStage

    stage = IngestStage(lake, {"inputs": [str(lake.root)]}, "r5")
    units = [UnitEntry(f"{i:05d}", [f"/raw/{i:06d}.jsonl"], f"xxh64:{i:016x}", status="done") for i in range(shards)]
    earlier = Manifest(
        dataset=lake.dataset,
        stage="ingest",
        run_id="r4",
        fingerprint=stage.fingerprint,
        lake=lake.to_dict(),
        units=units,
        shards=[
            ShardEntry(
                f"part-{u.unit_id}-000", lake.shard_uri(f"part-{u.unit_id}-000"), 1000, 1 << 20, "xxh64:0", u.unit_id
            )
            for u in units
        ],
        status="complete",
    )
    earlier.write(lake.manifest_uri("r4", "ingest"))
    plan = [UnitEntry(u.unit_id, u.inputs, u.input_checksum) for u in units]
    per_group = getattr(stage, "_guard_group_only", None)
    shared = None
    if per_group is not None and "plan" in inspect.signature(per_group).parameters:
        # Since the plan is listed once per run (ingest/plans.py): the check takes the task's block of it.
        from airflow_curation.stages.ingest.plans import RunPlans

        shared = RunPlans(stage).publish(plan, "/raw")
    for n in groups:
        index, count = _middle(n, shards)
        key = f"ingest_guard_N{n}"
        before = _counting_pages()
        if shared is not None and count > 1:
            block = group_range(shards, index, count)
            check = lambda c=count, i=index, b=block: per_group(plan[b.start : b.stop], b, shared, i, c)  # noqa: E731
        elif per_group is not None and count > 1:
            check = lambda c=count, i=index: per_group(plan, i, c)  # noqa: E731
        else:
            check = lambda: stage._guard_earlier_runs(plan)  # noqa: E731
        samples = reps if count > 1 or per_group is not None else 1
        timed(key, check, samples)
        read_bytes[key] = (_counting_pages() - before) // samples
        assert stage.supersedes == ()


INGEST_FILES_PER_FOLDER = 1000


def _raw_inputs(root: Path, files: int) -> Path:
    """``files`` tiny JSONL files (one document each) in folders of 1,000: what ingest lists (set-up, once
    per size, shared by both codes)."""
    raw = root / "raw"
    for i in range(files):
        folder = raw / f"{i // INGEST_FILES_PER_FOLDER:04d}"
        if i % INGEST_FILES_PER_FOLDER == 0:
            folder.mkdir(parents=True)
        (folder / f"{i:06d}.jsonl").write_text(json.dumps({"text": f"document {i}"}) + "\n")
    return raw


def _ingest_plan_measures(root: Path, files: int, groups: list[int], reps: int, timed, read_bytes) -> None:
    """An ingest array's task plans over ``files`` inputs: the first task's (group 0, nothing planned yet) and a
    later one's (group ``i`` of ``N``, not 0). Each process starts from no plan (the plans folder removed)."""
    from airflow_curation.core.layout import Lake
    from airflow_curation.core.manifest import group_range
    from airflow_curation.stages.ingest.stage import IngestStage

    lake = Lake(str(root / "lake"), "web", "2026-12-02")
    plans = Path(lake.path("ingest", "plans"))
    shutil.rmtree(plans, ignore_errors=True)
    for n in groups:
        index, count = _middle(n, files)
        config = {"inputs": [str(root / "raw")], "min_units": count}  # what an array launch over N tasks sets

        def first(c=count) -> list:
            shutil.rmtree(plans, ignore_errors=True)  # no task has planned yet: this one lists
            stage = IngestStage(lake, config, "ri")
            stage.shard_group = (0, c)
            return stage.plan()

        key = f"ingest_first_N{n}"
        before = _counting_pages()
        units = timed(key, first)  # the last sample's plan stays: what the later task reads
        read_bytes[key] = (_counting_pages() - before) // reps
        assert len(units) >= count, (len(units), count)
        key = f"ingest_plan_N{n}"
        before = _counting_pages()
        mine = timed(key, lambda c=count, i=index: IngestStage(lake, config, "ri").plan_group(i, c))
        read_bytes[key] = (_counting_pages() - before) // reps
        block = group_range(len(units), index, count)
        assert [u.input_checksum for u in mine] == [units[k].input_checksum for k in block]


def _validate_measures(lake, up_uri: str, groups: list[int], reps: int, timed, read_bytes) -> None:
    """A validate part task (group ``i`` of ``N``, not group 0) up to its parts' shard entries: its plan
    (``plan_group``) and each part's shards (``_unit_shards`` since issue 20 item 2; ``_slice`` of the input
    manifest before). Set-up, not timed: group 0's whole plan and the planned manifest it writes, by the code
    under test. Each sample is a fresh process's: the manifest cache is cleared first."""
    from airflow_curation.core.manifest import Manifest
    from airflow_curation.stages.validate import stage as vmod

    config = {"input_manifest": up_uri}
    group0 = vmod.ValidateStage(lake, config, "rv")
    group0.shard_group = (0, 2)  # an array's group 0: it leaves what the other tasks plan from
    units = group0.plan()
    Manifest(
        dataset=lake.dataset,
        stage=group0.name,
        run_id="rv",
        fingerprint=group0.fingerprint,
        lake=lake.to_dict(),
        units=units,
        config=dict(group0.config),
    ).write(group0.manifest_uri)

    def task(index: int, count: int) -> list:
        vmod._read_cached.cache_clear()
        stage = vmod.ValidateStage(lake, config, "rv")
        stage.shard_group = (index, count)
        mine = stage.plan_group(index, count)
        if hasattr(stage, "_unit_shards"):
            return [s for u in mine for s in stage._unit_shards(u)[0]]
        m = stage.input_manifest()
        return [m.shards[i] for u in mine for i in stage._slice(m, u.unit_id)]

    for n in groups:
        count = min(n, len(units))
        index = count // 2 + 1 if count > 2 else 0 if count == 1 else 1  # never group 0 (which plans whole)
        key = f"validate_plan_N{n}"
        before = _counting_pages()
        shards = timed(key, lambda c=count, i=index: task(i, c), reps)
        read_bytes[key] = (_counting_pages() - before) // reps
        assert shards and all(s.rows == 25_000 for s in shards), len(shards)


PLANS_FP = {"preprocess": "prep0123456789ab", "dedup": "dedu0123456789ab"}


def _plans_files(root: Path, shards: int) -> None:
    """The driver's set-up for ``--measures plans`` (shared by both codes): a real preprocess attrs file
    (``id, keep, clean_text``) and dedup attrs file (``id, is_duplicate``) for every shard (one file each,
    linked under every name), and a two-token tokenizer file."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer, models

    sys.path.insert(0, str(REPO))
    from airflow_curation.core.layout import Lake

    lake = Lake(str(root / "plans"), "web", "2026-12-02")
    tables = {
        "preprocess": pa.table({"id": ["d0"], "keep": [True], "drop_reason": [None], "clean_text": ["a"]}),
        "dedup": pa.table({"id": ["d0"], "is_duplicate": [False], "cluster_id": ["d0"]}),
    }
    for stage, table in tables.items():
        first = Path(lake.attrs_uri(stage, "part-000000", PLANS_FP[stage]))
        first.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, first)
        for i in range(1, shards):
            os.link(first, first.parent / f"part-{i:06d}.parquet")
    Tokenizer(models.WordLevel({"<|endoftext|>": 0, "a": 1}, unk_token="a")).save(str(root / "plans" / "tok.json"))


def _plans_upstream(lake, shards: int, stage: str, attrs_stages: tuple[str, ...]) -> tuple[str, list]:
    """A complete ``stage`` manifest of ``shards`` shards over the driver's attrs files of ``attrs_stages`` (set-up,
    written in the format of the code under test: each entry's attrs columns where that code records them).
    Returns its URI and its shard entries."""
    import pyarrow.parquet as pq

    from airflow_curation.core.manifest import Manifest, ShardEntry, UnitEntry

    fields = ShardEntry.__dataclass_fields__
    columns = {st: pq.read_schema(lake.attrs_uri(st, "part-000000", PLANS_FP[st])).names for st in attrs_stages}
    extra = {"attrs_columns": columns} if "attrs_columns" in fields else {}  # as that code's writers record
    entries = []
    for i in range(shards):
        sid = f"part-{i:06d}"
        attrs = {st: lake.attrs_uri(st, sid, PLANS_FP[st]) for st in attrs_stages}
        entries.append(
            ShardEntry(
                shard_id=sid,
                uri=lake.shard_uri(sid),
                rows=25_000,
                bytes=512 << 20,
                checksum=f"xxh64:{i:016x}",
                unit_id=sid,
                attrs=attrs,
                attrs_checksums={st: f"xxh64:{i + k:016x}" for k, st in enumerate(attrs, 7)},
                **extra,
            )
        )
    units = [UnitEntry(s.shard_id, [s.uri, *s.attrs.values()], s.checksum, status="done") for s in entries]
    up = Manifest("web", stage, "up", FP, lake.to_dict(), units=units, shards=entries, status="complete")
    return up.write(lake.manifest_uri("up", stage)), entries


def _plans_measures(root: Path, shards: int, groups: list[int], reps: int, timed, read_bytes) -> int:
    """A tokenize task's plan and an export task's plan (scatter done) at ``shards`` shards, each manifest
    written in the format of the code under test (set-up). Returns the tokenize manifest head's bytes."""

    from airflow_curation.core import storage
    from airflow_curation.core.layout import Lake
    from airflow_curation.core.manifest import Manifest, ShardEntry, UnitEntry
    from airflow_curation.stages.export.stage import ExportStage
    from airflow_curation.stages.tokenize.stage import TokenizeStage

    lake = Lake(str(root / "plans"), "web", "2026-12-02")
    fields = ShardEntry.__dataclass_fields__
    up_uri, entries = _plans_upstream(lake, shards, "dedup", tuple(PLANS_FP))
    config = {"input_manifest": up_uri, "tokenizer": str(root / "plans" / "tok.json"), "seq_len": 2048}
    for n in groups:
        index, count = _middle(n, shards)
        key = f"tokenize_plan_N{n}"
        before = _counting_pages()
        plan = lambda c=count, i=index: TokenizeStage(lake, config, "rt").plan_group(i, c)  # noqa: E731
        got = timed(key, plan, reps)
        read_bytes[key] = (_counting_pages() - before) // reps
        assert len(got) in (shards // count, -(-shards // count)) and len(got[0].inputs) == 3, (len(got), got[0])
    # The tokenize run: 4,000 sequences of 2,048 tokens a shard, its packed files where that code lists them.
    per_shard = {"documents": 9_000, "repeats": 0, "tokens": 8_100_000, "doc_tokens": 8_091_000}
    per_shard |= {"sequences": 4_000, "padding": 92_000}
    old = "files" not in fields
    tok_shards, packed = [], {}
    for e in entries:
        uri, checksum = lake.path("packed", FP, f"{e.shard_id}.parquet"), f"xxh64:{int(e.shard_id[5:]) + 3:016x}"
        tok_shards.append(e.with_attrs("tokenize", lake.attrs_uri("tokenize", e.shard_id, FP), "xxh64:0"))
        if old:
            packed[e.shard_id] = {**per_shard, "packed_uri": uri, "packed_checksum": checksum}
        else:
            tok_shards[-1].files = {"packed": {"uri": uri, "checksum": checksum, "bytes": 300 << 20}}
    totals = {k: v * shards for k, v in per_shard.items()}
    tokens = {**totals, "seq_len": 2048, "eos_id": 0, "pad_id": 0, "tokenizer_checksum": "xxh64:0", "by_source": {}}
    tokens |= {"shards": packed} if old else {}
    tok = Manifest(
        "web",
        "tokenize",
        "tok",
        FP,
        lake.to_dict(),
        units=[UnitEntry(e.shard_id, [e.uri], e.checksum, status="done") for e in entries],
        shards=tok_shards,
        status="complete",
        config={"input_manifest": up_uri, "tokens": tokens},
    )
    tok_uri = tok.write(lake.manifest_uri("tok", "tokenize"))
    # the middle pass off: it would merge the spill files during the plan, which this set-up only marks as done
    export_config = {"input_manifest": tok_uri, "vocab_size": 50_000, "file_size": 1 << 30, "spill_merge": "off"}
    real = ExportStage._scatter

    def scatter_done(self, scatter, run_key, group):  # set-up: the scatter's done mark, as a whole run leaves it
        done = storage.join(self.lake.path("export", scatter.fingerprint, "spill"), "_done", f"{run_key}.json")
        storage.write_json(done, {"run_key": run_key, "shards": shards})

    ExportStage._scatter = scatter_done
    try:
        ExportStage(lake, dict(export_config), "rx").plan()
    finally:
        ExportStage._scatter = real
    for n in groups:
        index, count = _middle(n, shards)
        key = f"export_plan_N{n}"
        before = _counting_pages()
        timed(key, lambda c=count, i=index: ExportStage(lake, dict(export_config), "rx").plan_group(i, c), reps)
        read_bytes[key] = (_counting_pages() - before) // reps
    return os.path.getsize(tok_uri)


def _boilerplate_measures(root: Path, shards: int, groups: list[int], reps: int, timed, read_bytes) -> int:
    """A boilerplate task's plan once the global step is done (a rerun, a task that starts after the barrier,
    or one that waited on the lease while another did the step) over a complete upstream manifest of S shards
    whose preprocess attrs hold the cleaned text. The step's ``_SUCCESS.json`` is left by a whole plan in each
    process (set-up, not timed) whose global step is replaced by writing that file. Returns the manifest's
    bytes."""
    from airflow_curation.core import storage
    from airflow_curation.core.layout import Lake
    from airflow_curation.stages.boilerplate.stage import BoilerplateStage

    lake = Lake(str(root / "plans"), "web", "2026-12-02")
    up_uri, _ = _plans_upstream(lake, shards, "preprocess", ("preprocess",))
    config = {"input_manifest": up_uri}
    real = BoilerplateStage._global_step

    def step_done(self, counts, shards_, run_key, *rest):  # set-up: the global step as done
        uri = self.lake.path("boilerplate", run_key, "_SUCCESS.json")
        if not storage.exists(uri):
            doc = {"frequent": [], "partitions": 1, "distinct_lines": 0, "frequent_lines": 0}
            storage.write_json(uri, doc | {"frequent_line_docs": 0})
        return real(self, counts, shards_, run_key, *rest)

    BoilerplateStage._global_step = step_done
    try:
        BoilerplateStage(lake, dict(config), "rb").plan()  # the whole plan, as group 0 ran it
        for n in groups:
            index, count = _middle(n, shards)
            key = f"boilerplate_plan_N{n}"
            before = _counting_pages()
            plan = lambda c=count, i=index: BoilerplateStage(lake, dict(config), "rb").plan_group(i, c)  # noqa: E731
            got = timed(key, plan, reps)
            read_bytes[key] = (_counting_pages() - before) // reps
            assert len(got) in (shards // count, -(-shards // count)) and len(got[0].inputs) == 2, (len(got), got[0])
    finally:
        BoilerplateStage._global_step = real
    return os.path.getsize(up_uri)


_PAGE_BYTES = [0]


def _counting_pages() -> int:
    """Bytes of manifest pages read so far in this process (0 where the code has no pages)."""
    import airflow_curation.core.manifest as mod

    real = getattr(mod, "_read_ranges", None)
    if real is not None and not getattr(real, "counted", False):

        def counted(url, ranges, manifest_uri):
            out = real(url, ranges, manifest_uri)
            _PAGE_BYTES[0] += sum(len(b) for b in out)
            return out

        counted.counted = True
        mod._read_ranges = counted
    return _PAGE_BYTES[0]


# --- the driver ---------------------------------------------------------------------------------------------


def _base_tree(base: str) -> Path:
    tree = Path(tempfile.mkdtemp(prefix="bench-manifest-base-"))
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", base, "airflow_curation"], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree


def _preprocess_attrs(root: Path, shards: int) -> None:
    """A real preprocess attrs file (``id``, ``keep``) for every shard: one file, linked under each name."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sys.path.insert(0, str(REPO))
    from airflow_curation.core.layout import Lake

    lake = Lake(str(root), "web", "2026-12-02")
    first = Path(lake.attrs_uri("preprocess", "part-000000", "prep0123456789ab"))
    first.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": ["d0"], "keep": [True]}), first)
    for i in range(1, shards):
        os.link(first, first.parent / f"part-{i:06d}.parquet")


def _run(code: Path, root: Path, shards: int, groups: list[int], reps: int, measures: str = "all") -> dict:
    env = {**os.environ, "PYTHONPATH": str(code)}
    cmd = [sys.executable, "-P", __file__, "--worker", str(shards), "--root", str(root), "--measures", measures]
    cmd += ["--groups", ",".join(map(str, groups))]
    proc = subprocess.run([*cmd, "--reps", str(reps)], env=env, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,50000")
    ap.add_argument("--groups", default="64,1000,50000", help="array sizes N (capped at the shard count)")
    ap.add_argument("--rounds", type=int, default=3, help="before/after processes per size, alternated")
    ap.add_argument("--reps", type=int, default=1, help="samples per measurement in each process (1 for reads of all)")
    ap.add_argument("--base", default="main", help="the commit measured as 'before'")
    ap.add_argument(
        "--measures",
        default="all",
        choices=("all", "slice", "gate", "validate", "ingest-plan", "plans", "boilerplate"),
        help="slice: dedup's and ingest's task plans; gate: the gate's looks only; validate: a validate part "
        "task's plan; ingest-plan: an ingest array's task plans over S input files; plans: a tokenize task's and "
        "an export task's plans; boilerplate: a boilerplate task's plan",
    )
    ap.add_argument("--key", help="the run's key in the JSON (default: the measures); earlier runs are kept")
    ap.add_argument("--write-results", action="store_true")
    ap.add_argument("--render", action="store_true", help="rewrite the RESULTS.md section from the committed JSON")
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    args = ap.parse_args()
    groups = [int(g) for g in args.groups.split(",")]
    if args.worker:
        print(json.dumps(worker(Path(args.root), args.worker, groups, args.reps, args.measures)))
        return
    if args.render:
        _render(json.loads(RESULT_JSON.read_text()))
        return
    base_commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", args.base], capture_output=True, text=True, check=True
    ).stdout.strip()
    head_commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    base = _base_tree(args.base)
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    load = [os.getloadavg()[0]]
    samples: dict[int, dict[str, dict[str, list[float]]]] = {}
    cpu: dict[int, dict[str, dict[str, list[float]]]] = {}
    reads: dict[int, dict[str, dict[str, int]]] = {}  # pages bytes a task read (the same every round)
    try:
        for shards in (int(s) for s in args.sizes.split(",")):
            per = samples.setdefault(shards, {"before": {}, "after": {}})
            per_cpu = cpu.setdefault(shards, {"before": {}, "after": {}})
            root = Path(tempfile.mkdtemp(prefix="bench-manifest-"))
            if args.measures in ("plans", "boilerplate"):
                _plans_files(root, shards)
            elif args.measures == "ingest-plan":
                _raw_inputs(root, shards)
            else:
                _preprocess_attrs(root, shards)  # every stage's plan reads their footers (cleaned text: issue 23)
                _build(root, shards, records=True)
            for _ in range(args.rounds):
                for label, code in (("before", base), ("after", REPO)):
                    res = _run(code, root, shards, groups, args.reps, args.measures)
                    reads.setdefault(shards, {})[label] = res["read_bytes"]
                    for key, values in res["seconds"].items():
                        per[label].setdefault(key, []).extend(values)
                    for key, values in res.get("cpu", {}).items():
                        per_cpu[label].setdefault(key, []).extend(values)
                    load.append(os.getloadavg()[0])
                    got = ", ".join(f"{k} {statistics.median(v):.4f}" for k, v in res["seconds"].items())
                    print(f"{shards} {label}: {got}", file=sys.stderr)
            shutil.rmtree(root, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)

    run = {
        "command": f"--sizes {args.sizes} --groups {args.groups} --rounds {args.rounds} --reps {args.reps} "
        f"--base {args.base} --measures {args.measures}" + (f" --key {args.key}" if args.key else ""),
        "groups": groups,
        "rounds": args.rounds,
        "reps": args.reps,
        "base": base_commit,
        "head": head_commit,
        "started": started,
        "load": load,
        "samples": samples,
        "cpu": cpu,
        "read_bytes": reads,
    }
    print("\n".join(_table(run)))
    if args.write_results:
        data = json.loads(RESULT_JSON.read_text()) if RESULT_JSON.exists() else {"runs": {}}
        data["runs"][args.key or args.measures] = json.loads(json.dumps(run))  # int keys as the JSON has them
        RESULT_JSON.parent.mkdir(exist_ok=True)
        RESULT_JSON.write_text(json.dumps(data, indent=1) + "\n")
        _render(data)


RESULT_JSON = HERE / "results" / "manifest_scale.json"
_NAMES = {
    "full_read": "full manifest read",
    "gate_look": "gate look (run ended)",
    "gate_look_midrun_fresh": "gate look, run half done, fresh watcher",
    "gate_look_midrun_next": "gate look, run half done, next look after 64 more units",
}
_PREFIXES = {
    "task_plan": "task plan",
    "dedup_plan": "dedup task plan",
    "ingest_guard": "ingest task's check of an earlier run",
    "validate_plan": "validate part task's plan and its parts' shards",
    "ingest_first": "ingest first task's plan (group 0: lists; after: and writes the plan)",
    "ingest_plan": "ingest later task's plan (not group 0)",
    "tokenize_plan": "tokenize task's plan (an attrs stage)",
    "export_plan": "export task's plan, scatter done",
    "boilerplate_plan": "boilerplate task's plan, global step done",
}


def _table(run: dict) -> list[str]:
    """The markdown table of one run of the driver (as the JSON holds it)."""

    def cell(values: list[float]) -> str:
        return f"{statistics.median(values) * 1000:.1f} ({min(values) * 1000:.1f}-{max(values) * 1000:.1f})"

    groups = run["groups"]
    keys = [f"{p}_N{n}" for p in _PREFIXES for n in groups] + list(_NAMES)
    names = dict(_NAMES) | {f"{p}_N{n}": f"{name}, N={n} groups" for p, name in _PREFIXES.items() for n in groups}
    load = run["load"]
    cpu = run.get("cpu")  # CPU time of the same samples (runs from before it was recorded have none)
    lines = [
        f"Before: {run['base']}; after: {run['head']}. {run['rounds']} rounds alternated, "
        f"{run['reps']} sample(s) each; load average {min(load):.1f}-{max(load):.1f} (2 cores).",
        "",
        "| shards | measure | before ms, median (min-max) | after ms, median (min-max) | before / after "
        "| pages read, before / after |" + (" CPU ms, before / after (medians) |" if cpu else ""),
        "| --- | --- | --- | --- | --- | --- |" + (" --- |" if cpu else ""),
    ]
    for shards, per in run["samples"].items():
        for key in keys:
            b, a = per["before"].get(key), per["after"].get(key)
            if not (b and a) or ("_N" in key and int(key.split("_N")[1]) > int(shards)):
                continue
            ratio = statistics.median(b) / statistics.median(a)
            got = [
                run["read_bytes"].get(str(shards), run["read_bytes"].get(shards, {})).get(x, {}).get(key)
                for x in ("before", "after")
            ]
            kb = " / ".join(f"{g / 1024:.0f} KB" for g in got) if None not in got else ""
            row = f"| {shards} | {names[key]} | {cell(b)} | {cell(a)} | {ratio:.1f}x | {kb} |"
            if cpu:
                per_cpu = cpu.get(str(shards)) or cpu.get(int(shards)) or {}
                c = [per_cpu.get(x, {}).get(key) for x in ("before", "after")]
                row += " " + " / ".join(f"{statistics.median(v) * 1000:.1f}" if v else "-" for v in c) + " |"
            lines.append(row)
    return lines


_NOTES = {
    "all": """Before (`30a2c30`): a gate's look at a running stage listed the checkpoint folder every look, and a fresh
watcher (a poke in reschedule mode, a triggerer's first look) read the unit pages and read and verified every
record written so far; after: the tasks write tallies (`core/tally.py`: one file per 64 units of a task, as
each unit ends) and a look lists them (~830 files at 50,000 units over 64 tasks) and reads those that changed.
**Mid-run at 50,000 units, half done: a fresh look 42.6 s -> 3.0 s wall, the next look after 64 more units
2.6 s -> 68 ms (39x).** The machine was at load 8-18 on 2 cores (other helpers' suites), so wall times are
several times CPU time; CPU time of the same looks (`process_time`, one process per code, 3 samples, load
~15, `/tmp` script over the bench's `_build`/`_midrun`/`_end_more`): **after, a fresh look 0.23 s CPU
(wall 1.0-2.4 s here), the next look 0.010 s CPU (wall 0.10-0.14 s)**; before, 5.49-5.70 s and 0.34-0.44 s CPU
(wall 52-63 s and 3.3-3.8 s at load ~20): 24x and 34x less CPU. So the goal (a
look < 1 s at 50,000 units while the run goes) is met in CPU, and in wall on this machine for the steady
look; a fresh look's wall here is I/O and queueing for the CPU on a loaded 2-core box. The other rows are
the same code before and after (task plans, full read, the ended run's look): their differences are the
load's (they ran interleaved with the mid-run looks).""",
    "slice": """Before: dedup's `plan_group` was its whole plan sliced (every upstream page, two footer reads of every
shard's preprocess attrs, the run key over every shard), and an ingest task other than group 0 read every
earlier ingest manifest whole for its `--replace` check. After: once the global phase of a plan is done,
a dedup task plans its block from the upstream pages that hold it and the run key the whole plan left
(`dedup/plans/<key>.json`, named by phase 1's fingerprint and the upstream head's page checksums), and an
ingest task checks each earlier run's head and its unit pages at the task's positions (a conflict under
`--replace` still runs the whole check, which supersedes). Ingest's plan itself still lists every input
file (the grouping of files into units depends on all of them): not measured here.

Run 2026-12-03 02:23-03:16 UTC: round 1 at load 13-20 (other helpers' suites), round 2 at load ~5, so each
median is the mean of a loaded and a quieter sample; the quieter round alone (the min column): **a dedup
task's plan 44.0 s -> 40.5 ms at N=1000 (50 shards a task) and 3.8 ms at N=50,000; an ingest task's check
3.8-4.0 s -> 33 ms (N=1000) and 30 ms (N=50,000)**: under the 50 ms goal at N=1000 and N=50,000. At N=64
(781 shards a task) dedup takes 441 ms, O(its shards) but two Parquet footer reads per shard (keep and
cleaned-text columns of its preprocess attrs), and ingest 60 ms. Wall time, one sample per process: not yet CPU time. Left: the ingest check still builds
a set of the whole plan in memory (O(S), no I/O), and validate still reads whole manifests per process.""",
    "slice-footers": """Before (main): a dedup task's plan after the global phase opened two Parquet footers per shard of its
block (does preprocess's attrs have the keep column? which attrs hold the cleaned text?): 781 shards and
1,562 footers at N=64. After: the whole plan records which attrs each shard reads beside the run key
(`dedup/plans/<key>.json`, as runs of shards with the same answer: one run here), and a group task decodes
its block's from it and opens no footer. Wall at load 5.5-12.6 (other helpers' suites, 2 cores), one sample
per process; CPU time of the same samples in the last column: **dedup N=64: 390 -> 47 ms CPU (458/323 ->
50/45), wall 471-1299 -> 197-199 ms**. The ingest rows are the same code before and after (load). The CPU
of the N=64 plan varied with when the collector ran over the set-up's garbage (a whole 50,000-shard plan in
the same process: 14-86 ms in a profile), so the next run collects it before each sample.""",
    "slice-footers-gc": """The same as `slice-footers`, the set-up's garbage collected before each sample, at load 5.1-8.7: **a
dedup task's plan at N=64 (781 shards) 295-509 -> 47-49 ms CPU, wall 565-1,224 -> 75-150 ms; at N=1000
17-29 -> 3.7 ms CPU**. That is the first plan in a process, as a task makes it; a profile of a third one in
the same process took 14 ms CPU (lazy imports and first-use caches are in the first). Under the 50 ms goal
in CPU, just, at N=64; its wall here is the load's (2 cores shared). What is left per task is O(its
shards): its pages (402 KB at N=64), their URIs resolved, a dict per shard. The ingest rows are the same
code before and after.""",
    "gate-midrun": """The gate's looks alone (`--measures gate`), 3 samples per process: the gate code is the same before and
after (this branch changes no look), so the two columns are two samples of one code at load 5.2-9.4 on 2
cores. **A fresh look at 50,000 units half done: 275-362 ms CPU (medians), wall 239-1,762 ms; the next look
after 64 more units: 10-14 ms CPU, wall 17-63 ms; a look at the ended run: 1.5-1.7 ms.** So the goal (a
look < 1 s) holds in CPU for every look and in wall for the steady look; a fresh look (a poke in reschedule
mode, a triggerer's first) reads every tally file (~830 here: 13 a task) and decodes the ended units'
entries, O(ended units) once per watcher, and its wall time passes 1 s when the machine is loaded. A kept
watcher's look lists the tally folder (~830 names) and reads the files that changed: O(S/64) names, O(changed)
reads.""",
    "validate": """A validate part task (group `i` of `N`, not group 0) up to its parts' shard entries: `plan_group(i, N)`
and each part's shards (set-up, not timed: group 0's whole plan and its planned manifest, by the code under
test; the manifest cache cleared before each sample). Parts of 10 M rows (`part_rows`' default): 400 shards
of 25,000 rows, 125 parts at 50,000 shards, so N=64 is 2 parts (800 shards) a task and N=1000 is capped at
125 groups, 1 part (400 shards). Before (`43c39f1`): the whole plan per task (the input manifest and every
sibling manifest read whole, the layout over every shard) and the slice of every part computed over all of
them. After: the task's own unit pages, the input's head, the layout group 0 left and the input's shard
pages of its parts' blocks. **At 50,000 shards: 2,541 -> 9.7 ms CPU (N=64) and 2,567 -> 9.5 ms CPU
(N=1000), medians; wall 3.0-5.1 s -> 13-37 ms and 4.4-6.1 s -> 8-22 ms**, at load 2.3-5.7 (2 cores, other
helpers' suites): under the 50 ms goal. Pages read 38.6 MB -> 419 KB / 218 KB. Not measured here: the
parts' own work (re-hashing their files, DuckDB over them), O(their shards), and process start.""",
    "ingest-plan": """An ingest array's task plans over 50,000 tiny input files (one JSON document each, 50 folders of 1,000,
local disk; no manifests), `min_units` = N as an array launch sets it: 64 units of ~781 files at N=64, 1,000
of 50 at N=1000. Before (main): every task listed and stat'ed every input file and grouped them all. After:
the first task to take the plan lease lists and groups them and writes the plan (`ingest/plans/`, pages of
about 64 files); a later task reads the run's pointer, the plan's head and the pages of its block, and lists
nothing. **A later task's plan: 2,352 -> 9 ms wall and 884 -> 2.7 ms CPU at N=64 (40 KB of pages); 2,711 -> 2
ms wall and 1,068 -> 1.7 ms CPU at N=1000 (3 KB)**: under the 50 ms goal. The first task pays the listing as
before plus writing the plan once per run: +180-260 ms CPU (medians 862 -> 1,040 and 893 -> 1,152 ms), +1.1
s wall here (~2.7 MB of pages written: the 50,000 paths; load 7.5-8.8 on 2 cores). On an object store a listing is
~1 LIST request per 1,000 keys; before, every one of the N tasks made them all (N x files / 1,000
requests), after, one task does. The collect step still lists once (as before) to find inputs that changed
under the run.""",
    "plans": """A tokenize task's plan (an attrs stage: which upstream attrs hold `keep`/`is_duplicate` and the cleaned
text, for every shard of its block) and an export task's plan once the scatter is done, at 50,000 shards, each
manifest written by the code under test. Before (main, `bf2c732`): the tokenize plan opened three Parquet
footers per shard of its block (by its code path: preprocess's twice, dedup's once; 2,343 at N=64, 781
shards), and every
export task parsed the tokenize head, which listed all 50,000 packed files (`config["tokens"]["shards"]`),
sorted them for the run key and listed every spill file. After: each attrs stage records its file's columns
in the entry it hands on (`attrs_columns`) and the plan opens no footer; the packed file is in each shard's
entry (`files["packed"]`), the scatter is named by the shard pages' checksums in the head, and the spill
files are listed by the first gather unit. **Tokenize task plan 460 -> 20 ms CPU at N=64 (wall 1.24 s ->
55 ms), 39 -> 3.8 ms CPU at N=1000; export task plan 1,136 -> 2.0 ms CPU at N=64 and 1,036 -> 1.7 ms at
N=1000 (wall 2.4-2.7 s -> 2-3 ms)**, medians of 9 samples (3 rounds alternated x 3), load 7.8-9.3 on 2
cores (other helpers' suites). Pages read by a tokenize task grow 25% (397 -> 498 KB at N=64: the recorded
columns in each entry). Not in the export figure: a task's scatter of its own block (its shard pages of
the block, then reading its packed files) and the gather, which reads every spill file (O(shards) per
gather unit, as the shuffle needs).""",
    "boilerplate": """Before (`b27bb14`): boilerplate had no group plan: every task of an array planned the whole run
(every upstream page, 20 MB of them at 50,000 shards, and the run key over every shard's checksum), also after
the global step was done. After: the whole plan leaves its run key in `boilerplate/plans/<key>.json` (named by
the counting fingerprint, the stage's and the upstream head's page checksums) and a task that finds the step
done plans its block from its pages (`stages/barrier.py`, as dedup); a task that starts before the step counts
its block from its pages and, unless it takes the lease first, plans from its pages after the wait. **1.28 s ->
13.8 ms at N=64 (781 shards a task), 3.2 ms at N=1000**, CPU as wall (load 0.5-0.9): under the 50 ms goal.""",
}


def _heading(key: str, run: dict) -> str:
    """A run's heading: its measures, and its key where that is not the measures' name (a later run kept beside)."""
    measures = run["command"].split("--measures ")[1].split()[0]
    return f"### `--measures {measures}`" + (f" (`{key}`)" if key != measures else "")


def _render(data: dict) -> None:
    """The RESULTS.md section from the JSON (``--render``, and after a run with ``--write-results``)."""
    sys.path.insert(0, str(HERE))
    from results import RESULTS, replace_block

    parts = [
        "## Manifest at 50,000 shards: a task reads its slice (`benchmarks/bench_manifest_scale.py`)",
        "",
        "Goals at 50,000 shards: a task's plan < 50 ms, a gate look < 1 s. JSON: `benchmarks/results/manifest_scale.json`; "
        "`python benchmarks/bench_manifest_scale.py --render` rewrites this section from it.",
    ]
    for measures, run in data["runs"].items():
        parts += [
            "",
            _heading(measures, run),
            "",
            f"Command: `.venv/bin/python benchmarks/bench_manifest_scale.py {run['command']} --write-results` "
            f"(run {run['started']} UTC).",
            "",
            *_table(run),
            "",
            _NOTES.get(measures, ""),
        ]
    replace_block(RESULTS, "bench_manifest_scale", "\n".join(parts).rstrip())


if __name__ == "__main__":
    main()
