"""Plan a large curation from the measured 1 -> 10 GB curve (the JSON ``bench_scale.py`` writes).

    .venv/bin/python benchmarks/simulate_scale.py [--json benchmarks/out/scale.json] [--tb 50] [--tokens 15e12]
                                                  [--shard-gb 1] [--nodes 16,64,256] [--cores 64] [--mem-gb 512]

The model, stage by stage (ingest, preprocess, dedup, validate):

* cost: CPU seconds = fixed + slope x GB, fitted by least squares on the measured sizes; at terabytes
  only the slope matters. One worker = one core (how every stage was measured). Where the JSON has
  repeated runs and a per-task fixed cost (``bench_scale.py --repeats --fixed``), the slope is the median
  marginal cost from the fixed-cost lake to the largest size, and the fixed cost is paid once per task.
* shards = input bytes / shard size (text bytes per shard, ``--shard-gb``); a stage's units are its shards.
* workers per node = min(cores, node memory / the stage's measured peak RSS per worker). Validate is one
  DuckDB query over the whole run (one unit): one node, its cores as DuckDB threads.
* LSH partitions: the dedup global phase holds rows x (16 B x bands + 24 B) (measured rows per GB), and one
  partition, expanded 2x while it is bucketed (the stage's ``PARTITION_EXPANSION``), must fit one worker's memory
  (node memory / cores, less the worker's base): ceil(data x 2 / that), as ``core.lsh.partitions_for``; and the global phase has at
  least as many units (contiguous ranges of partitions) as dedup's slots, so partitions = the larger of
  the two, as the stage's ``_layout`` chooses.
* Slurm: one array per stage, ``--array=0-(G-1)%K`` with G = shard groups (one shard per group up to
  ``--max-array``, Slurm's MaxArraySize) and K = nodes x workers per node; Kubernetes: an Indexed Job
  with completions = G and parallelism = K.
* wall = waves x time per unit (waves = ceil(units / K)), plus the measured Airflow overhead per stage;
  node-hours = wall x nodes.
* dedup also pays, per (LSH partition x shard) pair, the measured cost of writing and reading one
  partition of a shard's spill files (``cross``; ``--pair-ms`` overrides the curve's figure): it grows
  with the square of the data (and with the slots, once they outnumber the memory's partitions), which
  is where a shuffle or grouped spill files take over (see docs/scale.md). The cost of a pair is
  constant in the partition count since the spill index is binary (``benchmarks/bench_spill_reads.py``),
  so a figure measured at 18 partitions holds at thousands. Where the stage would pack the spill (its own
  rule, ``stages.dedup.stage.spill_groups``, for an object store: the plan counts GETs), the pairs are
  (partition, pack) ones, plus the pack's copy and each piece's decode (``bench_spill_pack.py``'s figures
  at 4,096 partitions, ``results/spill_pack_p4096.json``).
* after its units, dedup's GETs hold the components (the first step's partitions sized by the curve's edges a
  row; each step reads every file of the step before, in the partitions its live edges need, by the
  fractions a curve recorded or ``COMPONENTS_LIVE``: ``components_steps``) and the gather, reading the
  units' edge and exact-duplicate files packed where the stage's rule (``pack_groups``) would pack them for an
  object store (``components_terms``).
* Airflow tasks: the pipeline DAG's launch + gate per stage, and their overhead per stage, from the
  largest real-scheduler run (``--airflow-stack real``), else the ``dag.test()`` run; independent of
  the shard count (shards are units inside a task's job, never tasks).
* training data out (with ``--micro``, a second table, :func:`out_plan`): tokenize and export's scatter,
  middle pass and gather from their committed micro-benchmarks (not the curve), export's units and reads as
  the stage plans them for an array of the shard groups.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # results.py, when loaded by path
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))  # the stage's packing rule
from results import replace_block  # noqa: E402

STAGES = ("ingest", "preprocess", "dedup", "validate")
ROW_BYTES = 16 * 9 + 24  # dedup global-phase bytes per row (9 bands), as the stage's planner counts
WORKER_BASE = 768 << 20  # a worker with pyarrow, numba and the kernels loaded (stages/dedup)


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(fixed, slope) of ys = fixed + slope x xs, least squares; one point: through the origin."""
    if len(xs) == 1:
        return 0.0, ys[0] / xs[0]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - slope * mx, slope


