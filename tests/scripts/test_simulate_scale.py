"""benchmarks/simulate_scale.py on a small fixture of measured figures: the plan's arithmetic."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_curation.stages.dedup.stage import PARTITION_EXPANSION

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "simulate_scale.py"
GB = 1e9


def _size(gb: float) -> dict:
    """One measured size: CPU = 5 s + 20 s per GB in every stage, 300,000 rows per GB."""
    stage = {"cpu_s": 5 + 20 * gb, "peak_rss": 2 * 2**30, "rows": int(300_000 * gb)}
    return {
        "input_bytes": gb * GB,
        "stages": {
            "ingest": dict(stage),
            "preprocess": dict(stage),
            "dedup": {**stage, "spill_bytes": 30e6 * gb},
            "validate": dict(stage),
        },
    }


@pytest.fixture
def measured(tmp_path) -> Path:
    doc = {
        "sizes": {"1": _size(1), "2": _size(2), "4": _size(4)},
        "airflow": {"task_count": 10, "stages": {"ingest": {"overhead_s": 6.0}, "dedup": {"overhead_s": 12.0}}},
    }
    path = tmp_path / "scale.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
def sim():
    import importlib.util

    spec = importlib.util.spec_from_file_location("simulate_scale", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fit_recovers_the_linear_cost(sim, measured):
    curve = sim.load_curve(json.loads(measured.read_text()))
    ingest = curve["stages"]["ingest"]
    assert ingest["cpu_fixed_s"] == pytest.approx(5)
    assert ingest["cpu_s_per_gb"] == pytest.approx(20)
    assert curve["rows_per_gb"] == pytest.approx(300_000)
    assert curve["airflow_tasks"] == 10


def test_plan_arithmetic(sim, measured):
    curve = sim.load_curve(json.loads(measured.read_text()))
    total, shard = 50e12, 1e9
    p = sim.plan(curve, total, 15e12, shard, nodes=64, cores=64, mem_bytes=512e9)
    assert p["shards"] == 50_000 == total / shard
    rows = 300_000 * 50_000
    assert p["rows"] == pytest.approx(rows)
    budget = 512e9 / 64 - sim.WORKER_BASE
    assert p["lsh_memory_partitions"] == math.ceil(rows * sim.ROW_BYTES * PARTITION_EXPANSION / budget)
    # the global phase has at least as many units (partition ranges) as dedup's 4,096 slots
    assert p["lsh_partitions"] == max(p["lsh_memory_partitions"], 64 * 64) == 4096
    assert p["lsh_partition_bytes"] * PARTITION_EXPANSION <= budget  # one partition, bucketed, fits a worker
    s = p["stages"]["ingest"]
    assert s["cpu_hours"] == pytest.approx((5 + 20 * 50_000) / 3600)
    assert s["workers_per_node"] == 64  # 2 GiB each: memory allows all 64 cores
    assert s["slots"] == 64 * 64
    assert s["waves"] == math.ceil(50_000 / 4096)
    assert s["wall_hours"] == pytest.approx((s["waves"] * (5 + 20 * 50_000) / 50_000 + 6.0) / 3600)
    assert s["node_hours"] == pytest.approx(s["wall_hours"] * 64)
    assert s["slurm_array"] == "--array=0-49999%4096"
    assert s["k8s_indexed_job"] == {"completions": 50_000, "parallelism": 4096}
    assert p["stages"]["dedup"]["spill_bytes"] == pytest.approx(30e6 * 50_000)
    # dedup's barrier runs on one Dask cluster of all the slots, the others as arrays
    assert p["stages"]["dedup"]["dask_workers"] == 4096 and s["dask_workers"] is None
    assert p["wall_hours"] == pytest.approx(sum(x["wall_hours"] for x in p["stages"].values()))
    # validate is one DuckDB query: one node, its 64 cores as threads
    v = p["stages"]["validate"]
    assert (v["units"], v["slots"], v["waves"]) == (1, 64, 1)
    assert v["wall_hours"] == pytest.approx((5 + 20 * 50_000) / 64 / 3600)
    assert v["node_hours"] == pytest.approx(v["wall_hours"])


def test_task_count_does_not_depend_on_shard_count_and_memory_caps_workers(sim, measured):
    curve = sim.load_curve(json.loads(measured.read_text()))
    small = sim.plan(curve, 50e12, 15e12, 0.25e9, nodes=16, cores=64, mem_bytes=512e9)
    large = sim.plan(curve, 50e12, 15e12, 4e9, nodes=16, cores=64, mem_bytes=512e9)
    assert small["shards"] == 16 * large["shards"]
    assert small["airflow_tasks"] == large["airflow_tasks"] == 10
    # 64 cores but 64 GB: 2 GiB workers fit 29 to a node
    tight = sim.plan(curve, 50e12, 15e12, 1e9, nodes=16, cores=64, mem_bytes=64e9)
    assert tight["stages"]["preprocess"]["workers_per_node"] == int(64e9 // (2 * 2**30))
    # more nodes: less wall, about the same node-hours
    a = sim.plan(curve, 50e12, 15e12, 1e9, nodes=16, cores=64, mem_bytes=512e9)
    b = sim.plan(curve, 50e12, 15e12, 1e9, nodes=64, cores=64, mem_bytes=512e9)
    assert b["wall_hours"] < a["wall_hours"]
    assert b["stages"]["preprocess"]["node_hours"] == pytest.approx(a["stages"]["preprocess"]["node_hours"], rel=0.25)


def test_cli_prints_the_table(measured, tmp_path):
    out = tmp_path / "plans.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--json", str(measured), "--nodes", "16,64", "--out", str(out)],
        check=True,
        capture_output=True,
        text=True,
    )
    assert "| 64 | dedup |" in proc.stdout and "50,000 shards" in proc.stdout
    plans = json.loads(out.read_text())["plans"]
    assert [p["nodes"] for p in plans] == [16, 64]


def test_partition_by_shard_reads_are_charged_to_dedup(sim, measured):
    doc = json.loads(measured.read_text())
    # one partition: 100 CPU s; 11 partitions over 10 shards: 110 CPU s -> 0.1 s per (partition x shard)
    doc["sizes"]["4"]["compare"] = {
        "unconstrained": {"cpu_s": 100.0, "shards": 10, "global": {"partitions": 1}},
        "quarter": {"cpu_s": 110.0, "shards": 10, "global": {"partitions": 11}},
    }
    curve = sim.load_curve(doc)
    assert curve["cross_s"] == pytest.approx(0.1)
    p = sim.plan(curve, 50e12, 15e12, 1e9, nodes=64, cores=64, mem_bytes=512e9)
    cross = 0.1 * p["lsh_partitions"] * p["shards"]
    assert p["phase2_row_group_reads"] == p["lsh_partitions"] * p["shards"]
    assert p["stages"]["dedup"]["cross_cpu_hours"] == pytest.approx(cross / 3600)
    assert p["stages"]["dedup"]["cpu_hours"] == pytest.approx((5 + 20 * 50_000 + cross) / 3600)
    assert p["stages"]["preprocess"]["cross_cpu_hours"] == 0
    # a measured constant per pair replaces the curve's; more slots than the memory's partitions raise the
    # partition count, and the pairs with it
    q = sim.plan(curve, 50e12, 15e12, 1e9, nodes=256, cores=64, mem_bytes=512e9, pair_s=0.02)
    assert q["lsh_partitions"] == 256 * 64 > p["lsh_partitions"]
    assert q["stages"]["dedup"]["cross_cpu_hours"] == pytest.approx(0.02 * 256 * 64 * 50_000 / 3600)


def test_packed_spill_replaces_the_partition_by_shard_pairs_where_the_stage_would_pack(sim, measured):
    """With the pack micro-benchmark's figures, the plan charges (partition, pack) pairs, the copy and the
    pieces' decode, as the stage's own rule decides for an object store; its GETs fall with the pairs."""
    curve = sim.load_curve(json.loads(measured.read_text()))
    pack = {"median": {"packed": 1.0}, "batches": 100_000, "pack_s_per_mb": 0.002}
    bare = sim.plan(curve, 50e12, 15e12, 1e9, nodes=64, cores=64, mem_bytes=512e9, pair_s=1e-3)
    packed = sim.plan(
        curve, 50e12, 15e12, 1e9, nodes=64, cores=64, mem_bytes=512e9, pair_s=1e-3, micro={"spill_pack": pack}
    )
    assert bare["spill_packs"] is None
    groups = packed["spill_packs"]["groups"]
    assert groups > 1 and groups < packed["shards"]
    spill_mb = packed["stages"]["dedup"]["spill_bytes"] / 1e6
    pieces = 2 * packed["lsh_partitions"] * packed["shards"]
    cross = 1e-3 * packed["lsh_partitions"] * groups + 0.002 * spill_mb + 1e-5 * pieces
    assert packed["stages"]["dedup"]["cross_cpu_hours"] == pytest.approx(cross / 3600)
    assert packed["stages"]["dedup"]["cross_cpu_hours"] < bare["stages"]["dedup"]["cross_cpu_hours"]
    assert packed["phase2_row_group_reads"] == packed["lsh_partitions"] * groups
    assert packed["stages"]["dedup"]["get_requests"] < bare["stages"]["dedup"]["get_requests"] / 10


def test_dedup_fit_takes_out_each_runs_own_partition_term(sim, measured):
    doc = json.loads(measured.read_text())
    doc["sizes"]["4"]["compare"] = {
        "unconstrained": {"cpu_s": 100.0, "shards": 10, "global": {"partitions": 1}},
        "quarter": {"cpu_s": 110.0, "shards": 10, "global": {"partitions": 11}},
    }
    # the curve's own 4 GB dedup run had 11 partitions over 10 shards: 10 s of its CPU is that term
    doc["sizes"]["4"]["stages"]["dedup"].update(cpu_s=5 + 20 * 4 + 10.0, shards=10, **{"global": {"partitions": 11}})
    dedup = sim.load_curve(doc)["stages"]["dedup"]
    assert dedup["cpu_s_per_gb"] == pytest.approx(20)
    assert dedup["cpu_fixed_s"] == pytest.approx(5)


def test_the_largest_real_scheduler_run_gives_the_airflow_figures(sim, measured):
    doc = json.loads(measured.read_text())
    doc["airflow_real"] = {
        "1": {"gb": 1, "task_count": 19, "stages": {"ingest": {"overhead_s": 5.0}}},
        "10": {"gb": 10, "task_count": 19, "stages": {"ingest": {"overhead_s": 8.7}, "dedup": {"overhead_s": -1}}},
    }
    curve = sim.load_curve(doc)
    assert curve["airflow_tasks"] == 19  # not the dag.test() run's 10
    assert curve["airflow_overhead_s"] == {"ingest": 8.7, "dedup": 0.0}  # the 10 GB run's; never negative


def test_docs_plan_table_is_regenerated_from_the_committed_json_byte_for_byte(sim):
    """docs/scale.md's plan is what its own command prints from the JSON committed under benchmarks/results/."""
    import shlex

    doc = (SCRIPT.parents[1] / "docs" / "scale.md").read_text(encoding="utf-8")
    start, end = "<!-- simulate:start -->\n", "\n<!-- simulate:end -->"
    shown = doc[doc.index(start) + len(start) : doc.index(end)]
    command = shown.splitlines()[0].removeprefix("Command: `").removesuffix("`")
    argv = shlex.split(command)[2:]  # less the interpreter and the script
    assert "--json" in argv and argv[argv.index("--json") + 1].startswith("benchmarks/results/")
    assert sim.block(argv) == shown
    start, end = "<!-- simulate_out:start -->\n", "\n<!-- simulate_out:end -->"
    out = doc[doc.index(start) + len(start) : doc.index(end)]
    assert sim.out_markdown(sim.out_plans_for(sim.parser().parse_args(argv))) == out
    start, end = "<!-- simulate_web:start -->\n", "\n<!-- simulate_web:end -->"
    web = doc[doc.index(start) + len(start) : doc.index(end)]
    assert sim.web_markdown(sim.web_plans_for(sim.parser().parse_args(argv))) == web


