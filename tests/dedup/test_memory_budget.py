"""Dedup past memory: with a memory budget of a quarter of its global-phase data, the stage spills into
partitions that each hold a fraction of the data, and its clusters are identical to a run that holds
everything in one partition (what ``benchmarks/bench_scale.py`` checks at 10 GB)."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_curation.core.components import LABEL_COLUMNS
from airflow_curation.core.layout import Lake
from airflow_curation.core.lsh import read_gathered, read_partition, shard_of
from airflow_curation.core.minhash import lsh_params
from airflow_curation.core.uris import resolve
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.dedup import stage as dedup_stage
from airflow_curation.stages.dedup.phases import BAND_COLUMNS, NODE_COLUMNS
from airflow_curation.stages.dedup.stage import _BAND_BYTES, _EXACT_BYTES, DedupStage, pack_groups, spill_groups


def _spill(path) -> pa.ipc.RecordBatchFileReader:
    """A spill file (Arrow IPC, one record batch per non-empty partition)."""
    return pa.ipc.open_file(pa.memory_map(str(path)))


def _rows(path) -> int:
    r = _spill(path)
    return sum(r.get_batch(i).num_rows for i in range(r.num_record_batches))


def _run(tmp, files, name, **config):
    lake = Lake(str(tmp / f"lake-{name}"), "ds")
    out = tmp / f"out-{name}"
    manifest = StageRunner(DedupStage(lake, {"inputs": files, "output_dir": str(out), **config}, "r1")).run()
    assert manifest.status == "complete"
    tables = {os.path.basename(f): pq.read_table(str(out / os.path.basename(f))) for f in files}
    done = json.loads(next((tmp / f"lake-{name}" / "ds" / "dedup").glob("*/_SUCCESS.json")).read_text())
    # The files it lists are stored relative to the lake root (a copied lake reads its own).
    done = {k: [resolve(u, lake.root) for u in v] if k in ("labels", "exact") else v for k, v in done.items()}
    spills = sorted((tmp / f"lake-{name}" / "ds" / "dedup").glob("*/spill/*.bands.arrow"))
    return tables, done, [str(p) for p in spills]


def test_a_quarter_budget_spills_and_finds_the_same_clusters(nd_corpus, nd_files, tmp_path):
    ids, _, _ = nd_corpus
    bands, _ = lsh_params(0.8, 128)
    data = len(ids) * (_BAND_BYTES * bands + _EXACT_BYTES)  # what the planner sizes partitions by
    full, full_done, full_spills = _run(tmp_path, nd_files, "full", partitions=1)
    tight, tight_done, spills = _run(tmp_path, nd_files, "quarter", memory_budget=data // 4)

    assert full_done["partitions"] == 1
    assert tight_done["partitions"] >= 8  # a quarter of the data, sized at 2x (PARTITION_EXPANSION)
    # spill happened: every shard's band file holds one record batch per partition, and no partition
    # holds more than a quarter of the band rows
    total = sum(_rows(p) for p in spills)
    assert total == sum(_rows(p) for p in full_spills) > 0
    assert max(_spill(p).num_record_batches for p in spills) > 1
    sizes = [read_partition(spills, p, BAND_COLUMNS)["node"].size for p in range(tight_done["partitions"])]
    assert sum(sizes) == total
    assert max(sizes) <= total / 4
    # identical clusters, row for row
    assert full.keys() == tight.keys()
    for name in full:
        assert tight[name].equals(full[name]), name
    # phase 3 read its shard's labels and exact duplicates from one gathered file each, not one per
    # LSH partition: the same rows as the partitions' files hold
    assert tight_done["gathered"] and not full_done["gathered"]
    assert len(tight_done["labels"]) == len(tight_done["exact"]) == tight_done["out_partitions"]
    assert all(_spill(u).num_record_batches <= 1 for u in tight_done["labels"])
    gathered = sum(_rows(u) for u in tight_done["labels"])
    by_lsh = sorted((tmp_path / "lake-quarter" / "ds" / "dedup").glob("*/components/**/*.arrow"))
    assert gathered > 0
    # the last step's labels, and those of the stars found finished in the rounds (written where found)
    labelled = [u for u in by_lsh if u.parent.name == "labels" or u.name.startswith("labels-")]
    assert gathered == sum(_rows(u) for u in labelled)


def test_shards_sharing_an_output_partition_read_their_own_rows(nd_files, tmp_path, monkeypatch):
    """Where more shards than output partitions share the gathered labels (at 50,000 shards, ~195 a file),
    each gathered file holds one batch per shard, a shard reads its own batch alone, and the clusters are
    the unconstrained run's, row for row."""
    full, _, _ = _run(tmp_path, nd_files, "full", partitions=1)
    monkeypatch.setattr(dedup_stage, "MAX_OUT_PARTITIONS", 2)
    shared, done, _ = _run(tmp_path, nd_files, "shared", memory_budget=4096)
    assert done["gathered"] and done["by_shard"] and done["out_partitions"] == 2
    for name in full:
        assert shared[name].equals(full[name]), name
    labels = {}
    for kind, columns in (("labels", LABEL_COLUMNS), ("exact", NODE_COLUMNS)):
        for q, uri in enumerate(done[kind]):
            whole = read_gathered(uri, columns)
            shards = sorted(set(shard_of(whole["node"]).tolist()))
            assert all(s % 2 == q for s in shards)
            assert _spill(uri).num_record_batches == len(shards)
            for s in shards:
                own = read_gathered(uri, columns, s)["node"]
                assert (shard_of(own) == s).all()
                assert sorted(own.tolist()) == sorted(whole["node"][shard_of(whole["node"]) == s].tolist())
            if kind == "labels":
                labels[q] = shards
    assert len(labels[0]) == 2  # shards 0 and 2 share partition 0, and both have labelled rows