def load_curve(doc: dict) -> dict:
    """Per stage: CPU fit (seconds vs GB of input), peak RSS per worker; rows per GB; Airflow figures."""
    sizes = sorted(doc["sizes"].values(), key=lambda r: r["input_bytes"])
    if not sizes:
        raise ValueError("no measured sizes in the JSON")
    gbs = [r["input_bytes"] / 1e9 for r in sizes]
    # The partitioned spill's price: each partition reads one row group of every shard's spill file.
    # Measured as the extra CPU of a many-partition dedup run over a one-partition run of the same data,
    # per (partition x shard) pair: spill row groups written in phase 1 and read in phases 2 and 3.
    cross = []
    for r in sizes:
        runs = [c for c in (r.get("compare") or {}).values() if (c.get("global") or {}).get("partitions")]
        if len(runs) >= 2:
            lo = min(runs, key=lambda c: c["global"]["partitions"])
            hi = max(runs, key=lambda c: c["global"]["partitions"])
            pairs = (hi["global"]["partitions"] - lo["global"]["partitions"]) * hi["shards"]
            if pairs > 0:
                cross.append(max(0.0, hi["cpu_s"] - lo["cpu_s"]) / pairs)
    cross_s = cross[-1] if cross else 0.0  # from the largest size measured: closest to scale
    curve = {"gb": gbs, "stages": {}}
    curve["cross_s"] = cross_s
    for stage in STAGES:
        cpu = [r["stages"][stage]["cpu_s"] for r in sizes]
        if stage == "dedup":  # the fit is of the linear part: each run's own partition x shard term out
            cpu = [
                c
                - cross_s
                * max(0, ((r["stages"][stage].get("global") or {}).get("partitions", 1)) - 1)
                * r["stages"][stage].get("shards", 0)
                for c, r in zip(cpu, sizes)
            ]
        fixed, slope = fit(gbs, cpu)
        task = ((doc.get("fixed") or {}).get("stages") or {}).get(stage)
        if task and sizes[-1]["stages"][stage].get("cpu_s_runs"):
            # repeated runs and a measured per-task cost: the slope is the marginal cost from the fixed-cost lake
            # to the largest size (median over its runs), the fixed part is charged per task (plan), not here;
            # least squares over a few small sizes lets one slow run (a kernel compiled) tilt it
            top = sizes[-1]["stages"][stage]
            partition_term = top["cpu_s"] - cpu[-1]  # dedup's, taken out above
            task_s = task.get("cpu_s_median", task["cpu_s"])
            fixed = 0.0
            slope = statistics.median((c - partition_term - task_s) / gbs[-1] for c in top["cpu_s_runs"])
        curve["stages"][stage] = {
            "cpu_fixed_s": fixed,
            "cpu_s_per_gb": slope,
            "peak_rss": max(r["stages"][stage]["peak_rss"] for r in sizes),
            "spill_bytes_per_gb": 0.0,
        }
        if stage == "dedup":  # the size that spilled most per GB, and its partition count
            top_spill = max(sizes, key=lambda r: r["stages"][stage].get("spill_bytes", 0) / r["input_bytes"])
            curve["stages"][stage]["spill_bytes_per_gb"] = top_spill["stages"][stage].get("spill_bytes", 0) / (
                top_spill["input_bytes"] / 1e9
            )
            curve["stages"][stage]["spill_partitions"] = (top_spill["stages"][stage].get("global") or {}).get(
                "partitions"
            )
            # the components' input: the largest size's edges (candidate pairs verified + exact duplicates) a row
            top_global, top_rows = sizes[-1]["stages"][stage].get("global") or {}, sizes[-1]["stages"][stage]["rows"]
            curve["stages"][stage]["edges_per_row"] = (
                top_global.get("verified", 0) + top_global.get("exact_edges", 0)
            ) / max(1, top_rows)
            curve["stages"][stage]["exact_per_row"] = top_global.get("exact_edges", 0) / max(1, top_rows)
            steps = top_global.get("components_steps")  # the live edges after each star step, where recorded
            # Only a record that runs to the end (every star finished in partitioned steps) is a decay the plan
            # can take; one cut short where what was left fit one partition (union-find in memory at the lake's
            # size) says nothing of the steps a larger graph takes after it: the 16 GB lake's is used then.
            if steps and steps[0] and steps[-1] == 0:
                curve["stages"][stage]["components_live"] = [n / steps[0] for n in steps]
    curve["rows_per_gb"] = max(r["stages"]["ingest"]["rows"] / (r["input_bytes"] / 1e9) for r in sizes)
    # bytes each stage writes per GB of input (what the next stages read), from the largest size
    top = sizes[-1]
    curve["out_bytes_per_gb"] = {
        s: top["stages"][s].get("bytes", 0) / (top["input_bytes"] / 1e9) for s in STAGES if s in top["stages"]
    }
    # a stage process's own cost (its start, imports, planning one tiny unit): paid once per task
    fixed = (doc.get("fixed") or {}).get("stages") or {}
    curve["task_fixed_s"] = {s: fixed[s].get("cpu_s_median", fixed[s]["cpu_s"]) for s in STAGES if s in fixed}
    real = doc.get("airflow_real") or {}  # by size: the real scheduler's run at the largest, else dag.test()'s
    af = real[max(real, key=float)] if real else (doc.get("airflow") or {})
    curve["airflow_tasks"] = int(af.get("task_count") or 2 * (len(STAGES) + 1))  # + enrich's two
    curve["airflow_overhead_s"] = {
        s: max(0.0, v.get("overhead_s", 0.0)) for s, v in (af.get("stages") or {}).items() if s in STAGES
    }
    return curve


