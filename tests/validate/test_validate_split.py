"""Validate split into independent tasks (the units of an array: ``jobs run SPEC --group i/n``) and one merge
(``jobs collect``): the merged report equals the single-node one, number for number, on a lake where an id
and dedup clusters span the tasks' shards (so adding the tasks' own distinct counts would be wrong)."""

from __future__ import annotations

import json
import os

import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_curation.core import storage
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest
from airflow_curation.jobs import cli
from airflow_curation.jobs.spec import JobSpec
from airflow_curation.stages.validate import ValidateStage, checks
from airflow_curation.stages.validate.query_engines import DuckDBEngine
from airflow_curation.stages.validate.stage import _json_safe
from airflow_curation.stages.validate.view import CuratedView

from .synth import build_run
from .test_bounded_memory import CURATED_BOUNDS, _duplicate_id_across_shards

# threads 1: the least CPU on a shared machine (a mean no longer depends on the threads: bounded.exact_mean)
CONFIG = {"fail_on_error": False, "checks": CURATED_BOUNDS, "threads": 1, "ids_per_pass": 150}


def _spec(tmp_path, root: str, uri: str, run_id: str, **config) -> str:
    spec = JobSpec(
        stage="validate",
        lake={"root": root, "dataset": "demo", "snapshot": None},
        run_id=run_id,
        config={"input_manifest": uri, **CONFIG, **config},
    )
    path = str(tmp_path / f"{run_id}.spec.json")
    storage.write_bytes(path, spec.to_json().encode())
    return path


def _report(root: str, run_id: str) -> dict:
    with open(os.path.join(root, "demo", "_manifests", run_id, "report.json")) as f:
        return json.load(f)


def _numbers(report: dict) -> tuple[str, list]:
    checks = [(c["name"], c["status"], c["observed"]) for c in report["checks"]]
    return json.dumps(report["metrics"], sort_keys=True), checks


def _lake(root: str) -> dict[str, str]:
    uris = build_run(root, shards=6, rows=80, stages=("preprocess", "dedup"))  # the same rows for a root
    _duplicate_id_across_shards(uris)  # shard 0 and shard 5: parts 0 and 2
    return uris


def test_three_tasks_and_a_merge_give_the_single_node_report(tmp_path):
    root = str(tmp_path / "lake")  # the one-group run's (a run on the same lake would reuse its verdict)
    uris = _lake(root)
    m = Manifest.read(uris["dedup"])
    clusters = [set(pq.read_table(s.attrs["dedup"], columns=["cluster_id"]).column(0).to_pylist()) for s in m.shards]
    assert clusters[0] & clusters[5]  # a dedup cluster with members in the first and the last task's shards

    # Today's single-node path: one engine over the whole view.
    view = CuratedView.from_manifest(m)
    engine = DuckDBEngine(view, threads=1, ids_per_pass=150)
    try:
        metrics = engine.metrics(curated_signals=checks.curated_signal_columns(CURATED_BOUNDS, view))
        single = json.loads(json.dumps(_json_safe(metrics)))
    finally:
        engine.close()

    # One group (the whole stage in one process), three parts of two shards.
    spec1 = _spec(tmp_path, root, uris["dedup"], "one", part_rows=160)
    assert cli.main(["run", spec1]) == 0
    one = _report(root, "one")

    # Three groups, each a task of its own, then the collect step (the merge), on a copy of the lake.
    root = str(tmp_path / "lake3")
    uris = _lake(root)
    spec3 = _spec(tmp_path, root, uris["dedup"], "three", part_rows=160, max_attempts=1)
    stage = ValidateStage(Lake(root, "demo"), json.load(open(spec3))["config"], "three")
    units = stage.plan()
    assert [u.unit_id for u in units] == ["part-00000", "part-00001", "part-00002"]
    report_uri = os.path.join(root, "demo", "_manifests", "three", "report.json")
    naive_ids = 0
    for i in range(3):
        assert cli.main(["run", spec3, "--group", f"{i}/3"]) == 0
        rec = stage.checkpoints.load(units[i].unit_id)
        assert rec is not None and rec.extra["run_id"] == "three" and "partial" in rec.extra  # done by group i
        assert all(stage.checkpoints.load(u.unit_id) is None for u in units[i + 1 :])  # not by group i
        ids = pq.read_table(stage.keys_uri(units[i].unit_id, "ids"), columns=["key"]).column(0)
        naive_ids += pc.count_distinct(ids).as_py()
        assert not os.path.exists(report_uri)  # no verdict before the merge
    assert cli.main(["collect", spec3]) == 0
    three = _report(root, "three")

    assert single["distinct_ids"] == 479 and naive_ids == 480  # the id in two tasks: a sum would count it twice
    assert three["metrics"]["clusters"]["clusters"] < sum(len(c) for c in clusters)
    assert _numbers(three) == _numbers(one)
    assert json.dumps(three["metrics"], sort_keys=True) == json.dumps(single, sort_keys=True)
    verdicts = {c["name"]: (c["status"], c["observed"]) for c in three["checks"]}
    assert verdicts["unique_ids"] == ("fail", 1) and verdicts["accounting"] == ("pass", 0)
    # Merged: the keys are gone from the lake; the manifest passes every shard through.
    assert not any(storage.exists(stage.keys_uri(u.unit_id, k)) for u in units for k in ("ids", "clusters"))
    assert Manifest.read(stage.manifest_uri).rows == 480

    # Another run over the same files and checks reuses the verdict (its parts' keys are gone: not needed).
    spec_again = _spec(tmp_path, root, uris["dedup"], "again", part_rows=160)
    for i in range(3):
        assert cli.main(["run", spec_again, "--group", f"{i}/3"]) == 0
    assert cli.main(["collect", spec_again]) == 0
    again = _report(root, "again")
    assert again["verdict_of"]["run_id"] == "three" and _numbers(again) == _numbers(three)

    # The verdict's report lost: the next run counts again (the parts whose keys the merge removed first).
    os.remove(os.path.join(root, "demo", "_manifests", "three", "report.json"))
    assert cli.main(["run", _spec(tmp_path, root, uris["dedup"], "lost", part_rows=160)]) == 0
    lost = _report(root, "lost")
    assert lost.get("verdict_of") is None and _numbers(lost) == _numbers(three)


