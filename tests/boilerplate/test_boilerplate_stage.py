"""Boilerplate across documents (issue 23, item 5): on real pages (libxslt's and Python's HTML documentation
as Debian ships it, extracted by ingest's HTML extractor), the menu and footer lines every libxslt page
repeats are removed and each page's own prose is kept; the result does not depend on the partition count;
a rerun redoes nothing; a kill after the counts resumes; dedup reads the cleaned text."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest
from airflow_curation.core.schema import CLEAN_TEXT, TEXT
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.boilerplate.stage import REMOVED, BoilerplateStage
from airflow_curation.stages.dedup.stage import DedupStage
from airflow_curation.stages.ingest.stage import IngestStage
from airflow_curation.stages.text import ShardText
from airflow_curation.stages.validate import ValidateStage

XSLT = Path("/usr/share/doc/libxslt1-dev/html")
XSLT_PAGES = ["FAQ", "bugs", "contribs", "docbook", "docs", "downloads", "help", "index", "intro", "API", "extensions"]
PYTHON = Path("/usr/share/doc/python3.11/html/library")
PYTHON_PAGES = ["json", "gzip", "zlib"]
# What every libxslt page carries around its content (its navigation box and footer).
MENU_LINES = {"Main Menu", "Related links", "API Indexes", "Daniel Veillard"}
REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    not (XSLT.is_dir() and PYTHON.is_dir()), reason="needs Debian's libxslt1-dev and python3.11-doc HTML"
)


def _ingest(tmp_path: Path) -> tuple[Lake, str]:
    raw = tmp_path / "raw"
    raw.mkdir()
    for name in XSLT_PAGES:
        shutil.copy(XSLT / f"{name}.html", raw / f"xslt-{name}.html")
    for name in PYTHON_PAGES:
        shutil.copy(PYTHON / f"{name}.html", raw / f"py-{name}.html")
    lake = Lake(str(tmp_path / "lake"), "docs")
    stage = IngestStage(lake, {"inputs": [str(raw)], "unit_bytes": 40_000}, "r1")
    StageRunner(stage).run()
    return lake, stage.manifest_uri


def _rows(manifest: Manifest) -> list[dict]:
    """Every row of the run: the shard's text and meta beside the stage's columns."""
    out = []
    for s in manifest.shards:
        shard = pq.read_table(s.uri, columns=["id", TEXT]).to_pylist()
        attrs = pq.read_table(s.attrs["boilerplate"]).to_pylist()
        out += [{**a, **r} for a, r in zip(attrs, shard, strict=True)]
    return out


def _lines(text: str) -> set[str]:
    return {line.strip() for line in text.split("\n") if line.strip()}


def _run(lake: Lake, manifest: str, run: str = "b1", **config) -> Manifest:
    stage = BoilerplateStage(lake, {"input_manifest": manifest, "min_documents": 5, **config}, run)
    return StageRunner(stage).run()


def test_menu_and_footer_lines_of_real_pages_are_removed_and_their_prose_kept(tmp_path):
    lake, ingested = _ingest(tmp_path)
    m = _run(lake, ingested)
    rows = _rows(m)
    assert m.status == "complete" and len(rows) == len(XSLT_PAGES) + len(PYTHON_PAGES)
    held = Counter(line for r in rows for line in _lines(r[TEXT]))
    xslt = [r for r in rows if "The XSLT C library for GNOME" in r[TEXT]]  # the libxslt pages' title
    assert len(xslt) == len(XSLT_PAGES)
    for r in xslt:
        before, after = _lines(r[TEXT]), _lines(r[CLEAN_TEXT])
        assert MENU_LINES <= before and not (MENU_LINES & after), r["id"]
        # every line of fewer than 5 pages is kept, in order: the page's own prose
        own = [line for line in r[TEXT].split("\n") if line.strip() and held[line.strip()] < 5]
        assert own and [line for line in r[CLEAN_TEXT].split("\n") if line.strip()] == own
        assert r[REMOVED] == sum(1 for line in r[TEXT].split("\n") if line.strip() and held[line.strip()] >= 5)
        assert r["keep"]
    for r in rows:
        if r not in xslt:  # Python's pages share no line with 5 pages: untouched, byte for byte
            assert r[CLEAN_TEXT] == r[TEXT] and r[REMOVED] == 0
    assert m.accounting["notes"]["lines_removed:boilerplate"] == sum(r[REMOVED] for r in rows)


def test_partitions_do_not_change_the_result_and_a_rerun_redoes_nothing(tmp_path):
    lake, ingested = _ingest(tmp_path)
    one = _rows(_run(lake, ingested, partitions=1))
    seven = _rows(_run(lake, ingested, "b2", partitions=7, memory_budget=1))
    assert [(r["id"], r[CLEAN_TEXT], r[REMOVED]) for r in one] == [(r["id"], r[CLEAN_TEXT], r[REMOVED]) for r in seven]
    again = BoilerplateStage(lake, {"input_manifest": ingested, "min_documents": 5, "partitions": 7}, "b3")
    m = StageRunner(again).run()
    assert m.status == "complete" and all(u.status == "skipped" for u in m.units)


def test_a_kill_after_the_counts_resumes_from_them(tmp_path):
    lake, ingested = _ingest(tmp_path)
    code = (
        "import sys; from airflow_curation.core.layout import Lake; "
        "from airflow_curation.stages.base import StageRunner; "
        "from airflow_curation.stages.boilerplate.stage import BoilerplateStage; "
        f"s = BoilerplateStage(Lake({str(tmp_path / 'lake')!r}, 'docs'), "
        f"{{'input_manifest': {ingested!r}, 'min_documents': 5}}, 'k1'); "
        "print(StageRunner(s).run().status)"
    )
    _killed_at("boilerplate.after_counts", code)
    counts = lake.checkpoints("boilerplate_counts", _counts_fingerprint(lake))
    done_before = set(counts.scan()[0])
    assert done_before  # the counts were checkpointed before the kill
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    rerun = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert rerun.stdout.strip() == "complete", rerun.stderr[-2000:]
    reference = _rows(_run(lake, ingested, "ref", partitions=3))
    resumed = _rows(Manifest.read(lake.manifest_uri("k1", "boilerplate")))
    assert [(r["id"], r[CLEAN_TEXT]) for r in resumed] == [(r["id"], r[CLEAN_TEXT]) for r in reference]


def _killed_at(fault: str, code: str) -> None:
    """Run ``code`` in a process of its own, SIGKILLed at the fault point ``fault`` (as a dying node)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "CURATION_FAULT": fault}
    killed = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert killed.returncode == -9, killed.stderr[-2000:]