def test_the_plans_components_steps_read_merged_inputs(sim):
    """At the 50 TB plan (the committed curve) the components' steps read ~3 MB pieces of every file of the step
    before (hundreds x hundreds a step): the stage's middle pass merges their inputs, and the plan counts its reads
    (chunks x files + tasks x groups) instead, fewer than half; without it, the pairs the steps make."""
    args = sim.parser().parse_args(
        [
            "--json",
            "benchmarks/results/scale.json",
            "--micro",
            "--tb",
            "50",
            "--tokens",
            "15e12",
            "--shard-gb",
            "1",
            "--nodes",
            "16",
            "--cores",
            "64",
            "--mem-gb",
            "512",
        ]
    )
    (p,) = sim.plans_for(args)
    c = p["components"]
    parts, units = c["step_partitions"], p["lsh_partitions"]
    # the first step in the partitions the curve's edges need (hundreds at 50 TB); 16 nodes: the units' edge
    # files are not packed
    assert parts[0] == c["partitions"] > 100 and not c["edge_groups"]
    last = parts[-1] if parts[-1] > 1 else 0
    assert c["step_reads_unmerged"] == parts[0] * units + sum(a * b for a, b in zip(parts, parts[1:])) + last * last
    assert c["step_reads"] * 2 < c["step_reads_unmerged"]  # the middle pass runs where it at least halves reads
    assert c["gets"] < c["gets_unmerged"]


