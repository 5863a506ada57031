"""The dedup stage end to end: clusters against ground truth, determinism across workers, partitions
and reruns, the spill path under a tiny memory budget, preprocess keep columns, a lake manifest, bad
input, the CLI on plain Parquet, and a real Dask LocalCluster."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import unicodedata
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_curation.core.layout import Lake
from airflow_curation.core.lsh import partitions_for
from airflow_curation.core.manifest import Manifest, ShardEntry
from airflow_curation.core.shards import write_parquet
from airflow_curation.jobs import run_spec
from airflow_curation.jobs.spec import JobSpec
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.dedup.stage import PARTITION_EXPANSION, DedupStage
from airflow_curation.stages.mappers.budget import cpu_count


def _run(tmp, files, name, **config):
    stage = DedupStage(
        Lake(str(tmp / f"lake-{name}"), "ds"), {"inputs": files, "output_dir": str(tmp / f"out-{name}"), **config}, "r1"
    )
    manifest = StageRunner(stage).run()
    tables = {os.path.basename(f): pq.read_table(str(tmp / f"out-{name}" / os.path.basename(f))) for f in files}
    return manifest, tables


def _by_id(tables) -> dict[str, dict]:
    out = {}
    for t in tables.values():
        for row in t.to_pylist():
            out[row["id"]] = row
    return out


@pytest.fixture(scope="module")
def baseline(nd_files, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dedup-baseline")
    manifest, tables = _run(tmp, nd_files, "base")
    return tmp, manifest, tables


def test_clusters_agree_with_exact_jaccard(nd_corpus, baseline):
    ids, texts, jac = nd_corpus
    _, manifest, tables = baseline
    rows = _by_id(tables)
    assert manifest.status == "complete"
    acc = manifest.accounting
    assert acc["read"] == len(ids) == acc["kept"] + sum(acc["dropped"].values())
    cluster = np.array([rows[i]["cluster_id"] for i in ids])
    # pairs far above the threshold land in one cluster
    i, j = np.nonzero(np.triu(jac >= 0.95))
    assert len(i) > 100
    assert (cluster[i] == cluster[j]).mean() >= 0.99
    # unrelated pages (different pages, Jaccard below 0.2) never share a cluster through a direct edge
    same = cluster[:, None] == cluster[None, :]
    weak = np.triu(jac < 0.2, 1) & same
    assert weak.sum() <= 0.01 * np.triu(same, 1).sum() + 1
    # one keeper per cluster, the lowest node key, which is the cluster id
    keepers: dict[int, int] = {}
    for t_index, (name, t) in enumerate(sorted(tables.items())):
        for r, row in enumerate(t.to_pylist()):
            node = (t_index << 32) | r
            if not row["is_duplicate"]:
                assert row["cluster_id"] == node
                keepers[row["cluster_id"]] = keepers.get(row["cluster_id"], 0) + 1
            else:
                assert row["cluster_id"] < node
    assert set(keepers.values()) == {1}
    assert set(cluster.tolist()) == set(keepers)


def test_exact_duplicates_found_and_flagged(tmp_path):
    base = "Debian packages are installed with apt and dpkg, which keep a database of every file."
    texts = [
        base,
        base.upper(),
        "  " + base.replace(" ", "\u00a0 \t") + "\n",
        unicodedata.normalize("NFKD", base),
        base + " And more words after it to make it different enough from the rest.",
        "",
        "   ",
        None,
    ]
    f = str(tmp_path / "x.parquet")
    pq.write_table(pa.table({"id": [f"d{i}" for i in range(len(texts))], "text": pa.array(texts, pa.string())}), f)
    manifest, tables = _run(tmp_path, [f], "exact", near=False)
    t = tables["x.parquet"].to_pylist()
    assert [r["exact_duplicate"] for r in t] == [False, True, True, True, False, False, True, True]
    assert [r["cluster_id"] for r in t][:4] == [0, 0, 0, 0]
    assert t[6]["cluster_id"] == t[7]["cluster_id"] == 5
    assert manifest.accounting["dropped"] == {"exact_duplicate": 5}


def test_identical_for_any_worker_and_partition_count_and_rerun(nd_files, baseline, tmp_path):
    _, _, expected = baseline
    # two worker processes and a memory budget so small that every phase spills into many partitions
    manifest, tables = _run(tmp_path, nd_files, "spill", workers=2, memory_budget=10_000)
    sig = Manifest.read(str(tmp_path / "lake-spill" / "ds" / "_manifests" / "r1" / "dedup_signatures.json"))
    assert sig.status == "complete"
    done = json.loads(next((tmp_path / "lake-spill" / "ds" / "dedup").glob("*/_SUCCESS.json")).read_text())
    assert done["partitions"] > 8
    for name in expected:
        assert tables[name].equals(expected[name]), name
    # a rerun skips every unit and changes nothing
    manifest2, tables2 = _run(tmp_path, nd_files, "spill", workers=2, memory_budget=10_000)
    assert {u.status for u in manifest2.units} == {"skipped"}
    for name in expected:
        assert tables2[name].equals(expected[name])


@pytest.mark.parametrize(
    ("name", "config", "partitions", "units"),
    [
        ("slots", {"workers": 2}, 2, 2),  # the budget needs one partition; two workers get two units
        ("ranges", {"partitions": 64, "global_units": 3}, 64, 3),  # many partitions, few units: ranges
        ("many", {"partitions": 64, "global_units": 64}, 64, 64),
        ("capped", {"partitions": 3, "global_units": 8}, 3, 3),  # never more units than partitions
    ],
)
def test_global_units_cover_the_slots_with_partition_ranges_and_change_no_label(
    nd_files, baseline, tmp_path, name, config, partitions, units
):
    """The global phase has at least as many units as slots (workers, or ``global_units``), each a
    contiguous range of LSH partitions; whatever the partition and unit counts, every label is the same."""
    _, _, expected = baseline
    _, tables = _run(tmp_path, nd_files, name, **config)
    done = json.loads(next((tmp_path / f"lake-{name}" / "ds" / "dedup").glob("*/_SUCCESS.json")).read_text())
    assert (done["partitions"], done["units"]) == (partitions, units)
    for f in expected:
        assert tables[f].equals(expected[f]), f


def _preprocessed_lake(root, ids, texts) -> Lake:
    """A lake with two shards, preprocess attrs that drop the English originals (not their mutated
    copies), and a complete preprocess manifest for run r1."""
    lake = Lake(str(root), "ds")
    entries = []
    for k in range(2):
        sid = f"part-{k:05d}"
        t = pa.table(
            {"id": ids[k::2], "text": texts[k::2], "source": ["x"] * len(ids[k::2]), "meta": [None] * len(ids[k::2])}
        )
        n, ck = write_parquet(lake.shard_uri(sid), t, row_group_rows=64)
        keep = [not (i.startswith("en-US/") and "~" not in i) for i in ids[k::2]]
        write_parquet(lake.attrs_uri("preprocess", sid), pa.table({"id": ids[k::2], "keep": keep}))
        entries.append(
            ShardEntry(
                shard_id=sid,
                uri=lake.shard_uri(sid),
                rows=t.num_rows,
                bytes=n,
                checksum=ck,
                attrs={"preprocess": lake.attrs_uri("preprocess", sid)},
            )
        )
    upstream = Manifest(
        dataset="ds",
        stage="preprocess",
        run_id="r1",
        fingerprint="f",
        lake=lake.to_dict(),
        shards=entries,
        status="complete",
    )
    upstream.write(lake.manifest_uri("r1", "preprocess"))
    return lake


def test_only_rows_kept_by_preprocess_in_a_lake(nd_corpus, tmp_path):
    ids, texts, _ = nd_corpus
    lake = _preprocessed_lake(tmp_path / "lake", ids, texts)
    result = run_spec(
        JobSpec(
            stage="dedup",
            lake=lake.to_dict(),
            run_id="r1",
            config={"input_manifest": lake.manifest_uri("r1", "preprocess")},
        )
    )
    manifest = Manifest.read(result["manifest_uri"])
    assert all(set(s.attrs) == {"preprocess", "dedup"} for s in manifest.shards)
    rows = _by_id({s.shard_id: pq.read_table(s.attrs["dedup"]) for s in manifest.shards})
    english = [i for i in ids if i.startswith("en-US/") and "~" not in i]
    assert english and all(rows[i]["cluster_id"] is None and not rows[i]["is_duplicate"] for i in english)
    # every cluster's keeper is a kept row (never a dropped original) and is its own cluster id
    by_node = {}
    for k, s in enumerate(manifest.shards):
        for r, row in enumerate(pq.read_table(s.attrs["dedup"]).to_pylist()):
            by_node[(k << 32) | r] = row
    clusters = {row["cluster_id"] for row in by_node.values() if row["cluster_id"] is not None}
    assert clusters and all(by_node[c]["cluster_id"] == c and not by_node[c]["is_duplicate"] for c in clusters)
    assert any(rows[c]["is_duplicate"] for c in ids if "~" in c)
    assert manifest.accounting["dropped"]["not_kept_upstream"] == len(english)
    # the attrs keep shard order and rows
    for s in manifest.shards:
        assert pq.read_table(s.attrs["dedup"]).column("id").equals(pq.read_table(s.uri).column("id"))


@pytest.mark.parametrize("kept", ["none", "a quarter"])
def test_the_global_phase_is_sized_by_the_rows_kept_upstream(nd_corpus, tmp_path, kept):
    """The partitions are planned for every row (before phase 1 knows what preprocess kept); the units and the
    components' partitions follow the rows phase 1 signed, so a corpus mostly dropped upstream does not pay a
    global phase (units x shards spill reads, components partitions squared) sized for rows it never spilled."""
    ids, texts, _ = nd_corpus

    def lake_keeping(root: Path) -> Lake:
        lake = _preprocessed_lake(root, ids, texts)
        for k in range(2):
            keep = [kept == "a quarter" and n % 4 == 0 for n in range(len(ids[k::2]))]
            write_parquet(lake.attrs_uri("preprocess", f"part-{k:05d}"), pa.table({"id": ids[k::2], "keep": keep}))
        return lake

    lake = lake_keeping(tmp_path / "lake")
    budget = 20_000  # every row's spill needs many partitions under it
    config = {"input_manifest": lake.manifest_uri("r1", "preprocess"), "memory_budget": budget}
    manifest = Manifest.read(
        run_spec(JobSpec(stage="dedup", lake=lake.to_dict(), run_id="r1", config=config))["manifest_uri"]
    )
    done = json.loads(next(Path(lake.path("dedup")).glob("*/_SUCCESS.json")).read_text())
    signed = manifest.accounting["kept"] + sum(
        manifest.accounting["dropped"].get(k, 0) for k in ("exact_duplicate", "near_duplicate")
    )
    per_row = 16 * done["bands"] + 24  # the planner's spill bytes per row (bands x 16 B, the exact key)
    assert done["partitions"] == partitions_for(len(ids) * per_row, budget, PARTITION_EXPANSION) > 4
    assert done["units"] == done["edge_partitions"] == partitions_for(signed * per_row, budget, PARTITION_EXPANSION)
    # the components then run in what the counted edges need, at most that
    edges = done["verified"] + done["exact_edges"]
    assert done["components_partitions"] == min(done["edge_partitions"], partitions_for(2 * edges * 16, budget))
    if kept == "none":
        assert signed == 0 and done["units"] == 1 and not done["gathered"]
    else:
        assert done["units"] > 1 and done["units"] < done["partitions"]
        # the same labels as one unit holding the whole global phase
        single = tmp_path / "single"
        lake1 = lake_keeping(single)
        config1 = {"input_manifest": lake1.manifest_uri("r1", "preprocess"), "partitions": 1}
        m1 = Manifest.read(
            run_spec(JobSpec(stage="dedup", lake=lake1.to_dict(), run_id="r1", config=config1))["manifest_uri"]
        )
        for a, b in zip(manifest.shards, m1.shards):
            assert pq.read_table(a.attrs["dedup"]).equals(pq.read_table(b.attrs["dedup"]))


def test_bad_input_fails_clearly_and_empty_files_work(tmp_path):
    bad = str(tmp_path / "bad.parquet")
    pq.write_table(pa.table({"id": ["a"], "body": ["x"]}), bad)
    with pytest.raises(ValueError, match="missing column 'text'"):
        _run(tmp_path, [bad], "bad")
    numbers = str(tmp_path / "numbers.parquet")
    pq.write_table(pa.table({"id": ["a"], "text": [3]}), numbers)
    with pytest.raises(ValueError, match="must be a string column"):
        _run(tmp_path, [numbers], "numbers")
    empty = str(tmp_path / "empty.parquet")
    pq.write_table(pa.table({"id": pa.array([], pa.string()), "text": pa.array([], pa.string())}), empty)
    one = str(tmp_path / "one.parquet")
    pq.write_table(pa.table({"id": ["only", "dup"], "text": ["Ω", "ω"]}), one)
    manifest, tables = _run(tmp_path, [empty, one], "edge")
    assert tables["empty.parquet"].num_rows == 0
    assert tables["one.parquet"].column("is_duplicate").to_pylist() == [False, True]
    with pytest.raises(ValueError, match="either input_manifest"):
        DedupStage(Lake(str(tmp_path), "ds"), {}, "r1")
    with pytest.raises(ValueError, match="unknown settings"):
        DedupStage(Lake(str(tmp_path), "ds"), {"inputs": [one], "output_dir": "o", "treshold": 0.5}, "r1")


def test_cli_on_plain_parquet(nd_files, baseline, tmp_path):
    out = tmp_path / "cli-out"
    curation = Path(sys.executable).with_name("curation")
    cmd = [
        str(curation) if curation.exists() else "curation",
        "dedup",
        *nd_files,
        "--output",
        str(out),
        "--threshold",
        "0.8",
        "--num-perm",
        "128",
        "--ngram",
        "5",
        "--verify",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["rows"] == sum(pq.read_metadata(f).num_rows for f in nd_files)
    _, _, expected = baseline
    for f in nd_files:
        name = os.path.basename(f)
        got = pq.read_table(str(out / name))
        assert got.column_names == ["id", "cluster_id", "is_duplicate", "exact_duplicate", "near_duplicate"]
        assert got.column("id").equals(pq.read_table(f).column("id"))
        # verification can only split clusters, never add duplicates
        dup, base_dup = got.column("is_duplicate").to_pylist(), expected[name].column("is_duplicate").to_pylist()
        assert all(b or not a for a, b in zip(dup, base_dup))
        assert sum(dup) > 0


def test_on_a_real_dask_local_cluster(nd_files, baseline, tmp_path, caplog):
    _, _, expected = baseline
    with caplog.at_level(logging.INFO, "airflow_curation.stages.dedup.stage"):
        manifest, tables = _run(tmp_path, nd_files, "dask", mapper="dask", workers=2)
    for name in expected:
        assert tables[name].equals(expected[name]), name
    two = cpu_count() >= 2  # a plan of one worker runs in this process (test below)
    assert ("dedup: Dask LocalCluster of 2 workers" if two else "every phase in this process") in caplog.text


def test_a_one_worker_dask_plan_runs_every_phase_in_this_process(nd_files, baseline, tmp_path, caplog):
    """A LocalCluster of one worker would only add its start-up to every task of an array."""
    _, _, expected = baseline
    with caplog.at_level(logging.INFO, "airflow_curation.stages.dedup.stage"):
        manifest, tables = _run(tmp_path, nd_files, "dask1", mapper="dask", workers=1)
    assert manifest.status == "complete"
    for name in expected:
        assert tables[name].equals(expected[name]), name
    assert "every phase in this process" in caplog.text and "LocalCluster of" not in caplog.text


def test_cli_on_a_lake(nd_corpus, tmp_path, capsys):
    from airflow_curation.cli import main

    ids, texts, _ = nd_corpus
    lake = _preprocessed_lake(tmp_path / "lake", ids, texts)
    assert (
        main(
            [
                "dedup",
                "--lake",
                lake.root,
                "--dataset",
                "ds",
                "--run-id",
                "r1",
                "--input-manifest",
                lake.manifest_uri("r1", "preprocess"),
                "--no-near",
                "--all-rows",
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    manifest = Manifest.read(summary["manifest_uri"])
    assert summary["manifest_uri"] == lake.manifest_uri("r1", "dedup") and manifest.status == "complete"
    assert manifest.config["near"] is False and manifest.config["only_kept"] is False
    assert manifest.accounting["read"] == len(ids)
    for s in manifest.shards:
        attrs = pq.read_table(s.attrs["dedup"])
        assert attrs.num_rows == s.rows and not any(attrs.column("near_duplicate").to_pylist())
        assert attrs.column("cluster_id").null_count == 0  # --all-rows: every row considered