def _counts_fingerprint(lake: Lake) -> str:
    """The counting sub-stage's fingerprint: it names the one spill folder under ``boilerplate/``."""
    found = [p.parent.name for p in Path(lake.path("boilerplate")).glob("*/spill")]
    assert len(found) == 1, found
    return found[0]


def test_pages_that_differ_only_by_their_menus_are_exact_duplicates_for_dedup(ingest_texts):
    menu, footer = "Home | Docs | Blog | Contact", "Copyright 2024 Example Corp. All rights reserved."
    texts = [f"{menu}\nThe article number {i} says something of its own.\n{footer}" for i in range(8)]
    texts += [f"{menu}\nTwo pages carry this same article body.", f"Two pages carry this same article body.\n{footer}"]
    lake, ingested, _ = ingest_texts(texts, "web", copies=1)
    _run(lake, ingested, "r1")  # the ingest's run: validate reports on the stages of its run
    d = DedupStage(lake, {"input_manifest": lake.manifest_uri("r1", "boilerplate"), "near": False}, "r1")
    dm = StageRunner(d).run()
    rows = []
    for s in dm.shards:
        text = ShardText(s.uri, s.attrs["boilerplate"]).read(["id", TEXT]).column(TEXT).to_pylist()
        rows += zip(text, pq.read_table(s.attrs["dedup"]).column("exact_duplicate").to_pylist())
    assert len(rows) == len(texts)
    same = [flag for text, flag in rows if text == "Two pages carry this same article body."]
    assert sorted(same) == [False, True]  # one keeper, one exact duplicate: the menus made them differ
    assert not any(flag for text, flag in rows if "says something of its own" in text)
    assert all(menu not in text and footer not in text for text, _ in rows)
    # validate's report: the lines removed, and the curated view's text is the cleaned text
    StageRunner(ValidateStage(lake, {"input_manifest": lake.manifest_uri("r1", "dedup")}, "r1")).run()
    report = json.loads(Path(lake.path("_manifests", "r1", "report.json")).read_text())
    assert report["stages"]["boilerplate"]["accounting"]["notes"]["lines_removed:boilerplate"] == 18
    assert "boilerplate_lines_removed" in report["columns"]["boilerplate"]