def test_web_data_in_charges_boilerplate_per_gb_and_its_global_step_as_the_stage_plans_it(sim):
    """The web table's arithmetic on made-up figures: boilerplate at its marginal CPU a GB between two lake sizes,
    a unit a shard; its global step's partitions (fitting the budget, up to the cap) and reads with the middle
    pass as the stage plans them, far below partitions x shards."""
    from airflow_curation.core.lsh import partitions_for
    from airflow_curation.stages.boilerplate.stage import MAX_PARTITIONS, PARTITION_EXPANSION, spill_estimate

    assert sim.web_plan({}, 50e12, 50_000, nodes=16, cores=64, rows=14e9) is None  # no figures, no table
    runs = [
        {"name": "ours: boilerplate stage", "size": n, "cpu": c}
        for n, cs in ((1000, (2, 3, 9)), (4000, (8, 9, 7)))
        for c in cs
    ]
    micro = {"boilerplate": {"sizes": [1000, 4000], "text_bytes": {"1000": 1e8, "4000": 4e8}, "runs": runs}}
    p = sim.web_plan(micro, 50e12, 50_000, nodes=16, cores=64, rows=14e9)
    step = p["steps"]["boilerplate"]
    assert p["cpu_s_per_gb"] == pytest.approx((8 - 3) / 0.3)  # the medians' difference over 0.3 GB
    assert step["cpu_hours"] == pytest.approx(50e3 * (5 / 0.3) / 3600)
    assert step["units"] == 50_000 and step["waves"] == math.ceil(50_000 / (16 * 64))
    est = spill_estimate(int(14e9))
    budget = p["memory_budget"]
    assert budget == 512 << 20  # the stage's default: what a user's run has
    assert p["partitions"] == partitions_for(est, budget, PARTITION_EXPANSION, maximum=MAX_PARTITIONS) > 4096
    assert p["partitions"] < MAX_PARTITIONS  # under the cap at 50 TB
    assert est / p["partitions"] * PARTITION_EXPANSION <= budget  # a partition fits the budget
    assert p["global_reads"] == p["chunks"] * 50_000 + p["partitions"] * p["groups"]
    assert p["global_reads"] < p["direct_reads"] / 100 and step["reads"] == 2 * 50_000 + p["global_reads"]


