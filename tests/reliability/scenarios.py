"""Kill a stage of a chain at a fault point, rerun the chain from there, and compare with a clean run.

Shared by the kill-and-resume tests (``test_kill_resume.py``: ingest to validate; ``test_kill_resume_out.py``:
ingest to export). For each scenario: restore the lake as the clean reference run had it before the stage,
run the stage as a job with ``CURATION_FAULT`` set, check that it died by SIGKILL, then rerun the chain from
that stage to the end without the fault (what an Airflow retry does) and compare with the reference:

- the output (``Pipeline.output_view``: shards + every attrs column, by id; the exported files' bytes) is
  identical;
- every stage's row accounting equals the reference's and closes, and the validate report (less its
  timestamps) is the same;
- the units the killed job had committed are not redone (skipped, records untouched);
- the lake holds the same files as the reference: nothing stray is left behind;
- no temporary file (``.*.tmp-*``) survives (a test of its own).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from reliability.pipeline import (
    Pipeline,
    accounting_problems,
    accountings,
    checkpoint_records,
    lake_files,
    log_tail,
    report,
    stale_temps,
    unit_statuses,
    view_differences,
)


@dataclass(frozen=True)
class Scenario:
    fault: str  # CURATION_FAULT: <point>[@N]
    stage: str  # the stage run with it
    what: str  # what the kill leaves behind
    check: Callable[["Outcome"], None] | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return self.fault


@dataclass
class Reference:
    before: dict[str, Path | None]  # stage -> the saved lake as it was before that stage ran
    view: dict[str, str]
    books: dict[str, dict]
    report: dict
    files: list[str]


@dataclass
class Outcome:
    returncode: int
    killed_log: str
    rerun_failures: list[str]
    view: dict[str, str] = field(default_factory=dict)
    books: dict[str, dict] = field(default_factory=dict)
    report: dict = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    temps: list[str] = field(default_factory=list)  # after the rerun
    killed_temps: list[str] = field(default_factory=list)  # right after the kill
    committed: int = 0  # units the killed job had committed
    redone: list[str] = field(default_factory=list)  # units committed before the kill, then redone
    records: dict = field(default_factory=dict)


def killed_with_a_temp_in(folder: str) -> Callable[[Outcome], None]:
    def check(out: Outcome) -> None:
        # The kill hit inside atomic_open: the file was whole under its temporary name, not renamed.
        assert any(t.startswith(folder + "/") for t in out.killed_temps), (
            f"the kill left no temporary file in {folder}: {out.killed_temps}"
        )

    return check


def build_reference(pipeline: Pipeline, saved: Path) -> Reference:
    """The clean run of the whole chain, the lake saved before each stage."""
    pipeline.restore(None)
    before: dict[str, Path | None] = {}
    for stage in pipeline.stages:
        before[stage] = pipeline.save(saved / stage) if pipeline.root.exists() else None
        proc = pipeline.run(stage, tag="-reference")
        assert proc.returncode == 0, f"reference {stage} failed:\n{log_tail(proc)}"
    lake = pipeline.lake
    ref = Reference(
        before=before,
        view=pipeline.output_view(),
        books=accountings(lake),
        report=report(lake),
        files=lake_files(pipeline.root),
    )
    assert not accounting_problems(ref.books), accounting_problems(ref.books)
    assert not stale_temps(pipeline.root)
    return ref


def run_scenario(pipeline: Pipeline, ref: Reference, sc: Scenario) -> Outcome:
    lake = pipeline.lake
    pipeline.restore(ref.before[sc.stage])
    before = checkpoint_records(lake)
    killed = pipeline.run(sc.stage, fault=sc.fault, tag="-killed")
    out = Outcome(returncode=killed.returncode, killed_log=log_tail(killed), rerun_failures=[])
    committed = {k: r["finished_at"] for k, r in checkpoint_records(lake).items() if k not in before}
    out.killed_temps, out.committed = stale_temps(pipeline.root), len(committed)
    for stage in pipeline.stages[pipeline.stages.index(sc.stage) :]:
        proc = pipeline.run(stage, tag="-rerun")
        if proc.returncode != 0:
            out.rerun_failures.append(f"{stage} exited {proc.returncode}:\n{log_tail(proc)}")
            return out
    out.records = checkpoint_records(lake)
    for (stage, unit), finished_at in sorted(committed.items()):
        # Redoing a unit rewrites its checkpoint record. (Its status in the stage's newest manifest is no
        # test: a rerun of dedup whose global phase is done does not plan its signature step at all, so
        # that step's newest manifest is the killed run's, where the unit is "done".)
        if out.records[(stage, unit)]["finished_at"] != finished_at:
            out.redone.append(f"{stage}/{unit} ({unit_statuses(lake, stage).get(unit)})")
    out.view = pipeline.output_view()
    out.books, out.report = accountings(lake), report(lake)
    out.files, out.temps = lake_files(pipeline.root), stale_temps(pipeline.root)
    return out


def _figures(sc: Scenario, out: Outcome, ref: Reference) -> dict:
    """One row of docs/reliability.md's figures table."""
    lost = sum(1 for k in ref.view if out.view.get(k) != ref.view[k]) + len(set(out.view) - set(ref.view))
    return {
        "fault": sc.fault,
        "stage": sc.stage,
        "exit": out.returncode,
        "committed_before_kill": out.committed,
        "redone": len(out.redone),
        "rows": len(out.view),
        "rows_lost_or_changed": lost,
        "temps_after_kill": len(out.killed_temps),
        "temps_after_rerun": len(out.temps),
    }


def outcomes_of(pipeline: Pipeline, reference: Reference) -> Iterator[Callable[[Scenario], Outcome]]:
    """Each scenario runs once (a module fixture yields this); the tests read its outcome. With
    ``CURATION_RELIABILITY_FIGURES`` set to a file, the scenarios' figures go there as JSON (for
    docs/reliability.md)."""
    done: dict[str, tuple[Scenario, Outcome]] = {}

    def get(sc: Scenario) -> Outcome:
        if sc.fault not in done:
            done[sc.fault] = (sc, run_scenario(pipeline, reference, sc))
        return done[sc.fault][1]

    yield get
    if os.environ.get("CURATION_RELIABILITY_FIGURES"):
        Path(os.environ["CURATION_RELIABILITY_FIGURES"]).write_text(
            json.dumps([_figures(sc, out, reference) for sc, out in done.values()], indent=1)
        )


def assert_reran_to_the_reference(scenario: Scenario, out: Outcome, reference: Reference) -> None:
    assert out.returncode == -signal.SIGKILL, (
        f"{scenario.fault}: the job was not killed there (exit {out.returncode}):\n{out.killed_log}"
    )
    assert not out.rerun_failures, out.rerun_failures[0]
    differences = view_differences(out.view, reference.view)
    assert not differences, "output differs from the clean run:\n" + "\n".join(differences)
    books, problems = out.books, accounting_problems(out.books)
    assert books == reference.books
    assert not problems
    assert out.report == reference.report
    redone = out.redone
    assert not redone, "units committed before the kill were redone"
    stray, missing = sorted(set(out.files) - set(reference.files)), sorted(set(reference.files) - set(out.files))
    assert (stray, missing) == ([], []), (
        f"the lake's files differ from the clean run's: stray {stray[:5]}, missing {missing[:5]}"
    )
    if scenario.check is not None:
        scenario.check(out)


def assert_no_temporary_file_survives(out: Outcome) -> None:
    assert out.returncode == -signal.SIGKILL and not out.rerun_failures
    temps = out.temps
    assert temps == [], "temporary files left in the lake"