def _whole_then_forgotten(tmp_path: Path, monkeypatch) -> tuple[Lake, str, list[dict], list[str], list[str]]:
    """A whole run's rows, then the lake with its boilerplate work removed (as if never run), and the list that
    every count unit from now on appends its shard to: (lake, ingested, whole rows, shard ids, counted)."""
    from airflow_curation.stages.boilerplate.stage import BoilerplateCountStage

    lake, ingested = _ingest(tmp_path)
    whole = _rows(_run(lake, ingested, "whole", partitions=3))
    shutil.rmtree(lake.path("boilerplate"))
    for d in Path(lake.path("_checkpoints")).glob("boilerplate*"):
        shutil.rmtree(d)
    counted: list[str] = []  # the shards each count unit ran for, in order
    real = BoilerplateCountStage.process_unit
    monkeypatch.setattr(
        BoilerplateCountStage, "process_unit", lambda self, unit: (counted.append(unit.unit_id), real(self, unit))[1]
    )
    return lake, ingested, whole, [s.shard_id for s in Manifest.read(ingested).shards], counted


def test_array_tasks_count_their_own_block_and_clean_as_one_run(tmp_path, monkeypatch):
    """A task of an array counts the lines of its own block of shards beside the others; the first to find
    the global step undone counts what is missing and sums, under the lease. One task counted every shard
    of the snapshot before (the counting is the stage's pass over all the text), the others waiting on its
    lease. The cleaned text is a one-process run's."""
    import threading
    import time

    from airflow_curation.core.lease import Lease
    from airflow_curation.core.manifest import group_range

    lake, ingested, whole, shards, counted = _whole_then_forgotten(tmp_path, monkeypatch)
    assert len(shards) >= 3
    config = {"input_manifest": ingested, "min_documents": 5, "partitions": 3}
    holder = Lease(lake.path("_locks", "boilerplate.global.lease"), "the test", 0).acquire()
    out: list = []
    task = threading.Thread(
        target=lambda: out.append(StageRunner(BoilerplateStage(lake, config, "arr")).run(shard_group=(1, 3)))
    )
    task.start()
    block = group_range(len(shards), 1, 3)
    mine = shards[block.start : block.stop]
    deadline = time.monotonic() + 300
    while counted != mine and task.is_alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert counted == mine  # its own block, and nothing else while another task holds the lease
    holder.release()
    task.join()
    assert out and sorted(counted) == sorted(shards)  # then the rest, holding the lease: each shard once
    for i in (0, 2):
        StageRunner(BoilerplateStage(lake, config, "arr")).run(shard_group=(i, 3))
    assert sorted(counted) == sorted(shards)  # the global step was done: no other task counted
    grouped = StageRunner(BoilerplateStage(lake, config, "arr")).run(collect=True)
    assert grouped.status == "complete"
    got = _rows(grouped)
    assert [(r["id"], r[CLEAN_TEXT], r[REMOVED]) for r in got] == [(r["id"], r[CLEAN_TEXT], r[REMOVED]) for r in whole]