def test_training_data_out_charges_tokenize_export_and_the_middle_pass_as_the_stage_plans_them(sim):
    """The out table's arithmetic on made-up figures: tokenize by text bytes, export by tokens (scatter and gather
    halves), the merge by GB merged; export's gather units as the stage plans them for an array (one a task, at
    most one a bucket), and its reads with the middle pass as ``merge_plan`` shapes it, far below units x shards."""
    from airflow_curation.core.merge_plan import merge_plan

    micro = {
        "tokenize": {"text_mb": 10.0, "runs": [{"contender": "ours", "cpu": c} for c in (4.0, 5.0, 9.0)]},
        "export": {"median_tokens_per_cpu_s": 40e6},
        "export_merge": {"memory": {"range_bytes": 1e9, "runs": [{"cpu_s": 2.0}, {"cpu_s": 3.0}]}},
    }
    p = sim.out_plan(micro, 50e12, 15e12, 50_000, nodes=16, cores=64)
    steps = p["steps"]
    assert steps["tokenize"]["cpu_hours"] == pytest.approx(50e12 * 0.5e-6 / 3600)  # median 5 s for 10 MB
    assert steps["export: scatter"]["cpu_hours"] == steps["export: gather"]["cpu_hours"]
    assert steps["export: scatter"]["cpu_hours"] * 2 == pytest.approx(15e12 / 40e6 / 3600)
    assert steps["export: merge"]["cpu_hours"] == pytest.approx(30e12 / 1e9 * 2.5 / 3600)  # uint16 tokens
    units, buckets = steps["export: gather"]["units"], math.ceil(30e12 / 2**30)
    assert units == buckets == p["buckets"]  # 50,000 array tasks, 27,940 buckets: one bucket a unit
    k, g = merge_plan(units, 50_000, int(30e12), 8 << 30, force=True)
    assert steps["export: merge"]["units"] == math.ceil(units / k) * math.ceil(50_000 / g)
    assert steps["export: gather"]["reads"] == units * math.ceil(50_000 / g)
    assert steps["export: merge"]["reads"] + steps["export: gather"]["reads"] < p["gather_direct_reads"] / 100
    assert steps["tokenize"]["waves"] == math.ceil(50_000 / (16 * 64))
    assert "mix" not in steps  # no mix.json: not in the table
    assert sim.out_plan({}, 50e12, 15e12, 50_000, nodes=16, cores=64) is None  # no figures, no table
    # mix at its marginal CPU a row between two lake sizes (the medians: 3 s and 7 s for 1 M and 2 M rows)
    runs = [
        {"name": "ours: mix stage", "size": n, "rows": n, "cpu": c}
        for n, cs in ((1e6, (2, 3, 9)), (2e6, (7, 6, 8)))
        for c in cs
    ]
    micro["mix"] = {"sizes": [1e6, 2e6], "runs": runs}
    m = sim.out_plan(micro, 50e12, 15e12, 50_000, nodes=16, cores=64, rows=14e9)["steps"]["mix"]
    assert m["cpu_hours"] == pytest.approx(14e9 * 4e-6 / 3600)  # 4 us a row, not the 3 us of the small lake alone
    assert m["units"] == 50_000 and m["reads"] == 3 * 50_000