def test_units_read_packed_spill_files_and_find_the_same_clusters(nd_corpus, nd_files, tmp_path):
    """Where the global phase has several units and the memory budget holds several shards' spill, the
    units read the spill packed by groups of consecutive shards (units x groups opens, not units x shards),
    and the clusters are the unconstrained run's, row for row; the packs are removed once read and the
    shards' own spill files stay."""
    ids, _, _ = nd_corpus
    bands, _ = lsh_params(0.8, 128)
    data = len(ids) * (_BAND_BYTES * bands + _EXACT_BYTES)
    full, _, _ = _run(tmp_path, nd_files, "full", partitions=1)
    packed, done, spills = _run(tmp_path, nd_files, "packed", memory_budget=data * 3 // 2)
    assert done["units"] > 1
    assert done["spill_groups"] >= 1 and done["spill_groups"] < len(nd_files)  # 3 shards, 2 to a group
    for name in full:
        assert packed[name].equals(full[name]), name
    assert not list((tmp_path / "lake-packed" / "ds" / "dedup").glob("*/packed/*.pack"))
    assert len(spills) == len(nd_files)


def test_the_spill_is_packed_only_where_the_opens_saved_cost_more_than_the_copy():
    mb = 1 << 20
    kb = 100_000
    assert spill_groups(100, 1, 64, 100 * kb, 1 << 30) == []  # one unit opens each file once anyway
    assert spill_groups(100, 32, 64, 100 * kb, 2 * kb) == []  # a group would not fit half the budget
    groups = spill_groups(100, 32, 64, 100 * kb, 16 * kb)  # 800 kB a group: 8 shards' spill
    assert [len(g) for g in groups] == [8] * 12 + [4]
    assert [i for g in groups for i in g] == list(range(100))
    # 1 GB shards (45 MB of spill each) on a 4,096-partition plan: on a local disk a few units do not pay for
    # the copy, thousands do; on an object store, where an open is requests, a few dozen do
    spill = 50_000 * 45 * mb
    assert spill_groups(50_000, 4, 4096, spill, 8 << 30) == []
    assert len(spill_groups(50_000, 4096, 4096, spill, 8 << 30)) == 50_000 // 91 + 1
    assert len(spill_groups(50_000, 64, 4096, spill, 8 << 30, remote=True)) == 50_000 // 91 + 1
    assert spill_groups(50_000, 16, 4096, spill, 8 << 30, remote=True) == []


def test_the_units_outputs_are_read_packed_and_the_clusters_do_not_change(nd_corpus, nd_files, tmp_path, monkeypatch):
    """Each components partition opens every unit's edge file and each output partition every unit's exact
    duplicates: where that pays, both are packed by groups of consecutive units first. Clusters are the
    same with and without the packs, row for row, and the packs are removed once read (the units' files
    stay)."""
    ids, _, _ = nd_corpus
    bands, _ = lsh_params(0.8, 128)
    data = len(ids) * (_BAND_BYTES * bands + _EXACT_BYTES)
    packed, done, _ = _run(tmp_path, nd_files, "units-packed", memory_budget=data // 4)
    assert done["units"] > 1 and done["edge_groups"] >= 1 and done["exact_groups"] >= 1
    assert done["components_partitions"] > 1 and done["components_rounds"] >= 1
    assert done["edge_groups"] < done["units"] and done["exact_groups"] < done["units"]
    gdir = next((tmp_path / "lake-units-packed" / "ds" / "dedup").glob("*/_SUCCESS.json")).parent
    assert not list(gdir.glob("packed-units/*"))
    assert len(list(gdir.glob("edges/unit-*"))) == len(list(gdir.glob("exact/unit-*"))) == done["units"]
    monkeypatch.setattr(dedup_stage, "pack_groups", lambda *a, **k: [])
    alone, done_alone, _ = _run(tmp_path, nd_files, "units-alone", memory_budget=data // 4)
    assert done_alone["edge_groups"] == done_alone["exact_groups"] == 0
    assert done_alone["units"] == done["units"]
    for name in alone:
        assert packed[name].equals(alone[name]), name


def test_the_units_outputs_are_packed_where_their_readers_opens_cost_more_than_the_copy():
    """The rule the spill's packing follows, for one file a source: at 50 TB on 256 nodes (16,384 units, their
    edges ~34 MB each), a few hundred components partitions opening every unit's file pay for the copy on an
    object store and on a local disk; one reader never does."""
    units, edges = 16_384, 16_384 * 34_000_000
    assert pack_groups(units, 1, 4096, edges, 8 << 30) == []
    remote = pack_groups(units, 250, 4096, edges, 8 << 30, remote=True)
    assert [i for g in remote for i in g] == list(range(units))
    assert len(remote[0]) == (8 << 30) // (2 * 34_000_000)
    assert pack_groups(units, 250, 4096, edges, 8 << 30) == remote
    # the spill's rule is this one with its two files a shard
    assert spill_groups(100, 32, 64, 10_000_000, 1_600_000) == pack_groups(100, 32, 64, 10_000_000, 1_600_000, kinds=2)


def test_the_components_run_in_the_partitions_their_edges_need(nd_corpus, nd_files, tmp_path):
    """The edge files are written in partitions sized for the whole spill (before any edge is counted); the
    components then run in what the counted edges need (their steps read partitions x files pieces), fewer
    here, and the clusters are the unconstrained run's, row for row."""
    ids, _, _ = nd_corpus
    bands, _ = lsh_params(0.8, 128)
    data = len(ids) * (_BAND_BYTES * bands + _EXACT_BYTES)
    full, _, _ = _run(tmp_path, nd_files, "full", partitions=1)
    tight, done, _ = _run(tmp_path, nd_files, "edges", memory_budget=data // 4)
    edges = done["verified"] + done["exact_edges"]
    assert done["edge_partitions"] >= 8 > done["components_partitions"]
    assert done["components_partitions"] == max(1, -(-2 * edges * 16 * 4 // (data // 4)))
    for name in full:
        assert tight[name].equals(full[name]), name


def test_the_components_steps_read_merged_inputs_and_the_clusters_do_not_change(nd_files, tmp_path):
    """With ``components_merge=on`` each star step's inputs are merged by chunk of its tasks and group of files
    first (the middle pass): its tasks read one file a group, not every file of the step before. The clusters
    are the run's without it, row for row; ``_SUCCESS.json`` says how many steps merged and counts their reads;
    no merged file is left."""
    merged, done, _ = _run(tmp_path, nd_files, "cc-merged", partitions=16, components_merge="on")
    alone, done_alone, _ = _run(tmp_path, nd_files, "cc-alone", partitions=16, components_merge="off")
    assert done["components_partitions"] == done_alone["components_partitions"] == 16
    assert done["components_rounds"] == done_alone["components_rounds"] >= 1
    assert done["components_merged_steps"] >= 1 and done_alone["components_merged_steps"] == 0
    assert done["components_reads"] < done_alone["components_reads"]
    gdir = next((tmp_path / "lake-cc-merged" / "ds" / "dedup").glob("*/_SUCCESS.json")).parent
    assert not [p for p in gdir.glob("components/**/merged/**/*") if p.is_file()]
    for name in alone:
        assert merged[name].equals(alone[name]), name