def test_a_task_that_waits_for_the_global_step_plans_from_its_pages(tmp_path, monkeypatch):
    """A task of an array that starts before the global step is done counts its own block (from its pages) and
    waits for the lease; when another task did the step meanwhile, it plans its block from its pages and the
    run key the whole plan left: only the task that does the step plans the whole run. Every task planned the
    whole run before, even after the step (O(shards) a task). The cleaned text is a one-process run's."""
    from airflow_curation.core.lease import Lease
    from airflow_curation.core.manifest import group_range

    lake, ingested, whole, shards, counted = _whole_then_forgotten(tmp_path, monkeypatch)
    block = group_range(len(shards), 2, 3)
    wholes: list[int] = []
    real_whole = BoilerplateStage._plan_whole
    monkeypatch.setattr(
        BoilerplateStage, "_plan_whole", lambda self, lease: (wholes.append(1), real_whole(self, lease))[1]
    )
    config = {"input_manifest": ingested, "min_documents": 5, "partitions": 3}
    counted_first: list[list[str]] = []
    real_enter = Lease.__enter__

    def another_task_first(self):
        if not counted_first:  # the first wait on the lease: group 0 does the global step meanwhile
            counted_first.append(list(counted))
            StageRunner(BoilerplateStage(lake, config, "arr")).run(shard_group=(0, 3))
        return real_enter(self)

    monkeypatch.setattr(Lease, "__enter__", another_task_first)
    StageRunner(BoilerplateStage(lake, config, "arr")).run(shard_group=(2, 3))
    assert counted_first == [shards[block.start : block.stop]]  # its own block, before the lease
    assert len(wholes) == 1  # group 0's plan; group 2's came from its pages
    assert sorted(counted) == sorted(shards)  # each shard counted once
    # from its pages also when the step was done before it started (a rerun, a late task), with one read of the
    # upstream head (its wait, the run key's name and its pages' entries share it; each a GET on an object store)
    from airflow_curation.core import storage

    reads: list[str] = []
    real_read = storage.read_json
    monkeypatch.setattr(storage, "read_json", lambda url, *a, **k: (reads.append(url), real_read(url, *a, **k))[1])
    StageRunner(BoilerplateStage(lake, config, "arr")).run(shard_group=(1, 3))
    monkeypatch.setattr(storage, "read_json", real_read)
    assert len(wholes) == 1 and reads.count(ingested) == 1, reads
    grouped = StageRunner(BoilerplateStage(lake, config, "arr")).run(collect=True)
    assert grouped.status == "complete"
    got = _rows(grouped)
    assert [(r["id"], r[CLEAN_TEXT], r[REMOVED]) for r in got] == [(r["id"], r[CLEAN_TEXT], r[REMOVED]) for r in whole]


def test_a_frequent_lines_file_gone_after_the_step_fails_named_and_the_rerun_redoes_the_step(tmp_path):
    """A file of the done global step (the frequent lines) deleted while step 3 is still to do: every unit failed,
    and so did every rerun, the step's ``_SUCCESS.json`` keeping it from being redone. The unit now removes the
    mark with the error naming the file; the next run sums the counts again and cleans the same text."""
    from airflow_curation.core import storage, uris
    from airflow_curation.stages.base import StageFailed

    lake, ingested = _ingest(tmp_path)
    first = _rows(_run(lake, ingested, "g1"))
    stage = BoilerplateStage(lake, {"input_manifest": ingested, "min_documents": 5}, "g1")
    shutil.rmtree(stage.checkpoints.directory)  # step 3 to do again; steps 1 and 2 are done
    (done,) = storage.glob(lake.path("boilerplate", "*", "_SUCCESS.json"))
    victim = uris.resolve(storage.read_json(done)["frequent"][0], lake.root)
    os.remove(victim)
    with pytest.raises(StageFailed, match=f"the global step's file {victim} is missing.*run boilerplate again"):
        _run(lake, ingested, "g2")
    assert not os.path.exists(done)
    again = _run(lake, ingested, "g3")
    assert again.status == "complete" and os.path.exists(victim)
    assert [(r["id"], r[CLEAN_TEXT]) for r in _rows(again)] == [(r["id"], r[CLEAN_TEXT]) for r in first]