def test_plan_charges_task_fixed_cost_and_micro_benchmark_terms(sim, measured):
    doc = json.loads(measured.read_text())
    doc["fixed"] = {"stages": {s: {"cpu_s": 1.5, "cpu_s_median": 1.5} for s in ("ingest", "preprocess", "dedup")}}
    curve = sim.load_curve(doc)
    micro = {
        "manifest": {"samples": {"50000": {"after": {"task_plan_N50000": [0.01, 0.02, 0.03], "gate_look": [0.5]}}}},
        "spill": {"partitions": {"1634": {"after": {"median_ms": 0.2}}, "4096": {"after": {"median_ms": 0.25}}}},
    }
    p = sim.plan(curve, 50e12, 15e12, 1e9, nodes=64, cores=64, mem_bytes=512e9, micro=micro)
    s = p["stages"]["preprocess"]
    # 50,000 tasks, each a process of 1.5 CPU-s plus 20 ms of planning
    assert s["task_fixed_cpu_hours"] == pytest.approx(50_000 * 1.52 / 3600)
    assert s["cpu_hours"] == pytest.approx((5 + 20 * 50_000 + 50_000 * 1.52) / 3600)
    assert s["wall_hours"] == pytest.approx((s["waves"] * (5 + 20 * 50_000) / 50_000 + 13 * 1.52 + 0.5) / 3600)
    # 4,096 partitions on 64 nodes: the spill reads measured at 4,096, two a pair
    assert p["pair_s"] == pytest.approx(2 * 0.25e-3)
    d = p["stages"]["dedup"]
    assert d["get_requests"] >= 2 * 4096 * 50_000  # a ranged GET per pair and spill file
    assert s["get_requests"] == 50_000 * (2 + 2) and s["put_requests"] == 2 * 50_000