def plan(
    curve: dict,
    total_bytes: float,
    tokens: float,
    shard_bytes: float,
    nodes: int,
    cores: int,
    mem_bytes: float,
    max_array: int = 100_000,
    pair_s: float | None = None,
    micro: dict | None = None,
    components_live: tuple[float, ...] | None = None,
) -> dict:
    """The run on ``nodes`` nodes: per stage units, slots, waves, wall and node-hours; the LSH partitions."""
    from airflow_curation.stages.dedup.stage import PARTITION_EXPANSION  # the stage's own sizing rule

    gb = total_bytes / 1e9
    shards = math.ceil(total_bytes / shard_bytes)
    rows = curve["rows_per_gb"] * gb
    worker_mem = mem_bytes / cores
    budget = max(1.0, worker_mem - WORKER_BASE)
    memory_partitions = math.ceil(rows * ROW_BYTES * PARTITION_EXPANSION / budget)
    dedup_slots = nodes * max(1, min(cores, int(mem_bytes // max(1, curve["stages"]["dedup"]["peak_rss"]))))
    partitions = max(memory_partitions, dedup_slots)  # global units >= slots, each a range of partitions
    micro = micro or {}
    if pair_s is None:  # the spill micro-benchmark's at this partition count, else the curve's
        pair_s = spill_pair_s(micro.get("spill"), partitions) if micro.get("spill") else curve.get("cross_s", 0.0)
    task_plan_s, gate_look_s = manifest_terms(micro.get("manifest"))
    dedup = curve["stages"].get("dedup", {})
    spill_growth = spill_bytes_growth(micro.get("spill_bytes"), dedup.get("spill_partitions"), partitions)
    # each stage's spill over the run, once (dedup's decides the packs and feeds its I/O terms)
    spills = {stage: c.get("spill_bytes_per_gb", 0.0) * spill_growth * gb for stage, c in curve["stages"].items()}
    packs = spill_packs(micro.get("spill_pack"), shards, partitions, spills.get("dedup", 0.0), budget)
    components = components_terms(dedup, rows, shards, partitions, budget, components_live)
    groups = min(shards, max_array)
    out = {
        "bytes": total_bytes,
        "tokens": tokens,
        "nodes": nodes,
        "cores": cores,
        "shards": shards,
        "shard_bytes": shard_bytes,
        "shard_groups": groups,
        "rows": rows,
        "lsh_partitions": partitions,
        "lsh_memory_partitions": memory_partitions,
        "pair_s": pair_s,
        "task_plan_s": task_plan_s,
        "gate_look_s": gate_look_s,
        "lsh_partition_bytes": rows * ROW_BYTES / partitions,
        "lsh_budget_per_worker": budget,
        "phase2_row_group_reads": partitions * (packs["groups"] if packs else shards),
        "spill_packs": packs,
        "components": components,
        "spill_growth": spill_growth,
        "airflow_tasks": curve["airflow_tasks"],
        "stages": {},
    }
    for stage, c in curve["stages"].items():
        per_node = max(1, min(cores, int(mem_bytes // max(1, c["peak_rss"]))))
        slots = nodes * per_node
        cpu_s = c["cpu_fixed_s"] + c["cpu_s_per_gb"] * gb
        cross_s = 0.0
        if stage == "dedup":
            cross_s = (
                pair_s * partitions * shards if not packs else pair_s * partitions * packs["groups"] + packs["cpu_s"]
            )
        cpu_s += cross_s
        units = shards  # dedup's global phase has `partitions` units, >= slots by the rule above
        if stage == "validate":  # one DuckDB query over the run: one node, its cores as threads
            per_node, slots, units = cores, cores, 1
        tasks = 1 if stage == "validate" else groups
        # each task pays a process's fixed cost and plans its slice of the upstream manifest
        task_s = curve.get("task_fixed_s", {}).get(stage, 0.0) + task_plan_s
        fixed_s = task_s * tasks
        waves = math.ceil(units / slots)
        per_unit = cpu_s / cores if stage == "validate" else cpu_s / units  # validate: threads share it
        wall = (
            waves * per_unit
            + math.ceil(tasks / slots) * task_s
            + gate_look_s
            + curve["airflow_overhead_s"].get(stage, 0.0)
        )
        cpu_s += fixed_s
        spill_bytes = spills[stage]
        reads, gets, puts = io_terms(curve, stage, gb, shards, tasks, partitions, spill_bytes, packs)
        if stage == "dedup" and components:
            gets, puts = gets + components["gets"], puts + components["puts"]
        nodes_used = 1 if stage == "validate" else nodes
        out["stages"][stage] = {
            "cpu_hours": cpu_s / 3600,
            "workers_per_node": per_node,
            "slots": slots,
            "units": units,
            "waves": waves,
            "wall_hours": wall / 3600,
            "node_hours": wall / 3600 * nodes_used,
            "slurm_array": f"--array=0-{groups - 1}%{slots}",
            "k8s_indexed_job": {"completions": groups, "parallelism": slots},
            # dedup's global phase is a barrier over every shard: one Dask cluster runs all three phases
            "dask_workers": slots if stage == "dedup" else None,
            "spill_bytes": spill_bytes,
            "cross_cpu_hours": cross_s / 3600,
            "task_fixed_cpu_hours": fixed_s / 3600,
            "tasks": tasks,
            "read_bytes": reads,
            "get_requests": gets,
            "put_requests": puts,
            "read_gb_per_s": reads / 1e9 / wall if wall else 0.0,
        }
    out["wall_hours"] = sum(s["wall_hours"] for s in out["stages"].values())
    out["get_requests"] = sum(s["get_requests"] for s in out["stages"].values())
    out["put_requests"] = sum(s["put_requests"] for s in out["stages"].values())
    out["node_hours"] = sum(s["node_hours"] for s in out["stages"].values())
    out["tokens_per_node_hour"] = tokens / out["node_hours"] if out["node_hours"] else None
    return out


def spill_packs(pack: dict | None, shards: int, partitions: int, spill_bytes: float, budget: float) -> dict | None:
    """The global phase's packs where the stage would pack (its rule for an object store, one partition a
    unit): groups, and the CPU seconds of packing and of decoding the pieces from ``bench_spill_pack.py``'s JSON
    (per MB copied, per piece read from a pack). None: no figures, or the stage would not pack."""
    if not pack:
        return None
    from airflow_curation.stages.dedup.stage import spill_groups

    groups = spill_groups(shards, partitions, partitions, int(spill_bytes), int(budget), remote=True)
    if not groups:
        return None
    piece_s = pack["median"]["packed"] / pack["batches"]
    cpu_s = pack["pack_s_per_mb"] * spill_bytes / 1e6 + piece_s * 2 * partitions * shards
    return {"groups": len(groups), "shards_per_group": len(groups[0]), "cpu_s": cpu_s, "piece_s": piece_s}


# requests of one read on an object store: a file opened for a range (HEAD, footer, ranged reads: 4 on the
# loopback S3 of bench_spill_pack.py) and a pack's range (its tail, its blocks)
OPEN_GETS, PACK_READ_GETS = 4, 2
# The live directed edges after each star step, over the first step's, where the curve has none: the quiet
# curve's 16 GB lake's own edge files at 4 partitions throughout (`bench_components.py --lake-edges`, "B fixed" in
# results/components_ab_lake16.json; RESULTS.md *Finished stars leave the graph*). The code before carried all
# 1.69 M edges through 12 steps; the star rounds a component needs grow with the log of its size.
COMPONENTS_LIVE = (1.0, 0.8946, 0.07697, 0.07643, 0.009789, 0.009782, 0.0007576, 0.0007576, 0.0)


def components_steps(cc: int, total_bytes: int, budget: int, live: tuple[float, ...]) -> list[int]:
    """The partitions each star step runs in, by the stage's rule: the first in ``cc``, each next in what the
    edges the step before left need (``partitions_for``, never more), until they fit one (union-find in
    memory, the last entry 1) or none is left."""
    from airflow_curation.core.lsh import partitions_for

    parts = [cc]
    for frac in live[:-1]:
        if frac == 0:
            break
        parts.append(min(parts[-1], partitions_for(int(total_bytes * frac), budget)))
        if parts[-1] == 1:
            break
    return parts


def components_terms(
    dedup: dict, rows: float, shards: int, units: int, budget: float, live: tuple[float, ...] | None = None
) -> dict | None:
    """Requests of what dedup's global phase does after its units, on an object store, by the stage's own rules:
    the components (the first step reads every unit's edge file, each later one the previous step's files in
    the partitions its live edges need, :func:`components_steps`, each step's inputs merged first where the
    stage's ``merge_plan`` would; the finished stars' labels written where they are found) and the gather
    (each output partition reads every labels file and every unit's exact duplicates), with the units' outputs
    packed where the stage would pack them. None without the curve's edges a row."""
    if not dedup.get("edges_per_row"):
        return None
    from airflow_curation.core.components import EDGE_ROW_BYTES, STEP_ROW_BYTES
    from airflow_curation.core.lsh import partitions_for
    from airflow_curation.core.merge_plan import merge_plan
    from airflow_curation.stages.dedup.stage import MAX_OUT_PARTITIONS, edge_bytes, pack_groups

    live = tuple(live or dedup.get("components_live") or COMPONENTS_LIVE)
    total_bytes = int(edge_bytes({"verified": dedup["edges_per_row"] * rows, "exact_edges": 0}))  # the stage's
    cc = min(units, partitions_for(total_bytes, int(budget)))
    out = min(shards, MAX_OUT_PARTITIONS)
    edge_groups = pack_groups(units, cc, units, total_bytes, int(budget), remote=True)
    exact_groups = pack_groups(units, out, out, int(dedup["exact_per_row"] * rows * 8), int(budget), remote=True)
    parts = components_steps(cc, total_bytes, int(budget), live)
    last = parts[-1] if parts[-1] > 1 else 0  # else in memory: one task reads the last files (counted above)
    # Each step's task reads its span of every file of the step before, or, where the stage's middle pass runs
    # (components_merge=auto: merge_plan), of its chunk's merged files: (files, tasks, input bytes) a step.
    first_files = len(edge_groups) or units
    steps = [(first_files, cc, total_bytes)]
    steps += [(a, b, int(total_bytes * f * STEP_ROW_BYTES / EDGE_ROW_BYTES)) for a, b, f in zip(parts, parts[1:], live)]
    if last:  # the labels step on what is left
        steps.append((last, last, int(total_bytes * live[len(parts) - 1] * STEP_ROW_BYTES / EDGE_ROW_BYTES)))
    step_opens = merge_opens = merged_puts = 0
    first_opens = first_merged = 0
    for k, (files, tasks, nbytes) in enumerate(steps):
        shape = merge_plan(tasks, files, nbytes, int(budget))
        if shape:
            chunks, groups = -(-tasks // shape[0]), -(-files // shape[1])
            reads, merged = chunks * files, tasks * groups
            merged_puts += chunks * groups
        else:
            reads, merged = tasks * files, 0
        if k == 0:
            first_opens, first_merged = reads, merged
        else:
            step_opens += reads
        merge_opens += merged
    unmerged_opens = sum(a * b for a, b in zip(parts[1:], parts[:-1])) + last * last
    # labels files: the last step's and the finished stars' of every later large-star step (one a task)
    label_files = max(1, last) + sum(parts[2::2])
    gather_opens = out * label_files
    if edge_groups:
        first_gets, unmerged_first = PACK_READ_GETS * first_opens, PACK_READ_GETS * cc * len(edge_groups)
    else:
        first_gets, unmerged_first = OPEN_GETS * first_opens, OPEN_GETS * cc * units
    exact_gets = PACK_READ_GETS * out * len(exact_groups) if exact_groups else OPEN_GETS * out * units
    packed_files = units * (bool(edge_groups) + bool(exact_groups))  # a GET each to copy
    gets = OPEN_GETS * (step_opens + merge_opens + first_merged + gather_opens) + first_gets + exact_gets + packed_files
    gets_unmerged = OPEN_GETS * (unmerged_opens + gather_opens) + unmerged_first + exact_gets + packed_files
    puts = 2 * units + sum(parts) + label_files + 2 * out + len(edge_groups) + len(exact_groups) + merged_puts
    return {
        "partitions": cc,
        "steps": len(parts),
        "step_partitions": parts,
        "edge_groups": len(edge_groups),
        "exact_groups": len(exact_groups),
        "gets": gets,
        "gets_unmerged": gets_unmerged,
        "step_reads": first_opens + first_merged + step_opens + merge_opens,
        "step_reads_unmerged": (cc * first_files) + unmerged_opens,
        "puts": puts,
        "gets_unpacked": OPEN_GETS * (unmerged_opens + gather_opens + cc * units + out * units),
        "gets_every_step_at_cc": OPEN_GETS * ((len(live) - 1) * cc * cc + out * cc),
    }


def spill_pair_s(spill: dict, partitions: int) -> float:
    """CPU seconds per (partition, shard) pair from ``bench_spill_reads.py``'s JSON: two single-partition reads
    (a shard's two spill files), at the measured partition count nearest ``partitions`` from below (the
    largest measured above it: past it the read is taken as constant, which that benchmark showed from 1,634
    to 4,096)."""
    counts = sorted(int(p) for p in spill["partitions"])
    at = max([p for p in counts if p <= partitions] or counts[:1])
    return 2 * spill["partitions"][str(at)]["after"]["median_ms"] / 1e3


def spill_bytes_at(spill_bytes: dict, partitions: float) -> float:
    """Spill bytes of ``bench_spill_reads.py --bytes``'s shard (both files) at ``partitions``: interpolated in
    log(partitions) between the measured counts, held at the ends past them."""
    points = sorted((int(p), v["bands"] + v["exact"]) for p, v in spill_bytes["sizes"].items())
    if partitions <= points[0][0]:
        return points[0][1]
    for (p0, b0), (p1, b1) in zip(points, points[1:]):
        if partitions <= p1:
            return b0 + (b1 - b0) * math.log(partitions / p0) / math.log(p1 / p0)
    return points[-1][1]


def spill_bytes_growth(spill_bytes: dict | None, curve_partitions: int | None, partitions: int) -> float:
    """How much more a row spills at the plan's partition count than at the curve's: a shard's node keys split
    into more partitions compress less (:data:`SPILL_BYTES`, RESULTS.md *Spill reads*). 1 without the
    micro-benchmark or the curve's count."""
    if not spill_bytes or not curve_partitions:
        return 1.0
    return spill_bytes_at(spill_bytes, partitions) / spill_bytes_at(spill_bytes, curve_partitions)


def manifest_terms(manifest: dict | None) -> tuple[float, float]:
    """(a task's plan of its slice of the upstream manifest, a gate's look at an ended run), seconds, from
    ``bench_manifest_scale.py``'s JSON at its largest shard count (one task per shard: ``task_plan_N<shards>``)."""
    if not manifest:
        return 0.0, 0.0
    manifest = manifest["runs"]["all"] if "runs" in manifest else manifest  # the JSON keeps each --measures run
    n = max(manifest["samples"], key=int)
    after = manifest["samples"][n]["after"]
    return statistics.median(after[f"task_plan_N{n}"]), statistics.median(after["gate_look"])


# per task, what a stage reads and writes on the object store (the stated counting: a Parquet file read is a
# footer GET and one ranged GET of its column chunks; every task reads the upstream manifest's head and one page
# and writes its checkpoint record)
MANIFEST_GETS, FILE_GETS = 2, 2
READS = {  # upstream outputs each stage reads: ingest reads the raw input
    "ingest": ("input",),
    "preprocess": ("ingest",),
    "dedup": ("ingest",),
    "validate": ("ingest", "preprocess", "dedup"),
}


def io_terms(
    curve: dict,
    stage: str,
    gb: float,
    shards: int,
    tasks: int,
    partitions: int,
    spill_bytes: float = 0.0,
    packs: dict | None = None,
) -> tuple[float, int, int]:
    """(bytes read, GET requests, PUT requests) of one stage over the run. Dedup's global phase also reads one
    range of both spill files of every shard per partition: 2 x partitions x shards ranged GETs, and reads the
    ``spill_bytes`` its phase 1 wrote. Packed (``packs``), it reads every spill file once (a GET each), writes
    2 x groups packs, and each partition reads its range of both packs of every group (a tail and a range GET).
    Phase 1 also writes each shard's ids file, which phase 3 reads (a GET) instead of the shard."""
    out = curve.get("out_bytes_per_gb", {})
    reads = sum(gb * 1e9 if s == "input" else out.get(s, 0.0) * gb for s in READS[stage])
    files = len(READS[stage]) * shards
    gets = MANIFEST_GETS * tasks + (files if stage == "ingest" else FILE_GETS * files)
    puts = shards + tasks  # one output file per shard, one checkpoint record per task
    if stage == "dedup":
        reads += spill_bytes
        gets += 2 * partitions * shards if not packs else 2 * shards + 4 * partitions * packs["groups"]
        gets += shards  # phase 3 reads a shard's ids file (phase 1's), not the shard again
        puts += 3 * shards + (2 * packs["groups"] if packs else 0)  # the per-shard spill and ids files, the packs
        if packs:
            reads += spill_bytes  # the packing reads the spill, the units read the packs
    if stage == "validate":
        puts = 1 + tasks  # the report
    return reads, gets, puts


def components_sentence(plans: list[dict]) -> str:
    """What dedup's GETs hold after its units: the components and the gather, by node count."""
    if not plans[0].get("components"):
        return ""
    c0 = plans[0]["components"]
    return (
        f"; after the units, the components' star steps run in "
        f"{', '.join(f'{n:,}' for n in c0['step_partitions'] if n > 1)} partitions (each in what the edges left "
        "alive need, the finished stars labelled where found)"
        + (", then union-find in memory" if c0["step_partitions"][-1] == 1 else "")
        + ", each step's inputs merged by chunk of its tasks and group of files where the stage's middle pass "
        "would merge them (`components_merge=auto`), "
        "the units' edge and exact-duplicate files packed where the stage would pack them: "
        + ", ".join(
            f"{p['components']['edge_groups']:,} + {p['components']['exact_groups']:,} packs, "
            f"{p['components']['step_reads'] / 1e6:,.2f} M step reads (unmerged "
            f"{p['components']['step_reads_unmerged'] / 1e6:,.2f} M), "
            f"{p['components']['gets'] / 1e6:,.1f} M GETs (unmerged {p['components']['gets_unmerged'] / 1e6:,.1f} M, "
            f"unpacked {p['components']['gets_unpacked'] / 1e6:,.1f} M) "
            f"on {p['nodes']} nodes"
            for p in plans
        )
    )


def markdown(plans: list[dict]) -> str:
    p0 = plans[0]
    lines = [
        f"Input {p0['bytes'] / 1e12:.0f} TB, {p0['tokens'] / 1e12:.0f} T tokens, {p0['rows'] / 1e9:.1f} G documents; "
        f"{p0['shards']:,} shards of {p0['shard_bytes'] / 1e9:g} GB; the memory needs {p0['lsh_memory_partitions']:,} "
        f"LSH partitions (budget {p0['lsh_budget_per_worker'] / 2**30:.1f} GiB per worker, {p0['cores']} cores per "
        "node) and the global phase has at least as many units as slots: "
        + ", ".join(
            f"{p['lsh_partitions']:,} partitions on {p['nodes']} nodes "
            f"({p['phase2_row_group_reads'] / 1e6:,.0f} M spill (partition, {'pack' if p['spill_packs'] else 'shard'}) "
            f"pairs at {p['pair_s'] * 1e3:.2f} ms"
            + (f", {p['spill_packs']['shards_per_group']} shards a pack" if p["spill_packs"] else "")
            + f", spill bytes {p['spill_growth']:.2f}x the curve's a row)"
            for p in plans
        )
        + components_sentence(plans)
        + f"; per task: its plan of the upstream manifest {p0['task_plan_s'] * 1e3:.1f} ms, a gate's look "
        f"{p0['gate_look_s'] * 1e3:.1f} ms; Airflow tasks: {p0['airflow_tasks']} per run, whatever the shard count.",
        "",
        "| nodes | stage | CPU-hours (pair reads; task fixed cost) | workers/node | slots | units | waves | wall h "
        "| node-hours | GETs (M) | PUTs (M) | read GB/s | Slurm | Kubernetes |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for p in plans:
        for stage, s in p["stages"].items():
            k = s["k8s_indexed_job"]
            slurm = f"`{s['slurm_array']}`"
            k8s = f"Indexed Job: completions {k['completions']:,}, parallelism {k['parallelism']:,}"
            if stage == "validate":
                slurm, k8s = "one job on one node (DuckDB threads = cores)", "a Job with one pod"
            if s.get("dask_workers"):
                slurm = f"one {p['nodes']}-node allocation: Dask scheduler + {s['dask_workers']:,} workers"
                k8s = f"DaskJob, dask_workers {s['dask_workers']:,}"
            terms = [f"{s['cross_cpu_hours']:,.0f}"] if s["cross_cpu_hours"] else []
            terms.append(f"{s.get('task_fixed_cpu_hours', 0.0):,.1f}")
            lines.append(
                f"| {p['nodes']} | {stage} | {s['cpu_hours']:,.0f} ({'; '.join(terms)})"
                + f" | {s['workers_per_node']} | {s['slots']:,} | "
                f"{s['units']:,} | {s['waves']} | {s['wall_hours']:.2f} | {s['node_hours']:,.0f} | "
                f"{s.get('get_requests', 0) / 1e6:,.2f} | {s.get('put_requests', 0) / 1e6:,.2f} | "
                f"{s.get('read_gb_per_s', 0.0):,.1f} | {slurm} | {k8s} |"
            )
        lines.append(
            f"| {p['nodes']} | **total** |  |  |  |  |  | **{p['wall_hours']:.1f}** | **{p['node_hours']:,.0f}** | "
            f"{p.get('get_requests', 0) / 1e6:,.1f} | {p.get('put_requests', 0) / 1e6:,.2f} |  |  |  |"
        )
    return "\n".join(lines)


RESULTS_DIR = Path(__file__).resolve().parent / "results"
SPILL_BYTES = "spill_bytes_350000_u32.json"  # a plan-size shard (350,000 rows), node keys stored as rows


def load_micro(results: Path = RESULTS_DIR) -> dict:
    """The committed micro-benchmarks the plan's per-unit terms come from (each optional)."""
    names = {
        "manifest": "manifest_scale.json",
        "spill": "spill_reads.json",
        "spill_bytes": SPILL_BYTES,
        "spill_pack": "spill_pack_p4096.json",
        "tokenize": "tokenize.json",
        "export": "export.json",
        "export_merge": "export_merge.json",
        "mix": "mix.json",
        "boilerplate": "boilerplate_cost.json",
    }
    return {k: json.loads((results / f).read_text()) for k, f in names.items() if (results / f).exists()}


TOKEN_BYTES = 2  # uint16 on disk: a vocabulary under 65,500 (Megatron's rule, docs/export.md)
EXPORT_FILE_BYTES = 1 << 30  # export's default file_size
EXPORT_BUDGET = 8 << 30  # export's default memory_budget


def out_plan(
    micro: dict,
    total_bytes: float,
    tokens: float,
    shards: int,
    nodes: int,
    cores: int,
    max_array: int = 100_000,
    rows: float = 0.0,
) -> dict | None:
    """Training data out at the plan: mix (where ``mix.json`` is committed), tokenize and export (scatter, the
    middle pass, gather), from the committed micro-benchmarks (None without tokenize's and export's). One worker
    a core; mix at its marginal CPU a row for ``rows`` rows, a unit a shard and two reads of it (the tally, the
    selection); export's gather units as the stage plans them for an array of ``min(shards, max_array)`` tasks
    (``min_units``), at most one a bucket; the middle pass as ``core.merge_plan.merge_plan`` shapes it. The
    scatter and gather share export.json's CPU evenly (it measures them together); the merge costs its measured
    CPU per GB merged."""
    tok, exp, merge = micro.get("tokenize"), micro.get("export"), micro.get("export_merge")
    if not (tok and exp and merge):
        return None
    from bench_export_merge import merge_cpu_s_per_gb

    from airflow_curation.core.merge_plan import merge_plan
    from airflow_curation.stages.export.stage import gather_units

    ours = [r["cpu"] for r in tok["runs"] if r["contender"] == "ours" and "cpu" in r]
    tokenize_s_per_byte = statistics.median(ours) / (tok["text_mb"] * 1e6)
    data = tokens * TOKEN_BYTES
    buckets = math.ceil(data / EXPORT_FILE_BYTES)
    groups = min(shards, max_array)
    units = gather_units(int(data), EXPORT_BUDGET, groups, buckets)
    k, g = merge_plan(units, shards, int(data), EXPORT_BUDGET, force=True)
    chunks, merge_groups = math.ceil(units / k), math.ceil(shards / g)
    merge_s_per_gb = merge_cpu_s_per_gb(merge)
    export_s = tokens / exp["median_tokens_per_cpu_s"]
    slots = nodes * cores
    steps = {}
    mix = micro.get("mix")
    if mix and rows:
        from bench_mix import ns_per_row

        # reads: its shard for the tally, the tally by the lease holder that sums them, its shard for the selection
        steps["mix"] = (rows * ns_per_row(mix) / 1e9, shards, 3 * shards)
    steps |= {
        "tokenize": (total_bytes * tokenize_s_per_byte, shards, shards),
        "export: scatter": (export_s / 2, shards, shards),
        "export: merge": (data / 1e9 * merge_s_per_gb, chunks * merge_groups, chunks * shards),
        "export: gather": (export_s / 2, units, units * merge_groups),
    }
    out: dict = {
        "nodes": nodes,
        "slots": slots,
        "tokenize_mb_per_core_s": 1 / tokenize_s_per_byte / 1e6,
        "tokenize_runs": len(ours),
        "tokenize_text_mb": tok["text_mb"],
        "tokenize_load": [r["load"] for r in tok["runs"] if "load" in r],
        "export_tokens_per_cpu_s": exp["median_tokens_per_cpu_s"],
        "merge_cpu_s_per_gb": merge_s_per_gb,
        "buckets": buckets,
        "gather_direct_reads": units * shards,
        "mix_ns_per_row": ns_per_row(mix) if "mix" in steps else None,
        "rows": rows,
        "steps": {},
    }
    for step, (cpu_s, n, reads) in steps.items():
        waves = math.ceil(n / slots)
        wall = waves * cpu_s / n
        out["steps"][step] = {
            "cpu_hours": cpu_s / 3600,
            "units": n,
            "waves": waves,
            "wall_hours": wall / 3600,
            "node_hours": wall / 3600 * nodes,
            "reads": reads,
        }
    out["node_hours"] = sum(s["node_hours"] for s in out["steps"].values())
    out["cpu_hours"] = sum(s["cpu_hours"] for s in out["steps"].values())
    return out


def boilerplate_budget() -> int:
    """The boilerplate stage's default ``memory_budget``: what a user's run gets, and at 50 TB a partition fits it."""
    from airflow_curation.stages.boilerplate.stage import BoilerplateStage

    return int(BoilerplateStage.SETTINGS.defaults["memory_budget"])


def web_plan(micro: dict, total_bytes: float, shards: int, nodes: int, cores: int, rows: float) -> dict | None:
    """Web data in at the plan: boilerplate (where ``boilerplate_cost.json`` is committed; None otherwise) at the
    stage's marginal CPU a GB of text (``bench_boilerplate_cost.py``), a unit a shard (its counts, then its
    cleaning: two reads of it). Its global step's partitions and reads as the stage plans them for ``rows``
    documents at the stage's default ``memory_budget`` (up to ``MAX_PARTITIONS``, the middle pass shaped by
    ``merge_plan``). The
    wall spreads all the CPU over the slots, the global step's share too (it runs on the lease holder's workers:
    a Dask cluster at this size)."""
    bp = micro.get("boilerplate")
    if not bp or not rows:
        return None
    from bench_boilerplate_cost import cpu_s_per_gb

    from airflow_curation.core.lsh import partitions_for
    from airflow_curation.core.merge_plan import merge_plan
    from airflow_curation.stages.boilerplate.stage import (
        MAX_PARTITIONS,
        PARTITION_EXPANSION,
        spill_estimate,
        spill_reads,
    )

    est, budget = spill_estimate(int(rows)), boilerplate_budget()
    parts = partitions_for(est, budget, PARTITION_EXPANSION, maximum=MAX_PARTITIONS)
    k, g = merge_plan(parts, shards, est, budget, force=True)
    groups = math.ceil(shards / g)
    cpu_s = total_bytes / 1e9 * cpu_s_per_gb(bp)
    slots = nodes * cores
    waves = math.ceil(shards / slots)
    wall = waves * cpu_s / shards
    return {
        "nodes": nodes,
        "cpu_s_per_gb": cpu_s_per_gb(bp),
        "memory_budget": budget,
        "spill_bytes": est,
        "partitions": parts,
        "chunks": math.ceil(parts / k),
        "groups": groups,
        "global_reads": spill_reads(parts, shards, k, groups),
        "direct_reads": spill_reads(parts, shards),
        "steps": {
            "boilerplate": {
                "cpu_hours": cpu_s / 3600,
                "units": shards,
                "waves": waves,
                "wall_hours": wall / 3600,
                "node_hours": wall / 3600 * nodes,
                "reads": 2 * shards + spill_reads(parts, shards, k, groups),
            }
        },
    }


def web_markdown(plans: list[dict]) -> str:
    """docs/scale.md's web-data-in table."""
    p0 = plans[0]
    lines = [
        f"Boilerplate at {p0['cpu_s_per_gb']:.1f} CPU-s per GB of text (`boilerplate_cost.json`: the stage's marginal "
        "CPU a GB between two lake sizes in `bench_boilerplate_cost.py`, its three steps on one worker), a unit a "
        f"shard; its global step at `memory_budget` {p0['memory_budget'] >> 20} MiB (the default): "
        f"{p0['spill_bytes'] / 1e12:.1f} TB "
        f"of estimated (line, count) pairs in {p0['partitions']:,} partitions, the middle pass in "
        f"{p0['chunks']:,} chunks x {p0['groups']:,} groups, {p0['global_reads'] / 1e6:.1f} M spill reads (without "
        f"it {p0['direct_reads'] / 1e9:.2f} G); reads below: the shard's two (its counts, its cleaning) and the global "
        "step's. The wall spreads the global step's share over the slots too (it runs on the lease holder's workers, "
        "a Dask cluster at this size).",
        "",
        "| nodes | step | CPU-hours | units | waves | wall h | node-hours | reads (M) |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for p in plans:
        for step, st in p["steps"].items():
            lines.append(
                f"| {p['nodes']} | {step} | {st['cpu_hours']:,.0f} | {st['units']:,} | {st['waves']} | "
                f"{st['wall_hours']:.2f} | {st['node_hours']:,.0f} | {st['reads'] / 1e6:,.2f} |"
            )
    return "\n".join(lines)


def web_plans_for(args: argparse.Namespace) -> list[dict]:
    return _plans_by_nodes(
        args, lambda micro, shards, rows, n: web_plan(micro, args.tb * 1e12, shards, n, args.cores, rows)
    )


def _plans_by_nodes(args: argparse.Namespace, make) -> list[dict]:
    """``make(micro, shards, rows, nodes)`` for each node count of ``args`` (the committed micro-benchmarks, the
    plan's shards, its rows from the curve), the plans it made (None: not measured, not in the table)."""
    micro = load_micro() if args.micro else {}
    shards = math.ceil(args.tb * 1e12 / (args.shard_gb * 1e9))
    rows = _curve(args)["rows_per_gb"] * args.tb * 1e3
    plans = [make(micro, shards, rows, int(n)) for n in args.nodes.split(",")]
    return [p for p in plans if p is not None]


def _load_range(loads: list[float]) -> str:
    return f", load {min(loads):.1f}-{max(loads):.1f} on 2 cores" if loads else ""


def out_markdown(plans: list[dict]) -> str:
    """docs/scale.md's training-data-out table."""
    p0 = plans[0]
    lines = [
        f"Tokenize at {p0['tokenize_mb_per_core_s']:.2f} MB of text per core-second (`tokenize.json`: the median "
        f"of the tokenize stage's {p0['tokenize_runs']} runs on {p0['tokenize_text_mb']:.0f} MB in `bench_tokenize.py`"
        f"{_load_range(p0['tokenize_load'])}), export at "
        f"{p0['export_tokens_per_cpu_s'] / 1e6:.1f} M tokens per CPU-second (`export.json`, scatter and gather, "
        f"split evenly here) plus the middle pass at {p0['merge_cpu_s_per_gb']:.2f} CPU-s per GB merged (`export_merge.json`); {p0['buckets']:,} buckets of "
        f"1 GiB; the gather's reads without the middle pass would be {p0['gather_direct_reads'] / 1e9:.2f} G. "
        + (
            f"Mix at {p0['mix_ns_per_row'] / 1e3:.1f} CPU-us a row (`mix.json`: the stage's marginal CPU a row between "
            f"two lake sizes in `bench_mix.py`) over {p0['rows'] / 1e9:.1f} G documents, three reads a shard (the "
            "tally, the sum of the tallies, the selection)."
            if p0.get("mix_ns_per_row")
            else "Mix is not measured at scale (not in the table)."
        ),
        "",
        "| nodes | step | CPU-hours | units | waves | wall h | node-hours | reads (M) |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for p in plans:
        for step, s in p["steps"].items():
            lines.append(
                f"| {p['nodes']} | {step} | {s['cpu_hours']:,.0f} | {s['units']:,} | {s['waves']} | "
                f"{s['wall_hours']:.2f} | {s['node_hours']:,.0f} | {s['reads'] / 1e6:,.2f} |"
            )
        lines.append(
            f"| {p['nodes']} | **total** | **{p['cpu_hours']:,.0f}** |  |  |  | **{p['node_hours']:,.0f}** |  |"
        )
    return "\n".join(lines)


def out_plans_for(args: argparse.Namespace) -> list[dict]:
    return _plans_by_nodes(
        args,
        lambda micro, shards, rows, n: out_plan(
            micro, args.tb * 1e12, args.tokens, shards, n, args.cores, args.max_array, rows
        ),
    )


def block(argv: list[str]) -> str:
    """docs/scale.md's ``simulate`` block for these arguments: the command, then the table."""
    args = parser().parse_args(argv)
    text = markdown(plans_for(args))
    shown = list(argv)
    if "--write-doc" in shown:  # the command as run, less where it wrote
        i = shown.index("--write-doc")
        del shown[i : i + 2]
    return f"Command: `.venv/bin/python benchmarks/simulate_scale.py {' '.join(shown)} --write-doc docs/scale.md`\n\n{text}"


def _curve(args: argparse.Namespace) -> dict:
    json_path = Path(args.json)
    if not json_path.is_absolute() and not json_path.exists():  # relative to the repository, from anywhere
        json_path = Path(__file__).resolve().parent.parent / json_path
    return load_curve(json.loads(json_path.read_text()))


def plans_for(args: argparse.Namespace) -> list[dict]:
    curve = _curve(args)
    micro = load_micro() if args.micro else {}
    return [
        plan(
            curve,
            args.tb * 1e12,
            args.tokens,
            args.shard_gb * 1e9,
            int(n),
            args.cores,
            args.mem_gb * 1e9,
            args.max_array,
            None if args.pair_ms is None else args.pair_ms / 1e3,
            micro,
        )
        for n in args.nodes.split(",")
    ]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=str(Path(__file__).resolve().parent / "out" / "scale.json"))
    ap.add_argument("--tb", type=float, default=50.0, help="input text, TB")
    ap.add_argument("--tokens", type=float, default=15e12)
    ap.add_argument("--shard-gb", type=float, default=1.0, help="text per shard, GB")
    ap.add_argument("--nodes", default="16,64,256")
    ap.add_argument("--cores", type=int, default=64, help="cores per node")
    ap.add_argument("--mem-gb", type=float, default=512, help="memory per node, GB")
    ap.add_argument("--max-array", type=int, default=100_000, help="Slurm MaxArraySize")
    ap.add_argument(
        "--pair-ms",
        type=float,
        help="CPU ms per (LSH partition, shard) pair of spill reads (default: the spill micro-benchmark's, else the "
        "curve's)",
    )
    ap.add_argument(
        "--micro",
        action="store_true",
        help="per-unit terms from the committed micro-benchmarks (benchmarks/results/: manifest, spill reads)",
    )
    ap.add_argument("--out", help="write the plans as JSON here")
    ap.add_argument("--write-doc", help="put the table into this Markdown file (docs/scale.md), between its markers")
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    plans = plans_for(args)
    print(markdown(plans))
    out = out_plans_for(args)
    if out:
        print(out_markdown(out))
    web = web_plans_for(args)
    if web:
        print(web_markdown(web))
    if args.write_doc:
        replace_block(Path(args.write_doc), "simulate", block(argv))
        if out:
            replace_block(Path(args.write_doc), "simulate_out", out_markdown(out), after="simulate")
        if web:
            replace_block(Path(args.write_doc), "simulate_web", web_markdown(web), after="simulate_out")
    if args.out:
        Path(args.out).write_text(json.dumps({"plans": plans}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