def test_a_counted_shard_whose_spill_is_gone_is_counted_again(tmp_path):
    """A count unit's record names its spill file: a spill removed before the global step (by hand, a
    cleanup) is counted again instead of summed as missing."""
    lake, ingested = _ingest(tmp_path)
    code = (
        "from airflow_curation.core.layout import Lake; from airflow_curation.stages.base import StageRunner; "
        "from airflow_curation.stages.boilerplate.stage import BoilerplateStage; "
        f"s = BoilerplateStage(Lake({str(tmp_path / 'lake')!r}, 'docs'), "
        f"{{'input_manifest': {ingested!r}, 'min_documents': 5}}, 'g1'); StageRunner(s).run()"
    )
    _killed_at("boilerplate.after_counts", code)
    gone = sorted(Path(lake.path("boilerplate")).glob("*/spill/*.keys.arrow"))[0]
    gone.unlink()
    m = _run(lake, ingested, "g1")
    assert m.status == "complete" and gone.exists()
    reference = _rows(_run(lake, ingested, "ref", partitions=3))
    assert [(r["id"], r[CLEAN_TEXT]) for r in _rows(m)] == [(r["id"], r[CLEAN_TEXT]) for r in reference]


def test_the_global_step_holds_one_partition_at_a_time(tmp_path, monkeypatch):
    """Partitions are sized to the memory budget, and a global unit (one a worker) read its whole range of
    them at once: range / budget times the budget. Each partition is now read alone, and the result is the
    same."""
    from airflow_curation.stages.boilerplate import stage as bp

    lake, ingested = _ingest(tmp_path)
    reads: list[tuple[int, int]] = []
    real = bp.read_partitions
    monkeypatch.setattr(
        bp, "read_partitions", lambda uris, lo, hi, cols: (reads.append((lo, hi)), real(uris, lo, hi, cols))[1]
    )
    seven = _rows(_run(lake, ingested, "p7", partitions=7))  # one worker: one unit of 7 partitions
    assert sorted(reads) == [(p, p + 1) for p in range(7)]
    one = _rows(_run(lake, ingested, "p1", partitions=1))
    assert [(r["id"], r[CLEAN_TEXT], r[REMOVED]) for r in seven] == [(r["id"], r[CLEAN_TEXT], r[REMOVED]) for r in one]


# A middle pass's memory of a few shards' estimated spill (6 shards, 14 KB in all): chunks of 2 of the 8
# partitions, groups of 3 shards.
BUDGET = 4000


def _done(lake: Lake) -> dict:
    (done,) = Path(lake.path("boilerplate")).glob("*/_SUCCESS.json")
    return json.loads(done.read_text())


def test_the_middle_pass_cleans_the_same_text_reading_a_partition_from_one_file_a_group(tmp_path):
    """With the middle pass (``spill_merge``), step 2 reads each partition from one merged file a group of shards,
    not from every shard's spill: the same lines removed, the reads counted in ``_SUCCESS.json``, and the merged
    files (an intermediate) removed once the frequent lines are written."""
    (tmp_path / "off").mkdir()
    (tmp_path / "on").mkdir()
    lake_off, ingested_off = _ingest(tmp_path / "off")
    lake_on, ingested_on = _ingest(tmp_path / "on")
    off = _run(lake_off, ingested_off, partitions=8, spill_merge="off")
    # a budget of a few shards' estimated spill: several groups, and chunks of several partitions
    on = _run(lake_on, ingested_on, partitions=8, spill_merge="on", workers=2, memory_budget=BUDGET)
    assert [(r["id"], r[CLEAN_TEXT], r[REMOVED]) for r in _rows(on)] == [
        (r["id"], r[CLEAN_TEXT], r[REMOVED]) for r in _rows(off)
    ]
    shards = len(on.shards)
    assert shards >= 4
    before, after = _done(lake_off), _done(lake_on)
    assert before["middle_pass"] is None and before["spill_reads"] == 8 * shards
    shape = after["middle_pass"]
    assert 1 < shape["groups"] < shards and 1 < shape["chunks"] < 8 and shape["chunk_partitions"] > 1
    assert after["spill_reads"] == shape["chunks"] * shards + 8 * shape["groups"] < before["spill_reads"]
    assert after["frequent_lines"] == before["frequent_lines"] > 0
    assert list(Path(lake_on.path("boilerplate")).glob("*/merged/*")) == []