def test_repeated_runs_slope_is_the_marginal_from_the_fixed_cost_lake(sim, measured):
    doc = json.loads(measured.read_text())
    doc["fixed"] = {"stages": {"ingest": {"cpu_s": 5.0, "cpu_s_median": 5.0}}}
    top = doc["sizes"]["4"]["stages"]["ingest"]
    top["cpu_s_runs"] = [85.0, 80.0 + 5, 200.0]  # one slow run (a kernel compiling) is outvoted
    ingest = sim.load_curve(doc)["stages"]["ingest"]
    assert ingest["cpu_s_per_gb"] == pytest.approx(20) and ingest["cpu_fixed_s"] == 0.0


def test_spill_bytes_grow_with_the_plans_partition_count(sim, measured):
    doc = json.loads(measured.read_text())
    for size in doc["sizes"].values():
        size["stages"]["dedup"]["global"] = {"partitions": 4}
    curve = sim.load_curve(doc)
    assert curve["stages"]["dedup"]["spill_partitions"] == 4
    # a shard spills 100 bytes at 4 partitions, 150 at 64 and 200 at 4,096
    micro = {
        "spill_bytes": {
            "sizes": {
                "4": {"bands": 90, "exact": 10},
                "64": {"bands": 140, "exact": 10},
                "4096": {"bands": 180, "exact": 20},
            }
        }
    }
    assert sim.spill_bytes_at(micro["spill_bytes"], 16) == pytest.approx(125)  # halfway in log P
    assert sim.spill_bytes_at(micro["spill_bytes"], 16_384) == 200  # held past the last measured count
    flat = sim.plan(curve, 50e12, 15e12, 1e9, nodes=64, cores=64, mem_bytes=512e9)
    grown = sim.plan(curve, 50e12, 15e12, 1e9, nodes=64, cores=64, mem_bytes=512e9, micro=micro)
    assert flat["spill_growth"] == 1.0 and grown["spill_growth"] == pytest.approx(2.0)  # 4,096 partitions
    assert grown["stages"]["dedup"]["spill_bytes"] == pytest.approx(2 * flat["stages"]["dedup"]["spill_bytes"])
    spill = flat["stages"]["dedup"]["spill_bytes"]
    assert grown["stages"]["dedup"]["read_bytes"] - flat["stages"]["dedup"]["read_bytes"] == pytest.approx(spill)
    assert grown["stages"]["preprocess"]["read_bytes"] == flat["stages"]["preprocess"]["read_bytes"]