def test_a_task_reads_the_manifests_once_not_once_per_part(tmp_path, monkeypatch):
    """A task of a split run plans, slices and builds its view for each of its parts from the input manifest
    and its siblings: each is read whole once while its file is unchanged (each part used to read the input
    manifest again for its plan, its slice and its view: O(parts x shards) per task)."""
    from collections import Counter

    from airflow_curation.stages.base import StageRunner

    root = str(tmp_path / "lake")
    uris = _lake(root)
    reads: Counter[str] = Counter()
    real = Manifest.read.__func__

    def counted(cls, uri):
        reads[uri] += 1
        return real(cls, uri)

    monkeypatch.setattr(Manifest, "read", classmethod(counted))
    lake = Lake(root, "demo")
    stage = ValidateStage(lake, {"input_manifest": uris["dedup"], **CONFIG, "part_rows": 160}, "parts")
    manifest = StageRunner(stage).run()
    assert len(manifest.units) == 3 and manifest.status == "complete"
    assert reads[uris["dedup"]] == 1, reads
    assert all(n == 1 for n in reads.values()), reads


def test_split_merge_of_the_curated_rows_by_selection_equals_the_single_task_and_duckdb(tmp_path):
    """Parts of one shard each (``group_rows``): the curated rows' statistics go by selection, each part's rows
    streamed from DuckDB as Arrow batches and binned in numpy (the merge of a split run, over the whole lake).
    The merged report equals the single-task one number for number, and its statistics are DuckDB's own over
    the curated view in one query (``quantile_cont``, ``histogram``), the mean bit for bit (the exact sums of six
    parts, or of one: it was 1e-12 apart when each part's ``fsum`` was rounded)."""

    config = {"group_rows": 100}
    root1 = str(tmp_path / "lake1")
    uris = _lake(root1)
    assert cli.main(["run", _spec(tmp_path, root1, uris["dedup"], "one", part_rows=160, **config)]) == 0
    one = _report(root1, "one")

    root3 = str(tmp_path / "lake3")
    uris3 = _lake(root3)
    spec3 = _spec(tmp_path, root3, uris3["dedup"], "three", part_rows=160, max_attempts=1, **config)
    for i in range(3):
        assert cli.main(["run", spec3, "--group", f"{i}/3"]) == 0
    assert cli.main(["collect", spec3]) == 0
    three = _report(root3, "three")
    assert _numbers(three) == _numbers(one)

    view = CuratedView.from_manifest(Manifest.read(uris["dedup"]))
    assert len(view.shard_groups(100)) == 6  # six parts: the selection path, not one query's quantile_cont
    engine = DuckDBEngine(view, threads=1, group_rows=0)  # one part: DuckDB's quantile_cont and histogram
    try:
        whole = engine.metrics(curated_signals=checks.curated_signal_columns(CURATED_BOUNDS, view))
    finally:
        engine.close()
    whole = json.loads(json.dumps(_json_safe(whole)))["curated_signals"]
    merged = three["metrics"]["curated_signals"]
    assert merged.keys() == whole.keys() and merged["alpha_ratio"]["count"] > 0
    for col, stats in whole.items():
        for stat, v in stats.items():
            assert merged[col][stat] == v, (col, stat)  # the mean too: exact sums, one part or six