def test_a_killed_middle_pass_resumes_from_its_files_and_an_unreadable_one_is_merged_again(tmp_path, monkeypatch):
    """Killed after the middle pass (before step 2 summed it), the rerun keeps the merged files it finds; one
    truncated meanwhile fails step 2 naming it and is removed, so the next run merges that one only again and
    cleans the text of a run without the pass."""
    from airflow_curation.stages.boilerplate import stage as boilerplate_stage

    lake, ingested = _ingest(tmp_path)
    code = (
        "from airflow_curation.core.layout import Lake; "
        "from airflow_curation.stages.base import StageRunner; "
        "from airflow_curation.stages.boilerplate.stage import BoilerplateStage; "
        f"s = BoilerplateStage(Lake({str(tmp_path / 'lake')!r}, 'docs'), {{'input_manifest': {ingested!r}, "
        f"'min_documents': 5, 'partitions': 8, 'spill_merge': 'on', 'memory_budget': {BUDGET}}}, 'k1'); "
        "print(StageRunner(s).run().status)"
    )
    _killed_at("boilerplate.after_merge", code)
    merged = sorted(Path(lake.path("boilerplate")).glob("*/merged/*/*.arrow"))
    assert len(merged) >= 2
    victim = merged[1]
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    config = {"partitions": 8, "spill_merge": "on", "memory_budget": BUDGET}
    with pytest.raises(Exception, match=f"middle pass's file {victim} is unreadable.*run boilerplate again"):
        _run(lake, ingested, "k1", **config)
    assert not victim.exists() and all(p.exists() for p in merged if p != victim)
    again: list[str] = []
    real = boilerplate_stage.merge_spill_range
    monkeypatch.setattr(
        boilerplate_stage, "merge_spill_range", lambda g, lo, hi, out: (again.append(out), real(g, lo, hi, out))[1]
    )
    resumed = _run(lake, ingested, "k1", **config)
    assert again == [str(victim)]
    reference = _rows(_run(lake, ingested, "ref", partitions=3))
    assert [(r["id"], r[CLEAN_TEXT]) for r in _rows(resumed)] == [(r["id"], r[CLEAN_TEXT]) for r in reference]


def test_partitions_capped_past_the_budget_are_said_with_the_budget_that_fits(tmp_path, monkeypatch, caplog):
    """Where the partition cap holds and a partition, by the spill's estimate, needs more than memory_budget to sum
    (a corpus past the cap's reach at the default budget: ~60 TB), the global step says so and names the budget that fits; the
    lines removed are the same."""
    import logging

    from airflow_curation.stages.boilerplate import stage as boilerplate_stage

    lake, ingested = _ingest(tmp_path)
    reference = _rows(_run(lake, ingested, "ref", partitions=3))
    monkeypatch.setattr(boilerplate_stage, "MAX_PARTITIONS", 2)  # the cap of a lake of 14 pages
    with caplog.at_level(logging.WARNING, logger=boilerplate_stage.__name__):
        capped = _run(lake, ingested, "capped", memory_budget=4000)
    (said,) = [r.getMessage() for r in caplog.records if "the cap" in r.getMessage()]
    need = -(-boilerplate_stage.spill_estimate(capped.accounting["read"]) * boilerplate_stage.PARTITION_EXPANSION // 2)
    assert "2 partitions (the cap)" in said and f"memory_budget={-(-need // (1 << 20))}MiB fits" in said
    assert [(r["id"], r[CLEAN_TEXT]) for r in _rows(capped)] == [(r["id"], r[CLEAN_TEXT]) for r in reference]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=boilerplate_stage.__name__):
        _run(lake, ingested, "fits", memory_budget=1 << 30)  # one partition holds it all: nothing said
    assert not [r for r in caplog.records if "the cap" in r.getMessage()]