def test_the_components_and_the_gather_count_their_requests_as_the_stage_would_read(sim, measured):
    """With the curve's edges a row, dedup's GETs hold the components' steps (each opening every file of the step
    before, in the partitions the live edges the curve recorded need, down to one in memory), the first step's
    reads of the units' edge files, and the gather's of every labels file and of the units' exact duplicates,
    the units' outputs packed by the stage's own rule; edges that stay alive longer, more GETs; no edges
    measured, no term."""
    doc = json.loads(measured.read_text())
    assert sim.plan(sim.load_curve(doc), 50e12, 15e12, 1e9, nodes=64, cores=64, mem_bytes=512e9)["components"] is None
    doc["sizes"]["4"]["stages"]["dedup"]["global"] = {
        "verified": 1_000_000,
        "exact_edges": 200_000,
        "components_steps": [2_000, 1_800, 200, 200, 10, 10, 0],
    }
    curve = sim.load_curve(doc)
    dedup = curve["stages"]["dedup"]
    assert dedup["edges_per_row"] == pytest.approx(1.2e6 / 1.2e6)
    assert dedup["components_live"] == [1.0, 0.9, 0.1, 0.1, 0.005, 0.005, 0.0]
    # a record cut short by union-find in memory (what was left fit one partition at the lake's size) is not a
    # decay to plan with: the measured default takes its place
    cut = json.loads(json.dumps(doc))
    cut["sizes"]["4"]["stages"]["dedup"]["global"]["components_steps"] = [2_000, 1_800]
    assert "components_live" not in sim.load_curve(cut)["stages"]["dedup"]
    short, measured_decay = (
        sim.plan(sim.load_curve(cut), 50e12, 15e12, 1e9, nodes=256, cores=64, mem_bytes=512e9, components_live=live)
        for live in (None, sim.COMPONENTS_LIVE)
    )
    assert short["components"] == measured_decay["components"] and short["components"]["steps"] > 2
    p = sim.plan(curve, 50e12, 15e12, 1e9, nodes=256, cores=64, mem_bytes=512e9)
    c = p["components"]
    units, cc, out = p["lsh_partitions"], c["partitions"], 256
    parts = c["step_partitions"]
    assert cc > 1 and cc < units and parts[0] == parts[1] == cc
    assert parts == sorted(parts, reverse=True) and parts[3] <= cc // 5  # 10% of the edges left after step 2
    assert c["edge_groups"] > 1 and c["edge_groups"] < units  # 16,384 units: their files packed
    last = parts[-1] if parts[-1] > 1 else 0
    steps = sum(a * b for a, b in zip(parts[1:], parts[:-1])) + last * last
    label_files = max(1, last) + sum(parts[2::2])
    opens = steps + out * label_files + (out * units if not c["exact_groups"] else 0)
    packs = cc * c["edge_groups"] + out * c["exact_groups"]
    copied = units * (1 + bool(c["exact_groups"]))
    assert c["gets_unmerged"] == sim.OPEN_GETS * opens + sim.PACK_READ_GETS * packs + copied
    assert c["step_reads_unmerged"] == cc * c["edge_groups"] + steps
    # each step's inputs merged first where the stage's middle pass would (merge_plan): fewer reads, fewer GETs
    assert c["step_reads"] <= c["step_reads_unmerged"] and c["gets"] <= c["gets_unmerged"]
    assert c["gets"] < c["gets_unpacked"] and c["gets"] < c["gets_every_step_at_cc"]
    bare = sim.io_terms(
        curve, "dedup", 50_000, p["shards"], p["shard_groups"], units, p["stages"]["dedup"]["spill_bytes"]
    )
    assert p["stages"]["dedup"]["get_requests"] == bare[1] + c["gets"]
    slower = (1.0, 0.9, 0.9, 0.9, 0.9, 0.9, 0.0)  # nothing finished until the end: every step at nearly cc
    more = sim.plan(curve, 50e12, 15e12, 1e9, nodes=256, cores=64, mem_bytes=512e9, components_live=slower)
    assert more["components"]["gets"] > 2 * c["gets"]
