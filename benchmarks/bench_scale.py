"""Scale: ingest -> preprocess -> dedup -> validate on 1, 2, 5 and 10 GB of real text, per-stage cost.

    .venv/bin/python benchmarks/bench_scale.py [--sizes 1,2,5,10] [--shard-mb 2] [--budget-mb 128]
                                               [--compare 10] [--airflow-gb 1] [--airflow-stack dagtest|real|both]
                                               [--json benchmarks/out/scale.json]

Text: ``benchmarks/scale_corpus.py`` (Debian documentation and source files, about 1 GB of distinct text
on this machine; larger sizes continue with letter-substituted passes over it, see that module). Size
``s`` uses the first ``10 s`` files of 100 MB, so the sizes share their data.

Every stage runs as the CLI does (``curation <stage>``), in a fresh child process with one worker
(``--workers 1``: the units run in that process, so the child *is* the worker), and its wall seconds,
CPU seconds (user + system, ``wait4``) and peak RSS (``ru_maxrss``) are recorded. Shards are small
(``--shard-mb`` of zstd Parquet) so that even 1 GB makes 100+ shards; the shard size stays the same at
every size, as it would in production (the shard count grows with the data).

Dedup runs with a fixed memory budget (``--budget-mb``, which sets its LSH partition count) for the
curve. At the sizes in ``--compare`` it runs twice more: unconstrained (one partition: the whole
global phase in memory) and with a budget of a quarter of its global-phase data (rows x (16 B x bands
+ 24 B), what the stage's planner sizes partitions by); the three cluster assignments (``cluster_id``,
``is_duplicate`` of every row, in manifest order) must be identical. Spill bytes are the bytes the run
wrote under ``dedup/`` (per-shard spill files and the global phase's edges, components and exact
groups).

``--curve STAGE`` (preprocess, dedup or validate): one stage's own curve. Each size's lake is made once up
to the stage's input and kept; then every round removes the stage's state and runs it alone on the same input
manifest, sizes alternated, ``--repeats`` rounds (JSON key ``<stage>_curve``, ``<stage>_curve_tiny`` for
``--tiny-rows``; the lake's making is kept under ``made``). Stages upstream then cost nothing per round, so
larger sizes and more rounds fit in the same time.

``--airflow-gb``: that size once more through the pipeline DAG (``dags/curation_pipeline.py``) in
``dag.test()`` with the local backend and a fresh SQLite Airflow home, with the ingest shard size set to
``--shard-mb`` (the only change to the DAG). Airflow overhead = the launch + gate tasks' time minus the
stage's own time (first unit started to last unit finished, from its checkpoint records), per stage and
in total. ``--airflow-stack real`` runs the same DAG (the same one change, appended to its copy) on a real
Airflow instead (``scripts/airflow_stack.py``: PostgreSQL, scheduler, triggerer, dag-processor and
api-server, LocalExecutor with parallelism 4), where the gates wait concurrently: one run triggered and
read through the REST API, the same overhead figures, each gate's lag after its job ended, and the CPU
of the Airflow processes against the jobs' (``CpuSampler``); ``both`` runs the two. Writes everything
to ``--json`` (``benchmarks/simulate_scale.py`` reads it).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "scripts"))  # airflow_stack

from bench_ingest import CURATION, _measure  # noqa: E402
from results import RESULTS, replace_block  # noqa: E402
from scale_corpus import FILE_BYTES, cipher, generate, pool_info, write_pool  # noqa: E402
from scale_method import aggregate, marginal_table, runs_table, shared_units_table  # noqa: E402

from airflow_curation.core.checkpoint import CheckpointStore  # noqa: E402
from airflow_curation.core.layout import Lake  # noqa: E402
from airflow_curation.core.manifest import Manifest  # noqa: E402

DATASET = "scale"
STAGES = ("ingest", "preprocess", "dedup", "validate")
BANDS = 9  # the default LSH layout at threshold 0.8, 128 permutations
_ROW_BYTES = 16 * BANDS + 24  # the dedup planner's global-phase bytes per row


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def _dedup_dir_bytes(lake_root: Path) -> int:
    return sum(_dir_bytes(d) for d in lake_root.rglob("dedup") if d.is_dir() and "attrs" not in d.parts)


def _stage_span(lake: Lake, manifest: Manifest, per_unit: bool = False) -> dict:
    """The stage's own time from its checkpoint records: first unit started to last unit finished,
    and the sum of unit seconds; ``per_unit``: each unit's seconds too, by unit id (the sizes share their input
    files, so the same unit can be compared across sizes)."""
    store = CheckpointStore(lake.checkpoint_dir(manifest.stage, manifest.fingerprint))
    recs = [r for u in manifest.units if (r := store.load(u.unit_id)) is not None]
    if not recs:
        return {"units": len(manifest.units), "span_s": 0.0, "unit_s": 0.0}
    return {
        "units": len(recs),
        "span_s": max(r.finished_at for r in recs) - min(r.started_at for r in recs),
        "unit_s": sum(r.seconds for r in recs),
        "started_at": min(r.started_at for r in recs),
        "finished_at": max(r.finished_at for r in recs),
        **({"unit_seconds": {r.unit_id: round(r.seconds, 4) for r in recs}} if per_unit else {}),
    }


def _clusters(manifest: Manifest) -> dict:
    """cluster_id and is_duplicate of every row in manifest order: a digest, and the counts."""
    h = hashlib.sha256()
    rows = dups = 0
    for shard in manifest.shards:
        t = pq.read_table(shard.attrs["dedup"], columns=["cluster_id", "is_duplicate"])
        cid = pc.fill_null(t.column(0), -1).to_numpy(zero_copy_only=False).astype(np.int64)
        dup = t.column(1).to_numpy(zero_copy_only=False).astype(bool)
        h.update(cid.tobytes())
        h.update(dup.tobytes())
        rows += len(dup)
        dups += int(dup.sum())
    return {"digest": h.hexdigest(), "rows": rows, "duplicates": dups}


def _run_stage(
    name: str,
    args: list[str],
    lake: Lake,
    run_id: str,
    env: dict | None = None,
    label: str = "",
    python_p=False,
    per_unit: bool = False,
) -> dict:
    before = _dedup_dir_bytes(Path(lake.root)) if name == "dedup" else 0
    # -P: the code on PYTHONPATH, not a package in the current folder
    cmd = [CURATION[0], "-P", *CURATION[1:]] if python_p else CURATION
    load = list(os.getloadavg())
    split: dict = {}
    wall, cpu, rss, out = _measure([*cmd, name, *args], env=env, cpu_split=split)
    load += os.getloadavg()  # 1, 5, 15 min before, then after: the machine is shared
    manifest = Manifest.read(lake.manifest_uri(run_id, name))
    if manifest.status != "complete":
        raise RuntimeError(f"{name}: manifest status {manifest.status}")
    r = {
        "stage": name,
        "wall_s": wall,
        "cpu_s": cpu,
        **split,
        "peak_rss": rss,
        "shards": len(manifest.shards),
        "units": len(manifest.units),
        "rows": manifest.rows,
        "bytes": manifest.bytes,
        "accounting": manifest.accounting,
        "load": load,
        **{f"own_{k}": v for k, v in _stage_span(lake, manifest, per_unit).items()},
    }
    if name == "dedup":
        r["spill_bytes"] = _dedup_dir_bytes(Path(lake.root)) - before
        r["clusters"] = _clusters(manifest)
        done = next(iter(sorted(Path(lake.root).rglob("_SUCCESS.json"), key=lambda p: p.stat().st_mtime)[-1:]), None)
        if done:
            r["global"] = json.loads(done.read_text())
            r["global"].pop("labels", None)
            r["global"].pop("exact", None)
    print(
        f"  {label or name:<10} wall {wall:8.1f} s  CPU {cpu:8.1f} s  peak RSS {rss / 2**20:6.0f} MiB  "
        f"shards {r['shards']:5d}  rows {r['rows']}"
        + (f"  spill {r['spill_bytes'] / 1e6:.0f} MB" if name == "dedup" else ""),
        flush=True,
    )
    return r


def run_size(
    files: list[Path],
    gb: float,
    work: Path,
    shard_bytes: int,
    row_group_rows: int,
    budget: int,
    compare: bool,
    validate_args: tuple[str, ...] = (),
    validate_before: str | None = None,
    keep_lake: bool = False,
    stages_to_run: tuple[str, ...] = STAGES,
    name: str | None = None,
) -> dict:
    name = name or f"{gb:g}"
    root = work / f"lake-{name}"
    shutil.rmtree(root, ignore_errors=True)
    lake = Lake(str(root), DATASET)
    rid = f"s{name}"
    common = ["--lake", str(root), "--dataset", DATASET, "--workers", "1"]
    text_bytes = sum(f.stat().st_size for f in files)
    print(
        f"{name}: {len(files)} files, {text_bytes / 1e9:.2f} GB of JSONL  (load {os.getloadavg()[0]:.1f})", flush=True
    )
    stages = {}
    load = [os.getloadavg()[0]]
    stages["ingest"] = _run_stage(
        "ingest",
        [
            *map(str, files),
            *common,
            "--run-id",
            rid,
            "--target-shard-size",
            str(shard_bytes),
            "--row-group-rows",
            str(row_group_rows),
        ],
        lake,
        rid,
    )
    # each shard's seconds: the same shard's cost in a smaller and a larger lake (the sizes share their input files)
    args = [*common, "--run-id", rid, "--mapper", "local"]
    stages["preprocess"] = _run_stage("preprocess", args, lake, rid, per_unit=True)
    rows = stages["preprocess"]["rows"]
    if "dedup" in stages_to_run:
        stages["dedup"] = _run_stage("dedup", [*common, "--run-id", rid, "--memory-budget", str(budget)], lake, rid)
    if "validate" in stages_to_run:
        stages["validate"] = _run_stage(
            "validate", [*common, "--run-id", rid, "--warn-only", "--threads", "1", *validate_args], lake, rid
        )
    extra_validate = {}
    if validate_before:  # the same lake validated by another copy of the code, and by this one under 512MB
        args = [*common, "--input-manifest", lake.manifest_uri(rid, "dedup"), "--warn-only", "--threads", "1"]
        env = {**os.environ, "PYTHONPATH": validate_before}
        # every run computes: no validate checkpoint of an earlier run (same data, same checks) to reuse
        shutil.rmtree(lake.path("_checkpoints", "validate"), ignore_errors=True)
        extra_validate["before"] = _run_stage(
            "validate",
            [*args, "--run-id", f"{rid}-before"],
            lake,
            f"{rid}-before",
            env=env,
            label="(before)",
            python_p=True,
        )
        shutil.rmtree(lake.path("_checkpoints", "validate"), ignore_errors=True)
        extra_validate["after"] = _run_stage(
            "validate", [*args, "--run-id", f"{rid}-after"], lake, f"{rid}-after", label="(after)"
        )
        shutil.rmtree(lake.path("_checkpoints", "validate"), ignore_errors=True)
        extra_validate["after_512MB"] = _run_stage(
            "validate",
            [*args, "--run-id", f"{rid}-limit", "--memory-limit", "512MB"],
            lake,
            f"{rid}-limit",
            label="(512MB)",
        )
        reports = {
            k: json.loads(Path(lake.manifest_uri(f"{rid}-{s}", "report")).read_text())
            for k, s in (("before", "before"), ("after", "after"), ("after_512MB", "limit"))
        }
        for k, r in reports.items():
            extra_validate[k]["verdicts"] = {c["name"]: [c["status"], c["observed"]] for c in r["checks"]}
            m = r["metrics"]
            extra_validate[k]["metrics_digest"] = hashlib.sha256(
                json.dumps({x: m[x] for x in sorted(m) if x != "query_engine"}, sort_keys=True).encode()
            ).hexdigest()
        same = {
            k: (v["verdicts"], v["metrics_digest"])
            == (extra_validate["before"]["verdicts"], extra_validate["before"]["metrics_digest"])
            for k, v in extra_validate.items()
        }
        print(f"  validate before/after: same verdicts and metrics: {same}", flush=True)
    load.append(os.getloadavg()[0])
    data = rows * _ROW_BYTES
    result = {
        "gb": gb,
        "input_bytes": text_bytes,
        "files": len(files),
        "shard_bytes": shard_bytes,
        "row_group_rows": row_group_rows,
        "memory_budget": budget,
        "dedup_data_bytes": data,
        "stages": stages,
        "load_average": load,
    }
    if extra_validate:
        result["validate_compare"] = extra_validate
    if compare:
        quarter = data // 4
        runs = {"unconstrained": ["--partitions", "1"]}
        if budget > quarter:  # the curve's budget is not tight enough here: a run at a quarter too
            runs["quarter"] = ["--memory-budget", str(quarter)]
        result["compare"] = {"budget": {"memory_budget": budget, **stages["dedup"]}}
        for name, extra in runs.items():
            r = _run_stage("dedup", [*common, "--run-id", f"{rid}-{name}", *extra], lake, f"{rid}-{name}")
            result["compare"][name] = {"memory_budget": quarter if name == "quarter" else None, **r}
        digests = {k: v["clusters"]["digest"] for k, v in result["compare"].items()}
        result["identical_clusters"] = len(set(digests.values())) == 1
        print(f"  clusters identical across budgets: {result['identical_clusters']} {digests}", flush=True)
    if not keep_lake:
        shutil.rmtree(root, ignore_errors=True)
    return result


# -- the method: alternated repeats, tiny rows, per-task fixed cost, memory at plan-sized shards ------------------
TINY_FILE_ROWS = 1_000_000


def tiny_inputs(work: Path, rows: int) -> list[Path]:
    """JSONL of short documents (one line of the pool each, 20-200 characters: ~60 B), 1 M a file, made once;
    past the pool's lines, letter-substituted passes over them. ``rows`` uses the first files."""
    pool = write_pool(work)
    n_files = max(1, math.ceil(rows / TINY_FILE_ROWS))
    files = [work / "tiny" / f"tiny-{k:03d}.jsonl" for k in range(n_files)]
    if all((f.parent / (f.name + ".done")).exists() for f in files):
        return files
    files[0].parent.mkdir(parents=True, exist_ok=True)

    def lines():
        r = 0
        while True:
            table = cipher(r)
            with open(pool, encoding="utf-8") as f:
                for line in f:
                    for t in json.loads(line)["text"].split("\n"):
                        t = t.strip()
                        if 20 <= len(t) <= 200:
                            yield json.dumps({"text": t.translate(table) if r else t}, ensure_ascii=False) + "\n"
            r += 1

    stream = lines()
    for f in files:
        chunk = [next(stream) for _ in range(TINY_FILE_ROWS)]  # the stream is deterministic: made files skipped
        if (f.parent / (f.name + ".done")).exists():
            continue
        tmp = f.with_suffix(".tmp")
        tmp.write_text("".join(chunk), encoding="utf-8")
        os.replace(tmp, f)
        (f.parent / (f.name + ".done")).write_text(str(len(chunk)))
    return files


def fixed_cost(work: Path, repeats: int, shard_bytes: int, row_group_rows: int) -> dict:
    """A stage process's own cost: each stage on a lake of 200 short documents (one shard), ``repeats`` times."""
    src = work / "fixed.jsonl"
    src.write_text(
        "".join(json.dumps({"text": f"document {i}: " + "a few words of text " * 3}) + "\n" for i in range(200))
    )
    runs = [
        run_size([src], 0.0, work, shard_bytes, row_group_rows, 128 << 20, False, name="fixed") for _ in range(repeats)
    ]
    return aggregate(runs)


def alternated(points: list[tuple[str, list[Path]]], repeats: int, run, done) -> None:
    """``run(label, files)`` for every point, ``repeats`` rounds in alternation, the order reversed every other
    round (A B C, C B A, ...: no size always runs right after the same one, whose traces in the page cache and
    the allocator's state it would inherit, nor always at the same point of a drift); every run kept, with its
    ``round`` and its ``position`` in it, reduced by :func:`scale_method.aggregate` and handed to
    ``done(label, result)`` after each round (a shared machine may not let the last round finish)."""
    runs: dict[str, list[dict]] = {label: [] for label, _ in points}
    for k in range(repeats):
        for i, (label, files) in enumerate(points if k % 2 == 0 else points[::-1]):
            print(f"-- round {k + 1}/{repeats}: {label}", flush=True)
            runs[label].append({**run(label, files), "round": k, "position": i, "uptime": os.getloadavg()})
        for label, r in runs.items():
            done(label, aggregate(r))


# A curve's lake keeps the record of its own making (run_size's result) here, for --reuse-lakes.
MADE_RECORD = "bench_made.json"

# What a curve removes before each run of its stage, so that every run computes (no checkpoint to reuse).
CURVE_STATE = {
    "preprocess": (("attrs", "preprocess"), ("_checkpoints", "preprocess")),
    "dedup": (("dedup",), ("attrs", "dedup"), ("_checkpoints", "dedup"), ("_checkpoints", "dedup_signatures")),
    "validate": (("_checkpoints", "validate"),),
}


def drop_page_cache() -> None:
    """Write back dirty pages and drop the clean ones (Linux, root): the next reads come from disk."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError as e:
        raise SystemExit(f"--cold needs root on Linux to drop the page cache: {e}") from e


def stage_curve(
    stage: str,
    points: list[tuple[str, list[Path]]],
    repeats: int,
    work: Path,
    shard_bytes: int,
    row_group_rows: int,
    budget: int,
    tag: str,
    done,
    reuse: bool = False,
    cold: bool = False,
) -> None:
    """One stage alone (dedup or validate), alternated over sizes: each size's lake is made once up to the
    stage's input (kept under ``work``: ingest and preprocess, and dedup for validate), then every round removes
    the stage's state (:data:`CURVE_STATE`) and runs the stage again on the same input manifest, under a run id
    of its own. The lake's making is recorded in it (:data:`MADE_RECORD`); ``reuse`` takes a lake that has that
    record, made from the same files, instead of making it again (its record goes under ``made`` as before).
    ``cold``: the page cache dropped before every run (:func:`drop_page_cache`), so that every size reads its lake
    from disk, as a lake at plan scale is read, and the small sizes are not flattered by a warm cache."""
    upstream = {"preprocess": "ingest", "dedup": "preprocess", "validate": "dedup"}[stage]
    bases = {}
    for label, files in points:
        record = work / f"lake-{tag}{label}" / MADE_RECORD
        if reuse and record.exists():
            base = json.loads(record.read_text())
            if base.get("input_bytes") == sum(f.stat().st_size for f in files) and base.get("files") == len(files):
                print(f"{tag}{label}: reusing the lake made {base.get('made_at', '?')}", flush=True)
                bases[label] = base
                continue
        made = ("dedup",) if upstream == "dedup" else ()  # ingest and preprocess always run
        bases[label] = run_size(
            files, float(label), work, shard_bytes, row_group_rows, budget, False, (), None, True, made, f"{tag}{label}"
        )
        bases[label]["made_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        record.write_text(json.dumps(bases[label], indent=1))

    def one(label: str, files: list[Path]) -> dict:
        name = f"{tag}{label}"
        lake = Lake(str(work / f"lake-{name}"), DATASET)
        for parts in CURVE_STATE[stage]:
            shutil.rmtree(lake.path(*parts), ignore_errors=True)
        rid = f"s{name}-r{time.time_ns()}"
        args = ["--lake", lake.root, "--dataset", DATASET, "--workers", "1", "--run-id", rid]
        args += ["--input-manifest", lake.manifest_uri(f"s{name}", upstream)]
        args += {
            "preprocess": ["--mapper", "local"],
            "dedup": ["--memory-budget", str(budget)],
            "validate": ["--warn-only", "--threads", "1"],
        }[stage]
        if cold:
            drop_page_cache()
        load = [os.getloadavg()[0]]
        # each unit's seconds where the report sets units side by side: preprocess, whose units are the shards
        rec = _run_stage(stage, args, lake, rid, per_unit=stage == "preprocess")
        rec["cold"] = cold
        base = {k: v for k, v in bases[label].items() if k not in ("stages", "load_average")}
        # the lake's own making (one run of each upstream stage) kept beside the curve's runs
        made = {"made": bases[label]["stages"]}
        return {**base, **made, "stages": {stage: rec}, "load_average": [*load, os.getloadavg()[0]]}

    alternated(points, repeats, one, done)


def rss_at_shards(files: list[Path], work: Path, text_mb: list[float], row_group_rows: int, budget: int) -> dict:
    """Peak RSS of preprocess and dedup with shards of ``text_mb`` MB of text (the plan's 1 GB, and 256 MB), once
    each: ingest's target is compressed bytes, so it is the text size over the measured compression ratio."""
    out = {}
    for mb in text_mb:
        probe = run_size(
            files[:1], 0.0, work, int(1.5e6), row_group_rows, budget, False, stages_to_run=(), name="probe"
        )
        ratio = probe["input_bytes"] / probe["stages"]["ingest"]["bytes"]  # JSONL bytes per Parquet byte
        gb = sum(f.stat().st_size for f in files) / 1e9
        target = int(mb * 1e6 / ratio)
        r = run_size(
            files, gb, work, target, row_group_rows, budget, False, stages_to_run=("dedup",), name=f"rss{mb:g}"
        )
        r["text_mb_per_shard"] = r["input_bytes"] / 1e6 / r["stages"]["ingest"]["shards"]
        r["compression"] = ratio
        out[f"{mb:g}"] = r
    return out


# -- Airflow --------------------------------------------------------------------------------------
AIRFLOW_RUN = r"""
import importlib.util, json, sys, time
from datetime import datetime, timezone
spec = importlib.util.spec_from_file_location("curation_pipeline_scale", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
dag = module.dag
dag.get_task("ingest").config.update(target_shard_bytes=int(sys.argv[4]), row_group_rows=int(sys.argv[5]))
t0 = time.time()
run = dag.test(logical_date=datetime(2026, 12, 1, tzinfo=timezone.utc),
               run_conf={"input": sys.argv[2], "lake": sys.argv[3], "dataset": "scale", "max_duplicate_rate": 1.0})
wall = time.time() - t0
tis = [{"task_id": ti.task_id, "state": str(ti.state), "start": ti.start_date.timestamp() if ti.start_date else None,
        "end": ti.end_date.timestamp() if ti.end_date else None} for ti in run.get_task_instances()]
import resource
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print("RESULT " + json.dumps({"state": str(run.state), "run_id": run.run_id, "wall_s": wall, "tasks": tis,
                             "airflow_cpu_s": me.ru_utime + me.ru_stime, "children_cpu_s": kids.ru_utime + kids.ru_stime}))
"""


def run_airflow(files: list[Path], work: Path, shard_bytes: int, row_group_rows: int) -> dict:
    home = Path(tempfile.mkdtemp(prefix="scale-airflow-home-"))
    root = work / "lake-airflow"
    shutil.rmtree(root, ignore_errors=True)
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "True",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "CURATION_POLL_INTERVAL": "5",
        "PYTHONPATH": str(REPO),
    }
    airflow = str(Path(sys.executable).parent / "airflow")
    subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True)
    t = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            AIRFLOW_RUN,
            str(REPO / "dags" / "curation_pipeline.py"),
            ",".join(map(str, files)),
            str(root),
            str(shard_bytes),
            str(row_group_rows),
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-4000:])
    res = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))[7:])
    res["process_wall_s"] = time.perf_counter() - t
    res.update(_airflow_figures(res, root))
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(home, ignore_errors=True)
    return res


def _airflow_figures(res: dict, root: Path) -> dict:
    """Per stage, from the run's task instances (``res["tasks"]``: task_id, start, end and, from the REST API,
    scheduled) and its lake: the stage's own time (its job's wall from result.json, its checkpoints' span),
    the launch + gate tasks' span, the overhead, and each gate's lag after its job ended."""
    from airflow_curation.core.layout import curation_run_id

    lake = Lake(str(root), DATASET, "2026-12-01")
    rid = curation_run_id(res["run_id"], lake.snapshot)
    tasks = {x["task_id"]: x for x in res["tasks"]}
    per_stage = {}
    for stage in ("ingest", "preprocess", "dedup", "quality", "pii", "enrich", "tokenize", "validate"):
        try:
            manifest = Manifest.read(lake.manifest_uri(rid, stage))
        except Exception:  # noqa: BLE001 - a stage the run skipped
            continue
        spans = [_stage_span(lake, manifest)]
        if stage == "dedup":  # its signatures phase is a sub-stage with checkpoints of its own
            spans.append(_stage_span(lake, Manifest.read(lake.manifest_uri(rid, "dedup_signatures"))))
        spans = [x for x in spans if x.get("started_at")]
        own_span = max(x["finished_at"] for x in spans) - min(x["started_at"] for x in spans) if spans else 0.0
        # the job's own wall (process start to end, planning and the dedup barrier included); it writes
        # result.json as its last step, so the file's time is the job's end
        results = list(Path(lake.jobs_dir(rid, stage)).rglob("result.json"))
        job_s = max((json.loads(f.read_text()).get("seconds", 0.0) for f in results), default=0.0)
        job_end = max((f.stat().st_mtime for f in results), default=None)
        # Task ids: <stage>.launch / <stage>.checkpoints (a TaskGroup per stage); runs recorded before the
        # groups have <stage> / <stage>_checkpoints.
        launch = tasks.get(f"{stage}.launch") or tasks[stage]
        full_gate = tasks.get(f"{stage}.checkpoints") or tasks.get(f"{stage}_checkpoints")
        ts = [t for t in (launch, full_gate) if t and t["start"]]
        airflow_s = max(x["end"] for x in ts) - min(x["start"] for x in ts)
        x = per_stage[stage] = {
            "shards": len(manifest.shards),
            "own_span_s": own_span,
            "own_unit_s": sum(x["unit_s"] for x in spans),
            "job_s": job_s,
            "airflow_s": airflow_s,
            "overhead_s": airflow_s - max(job_s, own_span),
            "launch_s": launch["end"] - launch["start"],
            "job_end": job_end,
        }
        # The task that waits for the job's end: the gate (validate waits itself, deferred like a gate).
        gate = full_gate or launch
        if job_end is not None and gate.get("end"):
            x["gate"] = gate["task_id"]
            x["gate_lag_s"] = gate["end"] - job_end
            if spans:
                x["gate_lag_checkpoint_s"] = gate["end"] - max(s["finished_at"] for s in spans)
            # Deferred and resumed: the trigger fired (the task scheduled again) after the job ended, then a
            # worker ran the rest of it (execute_complete, XCom).
            if gate.get("scheduled") and gate["scheduled"] > gate["start"]:
                x["gate_fired_s"] = gate["scheduled"] - job_end
                x["gate_resume_s"] = gate["end"] - gate["scheduled"]
    total_own = sum(max(s["job_s"], s["own_span_s"]) for s in per_stage.values())
    total_af = sum(s["airflow_s"] for s in per_stage.values())
    # The run's critical path: from its first task's start to its last task's end, the seconds in which no stage
    # job ran (the stages overlap where they stream) were Airflow's alone.
    busy, until = 0.0, 0.0
    for a, b in sorted((x["job_end"] - x["job_s"], x["job_end"]) for x in per_stage.values() if x["job_end"]):
        busy += max(0.0, b - max(a, until))
        until = max(until, b)
    ran = [t for t in res["tasks"] if t["start"] and t["end"]]
    span = max(t["end"] for t in ran) - min(t["start"] for t in ran)
    out = {
        "tasks_span_s": span,
        "jobs_busy_s": busy,
        "airflow_alone_s": span - busy,
        "stages": per_stage,
        "task_count": len(res["tasks"]),
        "tasks_run": sum(1 for t in res["tasks"] if t["start"] and "skipped" not in str(t["state"])),
        "overhead_fraction": (total_af - total_own) / total_own if total_own else None,
        "dag_overhead_fraction": (res["wall_s"] - total_own) / total_own if total_own else None,
    }
    print(
        f"airflow: {json.dumps(per_stage)}\n  tasks {out['task_count']}, overhead {out['overhead_fraction']:.3f}",
        flush=True,
    )
    return out


class CpuSampler(threading.Thread):
    """CPU seconds (user + system) of process trees while a run goes on: each root's (named in ``roots``, e.g.
    the scheduler: it and its descendants, executor workers, task supervisors and tasks), and the stage jobs'
    (``python -m airflow_curation.jobs`` and their descendants, under ``jobs``; a job outlives the task that
    launched it, so it is told apart by its command line, not its parent).

    Sampled every ``interval`` s from /proc (psutil): a process's counters include those of the children
    it reaped. When a process is gone, its parent, if still there, has reaped it and now holds its time;
    otherwise (the parent went too, or it was an orphan reaped by init) its last sample is kept. What is
    lost: the CPU a process used after its last sample when no sampled process reaped it (under
    ``interval`` s each). A job reaped by another tree's process (a task that waited for it) is moved back to
    the jobs."""

    JOB = "airflow_curation.jobs"

    def __init__(self, roots: dict[int, str], interval: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.roots = dict(roots)
        self.interval = interval
        self.gone = dict.fromkeys([*roots.values(), "jobs"], 0.0)
        self.prev: dict[int, tuple[str, int, float]] = {}
        self.jobs: set[int] = set()
        self.start_totals: dict[str, float] | None = None
        self.totals: dict[str, float] = {}
        self.samples = 0
        self._halt = threading.Event()

    def _sample(self) -> None:
        import psutil

        info = {}
        for p in psutil.process_iter(["ppid", "cmdline", "cpu_times"]):
            if p.info["cpu_times"] is not None:
                info[p.pid] = p.info
        kinds: dict[int, str | None] = {}

        def kind(pid: int) -> str | None:
            if pid not in kinds:
                kinds[pid] = None  # a cycle guard
                i = info[pid]
                # once a job, a job: a zombie's command line is empty
                if pid in self.jobs or self.JOB in " ".join(i["cmdline"] or ()):
                    kinds[pid] = "jobs"
                elif pid in self.roots:
                    kinds[pid] = self.roots[pid]
                elif i["ppid"] in info:
                    kinds[pid] = kind(i["ppid"])
            return kinds[pid]

        now = {}
        for pid, i in info.items():
            k = kind(pid)
            if k:
                t = i["cpu_times"]
                now[pid] = (k, i["ppid"], t.user + t.system + t.children_user + t.children_system)
        for pid, (k, ppid, total) in self.prev.items():
            if pid in now:
                continue
            if ppid in now:  # reaped by its parent, whose counters now hold it
                if now[ppid][0] != k:
                    self.gone[k] += total
                    self.gone[now[ppid][0]] -= total
            else:
                self.gone[k] += total
        self.prev = now
        self.jobs = {pid for pid, (k, _, _) in now.items() if k == "jobs"}
        totals = dict(self.gone)
        for k, _, total in now.values():
            totals[k] += total
        if self.start_totals is None:
            self.start_totals = totals
        self.totals = {k: totals[k] - self.start_totals[k] for k in totals}
        self.samples += 1

    def run(self) -> None:
        while not self._halt.is_set():
            self._sample()
            self._halt.wait(self.interval)

    def stop(self) -> dict[str, float]:
        self._halt.set()
        self.join()
        self._sample()
        return self.totals


# Appended to the copy of the DAG the real stack parses: ingest's shard size, as the dag.test path sets it.
INGEST_CONFIG = """
dag.get_task("ingest").config.update(target_shard_bytes={shard_bytes}, row_group_rows={row_group_rows})
"""


def _iso(value: str | None) -> float | None:
    from datetime import datetime

    return datetime.fromisoformat(value).timestamp() if value else None


def run_airflow_real(files: list[Path], work: Path, shard_bytes: int, row_group_rows: int, idle_s: float = 0) -> dict:
    """The same run on a real Airflow (``scripts/airflow_stack.py``: PostgreSQL, scheduler, triggerer,
    dag-processor, api-server, LocalExecutor with parallelism 4), triggered and read through REST; with
    ``idle_s``, first the stack's CPU for that long with the DAG unpaused and no run (its cost per second)."""
    from urllib.parse import quote

    from airflow_stack import airflow_stack

    base = work / "airflow-real"
    shutil.rmtree(base, ignore_errors=True)
    home, root = base / "airflow", work / "lake-airflow"
    shutil.rmtree(root, ignore_errors=True)
    dags = home / "dags"
    dags.mkdir(parents=True)
    dag_text = (REPO / "dags" / "curation_pipeline.py").read_text()
    (dags / "curation_pipeline.py").write_text(
        dag_text + INGEST_CONFIG.format(shard_bytes=shard_bytes, row_group_rows=row_group_rows)
    )
    env = {
        "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",  # only the run triggered below, no @daily one
        # Airflow's defaults (the journey's stack re-parses every 10 s, to see its DAGs at once)
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "300",
        "CURATION_POLL_INTERVAL": "5",
        "CURATION_LOCAL_JOBS_DIR": str(base / "jobs"),
    }
    dag_id = "curation_pipeline"
    with airflow_stack(home, dags, env, prefix="scale-airflow-") as stack:
        deadline = time.time() + 300
        while True:
            try:
                stack.request("GET", f"/api/v2/dags/{dag_id}")
                break
            except AssertionError:
                if time.time() > deadline:
                    errors = stack.request("GET", "/api/v2/importErrors")
                    raise RuntimeError(f"{dag_id} not parsed after 300 s: {errors}\n{stack.logs()}") from None
                time.sleep(2)
        stack.request("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
        pg = int((stack.pgdata / "postmaster.pid").read_text().split()[0])
        roots = {**{p.pid: name for name, p in stack.procs.items()}, pg: "postgres"}
        idle = None
        if idle_s:
            cpu = CpuSampler(roots)
            cpu.start()
            time.sleep(idle_s)
            idle = {"seconds": idle_s, **cpu.stop()}
        cpu = CpuSampler(roots)
        cpu.start()
        load = [os.getloadavg()[0]]
        conf = {"input": ",".join(map(str, files)), "lake": str(root), "dataset": DATASET, "max_duplicate_rate": 1.0}
        run = stack.request(
            "POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": "2026-12-01T00:00:00Z", "conf": conf}
        )
        path = f"/api/v2/dags/{dag_id}/dagRuns/{quote(run['dag_run_id'])}"
        while run["state"] not in ("success", "failed"):
            time.sleep(5)
            run = stack.request("GET", path)
            load.append(os.getloadavg()[0])
        airflow_cpu = cpu.stop()
        tis = stack.request("GET", f"{path}/taskInstances?limit=100")["task_instances"]
    res = {
        "state": run["state"],
        "run_id": run["dag_run_id"],
        "wall_s": _iso(run["end_date"]) - _iso(run["start_date"]),
        "tasks": [
            {
                "task_id": t["task_id"],
                "state": t["state"],
                "try_number": t["try_number"],
                "start": _iso(t["start_date"]),
                "end": _iso(t["end_date"]),
                "scheduled": _iso(t["scheduled_when"]),
                "queued": _iso(t["queued_when"]),
            }
            for t in tis
        ],
        "airflow_cpu_s": sum(airflow_cpu[name] for name in stack.procs),
        "postgres_cpu_s": airflow_cpu["postgres"],
        "children_cpu_s": airflow_cpu["jobs"],
        "cpu_by_process": airflow_cpu,
        "cpu_samples": cpu.samples,
        "idle_cpu": idle,
        "load_average": load,
        "parallelism": stack.env["AIRFLOW__CORE__PARALLELISM"],
    }
    if res["state"] != "success":
        raise RuntimeError(f"run {res['run_id']} ended {res['state']}: {json.dumps(res['tasks'], indent=1)}")
    res.update(_airflow_figures(res, root))
    shutil.rmtree(root, ignore_errors=True)  # the Airflow home (its logs, the tasks' logs) stays under --workdir
    return res


# -- report --------------------------------------------------------------------------------------
def plot(doc: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(doc["sizes"].values(), key=lambda r: r["input_bytes"])
    gb = [r["input_bytes"] / 1e9 for r in sizes]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    total = [sum(r["stages"][s]["cpu_s"] for s in STAGES) for r in sizes]
    for s in STAGES:
        ax1.plot(gb, [r["stages"][s]["cpu_s"] for r in sizes], marker="o", label=s)
        ax2.plot(gb, [r["stages"][s]["peak_rss"] / 2**20 for r in sizes], marker="o", label=s)
    ax1.plot(gb, total, marker="s", color="black", label="pipeline")
    ax1.plot(gb, [total[0] * g / gb[0] for g in gb], ls="--", color="grey", label="linear from the smallest")
    ax1.set(xlabel="input, GB of JSONL", ylabel="CPU seconds (one worker)", title="CPU time per stage")
    ax2.set(xlabel="input, GB of JSONL", ylabel="peak RSS per worker, MiB", title="Memory per worker", ylim=(0, None))
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


HEADER = """## Scale: the whole pipeline from 1 to 10 GB (`benchmarks/bench_scale.py`)

Commands: {commands}; report: `.venv/bin/python benchmarks/bench_scale.py --report --write-results`.
Text: `benchmarks/scale_corpus.py`, JSONL built from the Debian documentation and source files on this
machine ({pool_mb:.0f} MB of distinct text in {pool_docs:,} documents: /usr/share/doc, man and info pages, C headers,
Python sources); beyond it the input continues with letter-substituted passes over the same text (the
14 letters in no Gopher stop word rotated, a different rotation per pass: no shared shingles across
passes, same stop words and duplicate structure). Every stage runs as `curation <stage> --workers 1` in
a fresh process (the process is the worker: CPU = its user + system seconds, peak RSS = its
`ru_maxrss`); ingest shards of 1.5 MB zstd Parquet (1024-row row groups), the same at every size, so
1 GB already has 100+ shards; preprocess `--mapper local`, validate `--threads 1`; dedup with a fixed
128 MiB memory budget. **Machine: 2 cores, shared with whatever else ran (the notes below say what):
wall seconds move with it; CPU seconds are the comparison**, and even they include hyperthread and
cache contention.
"""


AIRFLOW_HEADER = """### Airflow overhead on a real scheduler and triggerer (`benchmarks/bench_scale.py --airflow-stack real`)

Commands: {commands}; report: `.venv/bin/python benchmarks/bench_scale.py --report --write-results --json` on
their JSON. The pipeline DAG (`dags/curation_pipeline.py`, a copy with ingest's shard size set to 1.5 MB and
1024-row row groups, the one change the `dag.test()` path makes too) on the stack the journey test starts
(`scripts/airflow_stack.py`: PostgreSQL, `airflow db migrate`, api-server, scheduler, dag-processor and
triggerer; LocalExecutor with `parallelism` 4; Airflow's default parse intervals; no schedule, only the
triggered run), local backend, gates polling at most every 5 s. One run triggered through REST (`POST
/api/v2/dags/curation_pipeline/dagRuns`, the conf of the `dag.test()` path) and its task instances read back
through REST (start, end, scheduled and queued times); the stage jobs' times from their `result.json` and
checkpoint records.
"""


METHOD_HEADER = """## Scale method: marginal cost per GB and per row, alternated repeats (`benchmarks/bench_scale.py`)

Commands: {commands}; report: `.venv/bin/python benchmarks/bench_scale.py --report --write-results --json
benchmarks/results/scale.json`. Rounds completed: {repeats} (sizes alternated, {order}), every run kept
in the JSON; a stage is `curation <stage> --workers 1` in a fresh process (CPU = user + system of the process,
`wait4`). The **marginal** cost between adjacent sizes pairs the k-th run of each (adjacent in time): a linear
stage has the same marginal cost at every interval, a superlinear one grows (the last column). Text:
`scale_corpus.py` with the pool capped at {pool_mb} MB, so that sizes past it hold several passes whose
near-duplicate chains span passes (the re-visited share grows 15% a pass). **Machine: 2 cores, 1-minute load
{load_min:.1f}-{load_max:.1f} during these runs** (each run's in the tables; the notes below say what else ran);
CPU seconds include any contention, wall seconds are not used.
"""


def _user_and_system(points: list[dict], unit: str) -> list[str]:
    """The marginal tables of user and of system CPU apart, where every run of ``points`` recorded both (this
    VM's system CPU per byte read grows with what a process has read: docs/scale.md)."""
    if not all("sys_s" in st for v in points for r in v["runs"] for st in r["stages"].values()):
        return []
    out: list[str] = []
    for field, cpu in (("user_s", "User"), ("sys_s", "System")):
        out += ["", f"{cpu} CPU alone, marginal per {'GB' if unit == 'gb' else 'row'}:", ""]
        out += marginal_table(points, unit, field)
    return out


def _shared_shards(points: list[dict], stage: str) -> list[str]:
    """The same shards' cost in a smaller and a larger lake (:func:`scale_method.shared_units`), where the runs
    recorded each unit's seconds."""
    table = shared_units_table(points, stage)
    if not table:
        return []
    return [
        "",
        f"The same shards in a smaller and a larger lake ({stage}: each shard's seconds, median of its runs):",
        "",
        *table,
    ]


def method_report(doc: dict) -> str:
    """The curvature tables: runs and marginal cost per GB, the tiny-row lake per row, the per-task fixed cost and
    peak RSS at plan-sized shards (each if present)."""
    out: list[str] = []
    sizes = [v for v in (doc.get("sizes") or {}).values() if v.get("runs")]
    base = [doc["fixed"]] if doc.get("fixed") else []  # the 200-row lake: its interval takes the fixed cost out
    if sizes:
        out += ["Every run (CPU seconds in run order):", "", *runs_table(sizes, "gb"), ""]
        out += ["Marginal cost per GB (the first interval from the 200-row lake of the fixed-cost runs):", ""]
        out += marginal_table(base + sizes, "gb")
        out += _user_and_system(base + sizes, "gb")
        out += _shared_shards(sizes, "preprocess")
    for stage, (key, unit, what) in itertools.product(
        CURVE_STATE,
        (
            ("curve", "gb", f"{doc.get('structure', 'growing')} near duplicates; each size's lake made once"),
            ("curve_tiny", "rows", "the tiny-row lakes, each made once"),
        ),
    ):
        curve = [v for v in (doc.get(f"{stage}_{key}") or {}).values() if v.get("runs")]
        if curve:
            title = stage.capitalize()
            cold = all(r["stages"][stage].get("cold") for v in curve for r in v["runs"])
            before = f"{stage}'s state removed" + (" and the page cache dropped" if cold else "")
            out += ["", f"{title} alone ({what}, {before} before every run), every run:", ""]
            out += [*runs_table(curve, unit), "", f"Marginal cost per {'GB' if unit == 'gb' else 'row'}:", ""]
            out += marginal_table(curve, unit)
            out += _user_and_system(curve, unit)
            # preprocess's units are the shards themselves (validate's parts take the lake's partition count in,
            # its merge the whole lake; dedup's global phase is one step): the same unit, the same work
            out += _shared_shards(curve, stage) if unit == "gb" and stage == "preprocess" else []
    tiny = [v for v in (doc.get("tiny") or {}).values() if v.get("runs")]
    if tiny:
        out += ["", "Tiny-row lake (one short line of the pool a document, ~60 B), every run:", ""]
        out += runs_table(tiny, "rows")
        if len(base + tiny) > 1:
            out += ["", "Marginal cost per row (the first interval from the 200-row lake of the fixed-cost runs):", ""]
            out += marginal_table(base + tiny, "rows")
    fixed = doc.get("fixed")
    if fixed:
        out += [
            "",
            f"Per-task fixed cost: each stage's process on a 200-document lake, {fixed['repeats']} runs:",
            "",
            "| stage | CPU s, median | every run | peak RSS MiB |",
            "| --- | ---: | --- | ---: |",
        ]
        for s, x in fixed["stages"].items():
            out.append(
                f"| {s} | {x['cpu_s_median']:.2f} | "
                + ", ".join(f"{c:.2f}" for c in x["cpu_s_runs"])
                + f" | {max(x['peak_rss_runs']) / 2**20:.0f} |"
            )
    rss = doc.get("rss_shards")
    if rss:
        out += [
            "",
            "Peak RSS per worker at plan-sized shards (one run each):",
            "",
            "| text per shard MB | input GB | shards | stage | CPU s | peak RSS MiB | load (1 min) |",
            "| ---: | ---: | ---: | --- | ---: | ---: | ---: |",
        ]
        for r in sorted(rss.values(), key=lambda r: r["text_mb_per_shard"]):
            for s, x in r["stages"].items():
                out.append(
                    f"| {r['text_mb_per_shard']:.0f} | {r['input_bytes'] / 1e9:.2f} | {x['shards']} | {s} | "
                    f"{x['cpu_s']:.1f} | {x['peak_rss'] / 2**20:.0f} | {x['load'][0]:.1f} |"
                )
    return "\n".join(out)


def _loads(doc: dict) -> list[float]:
    runs = [r for k in ("sizes", "tiny") for v in (doc.get(k) or {}).values() for r in v.get("runs", [])]
    return [x["load"][i] for r in runs for x in r["stages"].values() if x.get("load") for i in (0, 3)]


def report(doc: dict) -> str:
    if any(v.get("runs") for v in (doc.get("sizes") or {}).values()) or any(
        doc.get(k) for k in ("tiny", *(f"{s}_{c}" for s in CURVE_STATE for c in ("curve", "curve_tiny")))
    ):
        return method_report(doc)
    if not doc.get("sizes"):  # a JSON of DAG runs only
        return "\n".join(airflow_report(doc)[1:])
    sizes = sorted(doc["sizes"].values(), key=lambda r: r["input_bytes"])
    base = sizes[0]
    rows = []
    for r in sizes:
        g = r["input_bytes"] / 1e9
        for s in STAGES:
            x = r["stages"][s]
            spill = f"{x['spill_bytes'] / 1e6:.0f}" if "spill_bytes" in x else ""
            rows.append(
                f"| {g:.2f} | {s} | {x['shards']} | {x['rows']:,} | {x['wall_s']:.0f} | {x['cpu_s']:.1f} | "
                f"{g * 1e3 / x['cpu_s']:.1f} | {x['peak_rss'] / 2**20:.0f} | {spill} |"
            )
        cpu = sum(r["stages"][s]["cpu_s"] for s in STAGES)
        wall = sum(r["stages"][s]["wall_s"] for s in STAGES)
        rows.append(
            f"| {g:.2f} | **pipeline** | | | {wall:.0f} | **{cpu:.1f}** | {g * 1e3 / cpu:.1f} | "
            f"{max(r['stages'][s]['peak_rss'] for s in STAGES) / 2**20:.0f} | |"
        )
    for r in sizes:
        if r.get("stages_cold") and r.get("stages_warm"):
            rows.append("")
            rows.append(
                f"The {r['input_bytes'] / 1e9:.2f} GB rows above: {r.get('baseline_note', '')}. Both runs in full "
                "(first: numba kernels compiled into a fresh cache, input read from disk; second: input in the "
                "page cache):"
            )
            rows.append("")
            rows.append("| run | ingest CPU s | preprocess CPU s | dedup CPU s | validate CPU s |")
            rows.append("| --- | ---: | ---: | ---: | ---: |")
            top = sizes[-1]
            top_cpu = sum(top["stages"][s]["cpu_s"] for s in STAGES)
            rows[-2] += " largest size / this run |"
            rows[-1] += " ---: |"
            for name, st in (("first", r["stages_cold"]), ("second", r["stages_warm"])):
                ratio = top_cpu / sum(st[s]["cpu_s"] for s in STAGES)
                rows.append(f"| {name} | " + " | ".join(f"{st[s]['cpu_s']:.1f}" for s in STAGES) + f" | {ratio:.2f}x |")
    ratios = []
    for r in sizes[1:]:
        k = r["input_bytes"] / base["input_bytes"]
        cpu = sum(r["stages"][s]["cpu_s"] for s in STAGES) / sum(base["stages"][s]["cpu_s"] for s in STAGES)
        wall = sum(r["stages"][s]["wall_s"] for s in STAGES) / sum(base["stages"][s]["wall_s"] for s in STAGES)
        shard_stages = ("ingest", "preprocess", "dedup")
        rss = max(r["stages"][s]["peak_rss"] for s in shard_stages) / max(
            base["stages"][s]["peak_rss"] for s in shard_stages
        )
        vrss = r["stages"]["validate"]["peak_rss"] / base["stages"]["validate"]["peak_rss"]
        ratios.append(f"| {k:.1f}x | {cpu:.2f}x | {wall:.2f}x | {rss:.2f}x | {vrss:.2f}x |")
    goals = []
    if len(sizes) > 1:
        top = sizes[-1]
        k = top["input_bytes"] / base["input_bytes"]
        cpu = sum(top["stages"][s]["cpu_s"] for s in STAGES) / sum(base["stages"][s]["cpu_s"] for s in STAGES)
        limit = 10.5 * k / 10
        goals.append(
            f"- CPU time {k:.1f}x the data: **{cpu:.2f}x** (goal <= {limit:.2f}x, i.e. 10.5x for 10x): "
            + ("**met**" if cpu <= limit else "**missed**")
            + "; per stage: "
            + ", ".join(f"{s} {top['stages'][s]['cpu_s'] / base['stages'][s]['cpu_s']:.2f}x" for s in STAGES)
            + "."
        )
        if base.get("stages_cold") and base.get("stages_warm"):
            alt = {
                n: sum(top["stages"][s]["cpu_s"] for s in STAGES) / sum(base[n][s]["cpu_s"] for s in STAGES)
                for n in ("stages_cold", "stages_warm")
            }
            goals[-1] = goals[-1][:-1] + (
                f"; the verdict rests on the baseline: against the second 1 GB run alone (input in the page "
                f"cache) {alt['stages_warm']:.2f}x, against the first alone (kernels compiling) "
                f"{alt['stages_cold']:.2f}x."
            )
        rss = {s: top["stages"][s]["peak_rss"] / base["stages"][s]["peak_rss"] for s in STAGES}
        goals.append(
            "- Peak RSS per worker, largest / smallest size: "
            + ", ".join(f"{s} {v:.2f}x" for s, v in rss.items())
            + " (validate holds one shard group's join, a quantile batch and a hash partition of the ids)."
        )
    same = [f"{r['input_bytes'] / 1e9:.0f} GB" for r in sizes if r.get("identical_clusters")]
    if same:
        goals.append(f"- Dedup clusters identical under every memory budget tried at: {', '.join(same)}.")
    af = doc.get("airflow")
    if af and af.get("airflow_cpu_s") is not None:
        goals.append(
            f"- Airflow overhead on the {af['gb']:g} GB run: {100 * af['overhead_fraction']:.0f}% of the stages' wall, "
            f"{100 * af['airflow_cpu_s'] / max(1e-9, af['children_cpu_s']):.0f}% of their CPU (goal < 5%): **missed at "
            f"this size**; both are constant per run ({af['task_count']} task instances, "
            f"{af['airflow_cpu_s']:.0f} CPU-s), not per shard or per byte, so they fall under 5% once a run's stages "
            "take more than ~12 minutes of wall and ~160 CPU-s (docs/scale.md)."
        )
    cmp_rows = []
    for r in sizes:
        for name, c in (r.get("compare") or {}).items():
            budget = c.get("memory_budget")
            cmp_rows.append(
                f"| {r['input_bytes'] / 1e9:.2f} | {name} | {'' if budget is None else f'{budget / 2**20:.0f}'} | "
                f"{(c.get('global') or {}).get('partitions', '')} | {c['cpu_s']:.1f} | {c['peak_rss'] / 2**20:.0f} | "
                f"{c['spill_bytes'] / 1e6:.0f} | {c['clusters']['duplicates']:,} | `{c['clusters']['digest'][:12]}` |"
            )
    out = [
        "| GB | stage | shards | rows | wall s | CPU s | MB per CPU-s | peak RSS MiB | spill MB |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows,
        "",
        f"Growth against the {base['input_bytes'] / 1e9:.2f} GB point (time: the whole pipeline):",
        "",
        "| data | CPU time | wall time | peak RSS per worker, ingest/preprocess/dedup (largest) | peak RSS, validate |",
        "| ---: | ---: | ---: | ---: | ---: |",
        *ratios,
    ]
    if goals:
        out += ["", "Against the goals:", "", *goals]
    if cmp_rows:
        out += [
            "",
            "Dedup under memory budgets (same lake, same input; digest of every row's `cluster_id` and `is_duplicate`):",
            "",
            "| GB | run | memory budget MiB | LSH partitions | CPU s | peak RSS MiB | spill MB | duplicates | clusters digest |",
            "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
            *cmp_rows,
        ]
    return "\n".join([*out, *airflow_report(doc)])


def airflow_report(doc: dict) -> list[str]:
    """The DAG runs' tables: ``dag.test()`` (``airflow``), then the real stack's (``airflow_real``), each if present."""
    out = []
    if doc.get("airflow"):
        out += ["", *airflow_tables(doc["airflow"], real=False)]
    for af in sorted((doc.get("airflow_real") or {}).values(), key=lambda a: a["gb"]):
        out += ["", *airflow_tables(af, real=True)]
    return out


def airflow_tables(af: dict, real: bool) -> list[str]:
    """The overhead per stage, the gates' lag after their jobs ended, and the CPU split, of one DAG run."""
    how = (
        f"on a real Airflow (PostgreSQL, scheduler, triggerer, dag-processor, api-server; LocalExecutor, "
        f"parallelism {af.get('parallelism', 4)})"
        if real
        else "in `dag.test()` (SQLite, tasks one at a time, each deferred trigger run inline)"
    )
    load = af.get("load_average")
    out = [
        f"Airflow overhead, {af['gb']:g} GB through `dags/curation_pipeline.py` {how}, local backend, poll 5 s: "
        f"{af['task_count']} task instances ({af.get('tasks_run', '?')} ran, the rest skipped), "
        f"{max(s['shards'] for s in af['stages'].values())} shards, DAG run {af['wall_s']:.0f} s"
        + (f", load average {min(load):.1f}-{max(load):.1f}" if load else "")
        + ".",
        "",
        "| stage | shards | job wall s | checkpoints span s | launch + gate s | overhead s | overhead % |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for s, x in af["stages"].items():
        own = max(x.get("job_s", 0.0), x["own_span_s"])
        out.append(
            f"| {s} | {x['shards']} | {x.get('job_s', 0.0):.1f} | {x['own_span_s']:.1f} | {x['airflow_s']:.1f} | "
            f"{x['overhead_s']:.1f} | {100 * x['overhead_s'] / own:.1f} |"
        )
    total = sum(x["overhead_s"] for x in af["stages"].values())
    out.append(f"| **all** | | | | | **{total:.1f}** | **{100 * af['overhead_fraction']:.1f}** |")
    if "airflow_alone_s" in af:
        out += [
            "",
            f"On the run's critical path: its tasks spanned {af['tasks_span_s']:.1f} s (first task's start to last "
            f"task's end), a stage job ran during {af['jobs_busy_s']:.1f} s of them (the stages overlap where they "
            f"stream), so Airflow alone held the run for {af['airflow_alone_s']:.1f} s, "
            f"{100 * af['airflow_alone_s'] / max(1e-9, af['jobs_busy_s']):.1f}% of the jobs' time.",
        ]
    lags = [(s, x) for s, x in af["stages"].items() if "gate_lag_s" in x]
    if lags:
        out += [
            "",
            "Each stage's end: its job's end (result.json written) -> the task waiting for it ended; the launch task's "
            "own wall beside it. Trigger fired: job end -> the deferred task scheduled again; resume: that -> its end "
            "(queued, a worker starts, `execute_complete`, XCom).",
            "",
            "| stage | launch task s | waiting task | lag after job end s | after last checkpoint s | trigger fired s "
            "| resume s |",
            "| --- | ---: | --- | ---: | ---: | ---: | ---: |",
        ]
        for s, x in lags:
            cells = [x.get(k) for k in ("gate_lag_checkpoint_s", "gate_fired_s", "gate_resume_s")]
            out.append(
                f"| {s} | {x['launch_s']:.1f} | `{x['gate']}` | {x['gate_lag_s']:.1f} | "
                + " | ".join("" if c is None else f"{c:.1f}" for c in cells)
                + " |"
            )
    if af.get("airflow_cpu_s") is not None:
        jobs = max(1e-9, af["children_cpu_s"])
        if real:
            out += [
                "",
                f"CPU seconds during the run (sampled from /proc every 0.5 s, {af.get('cpu_samples', '?')} samples): the "
                f"Airflow processes {af['airflow_cpu_s']:.1f} s ("
                + ", ".join(
                    f"{k} {v:.1f}" for k, v in af.get("cpu_by_process", {}).items() if k not in ("postgres", "jobs")
                )
                + f"; the scheduler's include its executor workers and the task processes), "
                f"their PostgreSQL {af['postgres_cpu_s']:.1f} s, "
                f"the stage jobs {af['children_cpu_s']:.1f} s: Airflow's CPU is {100 * af['airflow_cpu_s'] / jobs:.1f}% "
                f"of the stages' ({100 * (af['airflow_cpu_s'] + af['postgres_cpu_s']) / jobs:.1f}% with PostgreSQL).",
            ]
            idle = af.get("idle_cpu")
            if idle:
                out[-1] += (
                    f" The same stack idle (DAG unpaused, no run) for {idle['seconds']:.0f} s before it: "
                    + ", ".join(f"{k} {v:.1f}" for k, v in idle.items() if k not in ("seconds", "jobs"))
                    + " CPU-s."
                )
        else:
            out += [
                "",
                f"CPU seconds: the `dag.test()` process itself (Airflow: parsing, scheduling, running the launch "
                f"tasks, the deferred gates' triggers, the metadata DB) {af['airflow_cpu_s']:.1f} s; its child "
                f"processes (the stage jobs) {af['children_cpu_s']:.1f} s: Airflow's CPU is "
                f"{100 * af['airflow_cpu_s'] / jobs:.1f}% of the stages'.",
            ]
    return out


def _order(points: list[dict]) -> str:
    """How the runs of ``points`` were ordered within their rounds: the JSON says, run by run."""
    runs = [r for p in points for r in p.get("runs", [])]
    if runs and all("position" in r for r in runs):
        return "A B C, C B A, ...: the order reversed every other round"
    return "A B C A B C ...: the same order every round"


def _header(template: str, doc: dict, commands: list[str], **fields) -> str:
    """A RESULTS block's header: ``template`` with the runs' commands, then the JSON's notes."""
    # the runs name their own workdir and JSON (they ran from a copy of the code): shown without
    shown = [re.sub(r" --(workdir|json) \S+", "", c) for c in commands if c]
    header = template.format(commands=", ".join(f"`{c}`" for c in shown), **fields)
    return header + "".join(f"\n{note}\n" for note in doc.get("notes", []))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,2,5,10", help="GB of JSONL, comma-separated")
    ap.add_argument("--repeats", type=int, default=1, help="runs of every size, alternated (A B C, C B A, ...)")
    ap.add_argument("--pool-mb", type=float, help="cap scale_corpus's pool: small sizes hold several passes")
    ap.add_argument("--file-mb", type=float, default=FILE_BYTES / 1e6, help="JSONL input file size, MB")
    ap.add_argument("--tiny-rows", default="", help="a lake of short documents at these row counts, e.g. 1e6,4e6,1e7")
    ap.add_argument("--fixed", action="store_true", help="each stage's process on a 200-row lake (per-task cost)")
    ap.add_argument("--rss-shard-mb", default="", help="peak RSS of preprocess and dedup at shards of this much text")
    ap.add_argument("--rss-gb", type=float, default=1.0, help="input of the --rss-shard-mb runs, GB")
    ap.add_argument("--shard-mb", type=float, default=1.5, help="target shard size (zstd Parquet), MB")
    ap.add_argument("--row-group-rows", type=int, default=1024, help="ingest row groups (a shard rolls over at one)")
    ap.add_argument("--budget-mb", type=float, default=128, help="dedup memory budget for the curve, MB")
    ap.add_argument(
        "--validate-memory-limit",
        help="DuckDB memory limit for validate, e.g. 2GB (512MB fails at 5 GB: not every operator spills)",
    )
    ap.add_argument(
        "--validate-before",
        help="a copy of the code (its PYTHONPATH) that validates the same lake too, for a before/after",
    )
    ap.add_argument(
        "--structure",
        choices=("growing", "stationary"),
        default="growing",
        help="the corpus's near duplicates: growing across passes, or a fixed share (scale_corpus.py)",
    )
    ap.add_argument("--stages", default=",".join(STAGES), help="stages run at every size (ingest, preprocess always)")
    ap.add_argument(
        "--curve",
        choices=tuple(CURVE_STATE),
        help="the sizes' lakes made once up to this stage, then the stage alone run --repeats times alternated "
        "(its state removed each time)",
    )
    ap.add_argument("--dedup-curve", action="store_true", help="--curve dedup (the spelling of earlier runs)")
    ap.add_argument("--keep-lakes", action="store_true", help="leave each size's lake under --workdir")
    ap.add_argument(
        "--reuse-lakes",
        action="store_true",
        help="--curve: take a size's lake made by an earlier curve from the same files (its making recorded in it)",
    )
    ap.add_argument(
        "--cold",
        action="store_true",
        help="--curve: drop the page cache before every run (root), so every size reads its lake from disk",
    )
    ap.add_argument("--compare", default="10", help="sizes at which dedup also runs unconstrained and at 1/4")
    ap.add_argument("--airflow-gb", type=float, default=None, help="run this size through the pipeline DAG too")
    ap.add_argument(
        "--airflow-stack",
        choices=("dagtest", "real", "both"),
        default="dagtest",
        help="how --airflow-gb runs the DAG: dag.test() on SQLite, or a real scheduler + triggerer on PostgreSQL",
    )
    ap.add_argument(
        "--airflow-idle", type=float, default=0, help="real stack: first its CPU for this many seconds without a run"
    )
    ap.add_argument("--workdir", default=str(REPO / "benchmarks" / "data" / "scale"))
    ap.add_argument("--json", default=str(REPO / "benchmarks" / "out" / "scale.json"))
    ap.add_argument("--report", action="store_true", help="no runs: print the tables and write the plot")
    ap.add_argument("--plot", default=str(REPO / "docs" / "images" / "scale.png"))
    ap.add_argument("--write-results", action="store_true", help="with --report: into benchmarks/RESULTS.md")
    args = ap.parse_args()
    if args.report:
        doc = json.loads(Path(args.json).read_text())
        text = report(doc)
        print(text)
        if any(v.get("runs") for v in (doc.get("sizes") or {}).values()) or doc.get("tiny"):
            if args.write_results:
                parts = [r for k in ("sizes", "tiny", "rss_shards") for r in (doc.get(k) or {}).values()]
                commands = sorted({r["command"] for r in [*parts, doc.get("fixed") or {}] if r.get("command")})
                loads = _loads(doc) or [0.0]
                header = _header(
                    METHOD_HEADER,
                    doc,
                    commands,
                    repeats=max(v.get("repeats", 1) for v in doc["sizes"].values()),
                    order=_order(list(doc["sizes"].values())),  # the sizes curve's own runs
                    pool_mb=f"{doc.get('pool_mb') or doc['pool']['bytes'] / 1e6:g}",
                    load_min=min(loads),
                    load_max=max(loads),
                )
                replace_block(RESULTS, "bench_scale_method", f"{header}\n{text}\n", after="bench_scale_airflow")
            return
        if not doc.get("sizes"):  # DAG runs only: their own block, after the Scale ones
            if args.write_results:
                runs = [*([doc["airflow"]] if doc.get("airflow") else []), *(doc.get("airflow_real") or {}).values()]
                header = _header(AIRFLOW_HEADER, doc, [r["command"] for r in runs])
                replace_block(RESULTS, "bench_scale_airflow", f"{header}\n{text}\n", after="bench_scale_validate")
            return
        plot(doc, Path(args.plot))
        if args.write_results:
            commands = sorted(
                {r["command"] for r in doc["sizes"].values()} | {(doc.get("airflow") or {}).get("command", "")}
            )
            header = _header(
                HEADER, doc, commands, pool_mb=doc["pool"]["bytes"] / 1e6, pool_docs=doc["pool"]["documents"]
            )
            image = os.path.relpath(args.plot, REPO / "benchmarks")
            replace_block(RESULTS, "bench_scale", f"{header}\n![scale]({image})\n\n{text}\n")
        print(f"wrote {args.plot}")
        return
    work = Path(args.workdir)
    sizes = [float(s) for s in args.sizes.split(",") if s]
    compare = {float(s) for s in args.compare.split(",") if s}
    file_bytes = int(args.file_mb * 1e6)
    files = generate(work, max(sizes + [args.airflow_gb or 0]), args.pool_mb, file_bytes, args.structure)
    stages_to_run = tuple(s for s in STAGES if s in args.stages.split(","))
    shard_bytes = int(args.shard_mb * 1e6)
    budget = int(args.budget_mb * 2**20)
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    command = " ".join([".venv/bin/python benchmarks/bench_scale.py", *map(shlex.quote, sys.argv[1:])])

    def save(key: str, value: dict, under: str | None = "sizes") -> None:
        """``doc[under][key] = value`` (``under`` None: ``doc[key]``)."""
        # Re-read first: runs of other sizes may write the same file from another process.
        doc = json.loads(out.read_text()) if out.exists() else {}
        doc.update(
            {
                "pool": pool_info(work),
                "pool_mb": args.pool_mb,
                "file_bytes": file_bytes,
                "structure": args.structure,
                "cpus": os.cpu_count(),
            }
        )
        value = {**value, "command": command, "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        (doc.setdefault(under, {}) if under else doc)[key] = value
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        os.replace(tmp, out)

    def one(gb: float, files: list[Path], name: str | None = None) -> dict:
        return run_size(
            files,
            gb,
            work,
            shard_bytes,
            args.row_group_rows,
            budget,
            gb in compare,
            ("--memory-limit", args.validate_memory_limit) if args.validate_memory_limit else (),
            args.validate_before,
            args.keep_lakes,
            stages_to_run,
            name=name,
        )

    if args.fixed:
        save("fixed", fixed_cost(work, max(1, args.repeats), shard_bytes, args.row_group_rows), under=None)
    points = [(f"{gb:g}", files[: max(1, round(gb * 1e9 / file_bytes))]) for gb in sizes]
    curve = args.curve or ("dedup" if args.dedup_curve else None)

    def run_curve(points: list[tuple[str, list[Path]]], tag: str, under: str) -> None:
        stage_curve(
            curve,
            points,
            args.repeats,
            work,
            shard_bytes,
            args.row_group_rows,
            budget,
            f"{curve}-{tag}",
            lambda label, r: save(label, r, under=under),
            args.reuse_lakes,
            args.cold,
        )

    if points and curve:
        run_curve(points, f"{args.structure}-", f"{curve}_curve")
        points = []
    if points:
        alternated(points, args.repeats, lambda label, fs: one(float(label), fs), save)
    for mb in [float(x) for x in args.rss_shard_mb.split(",") if x]:
        rss_files = generate(work, args.rss_gb, args.pool_mb, file_bytes)
        save(
            f"{mb:g}", rss_at_shards(rss_files, work, [mb], args.row_group_rows, budget)[f"{mb:g}"], under="rss_shards"
        )
    tiny = [int(float(x)) for x in args.tiny_rows.split(",") if x]
    if tiny:
        tiny_files = tiny_inputs(work, max(tiny))
        points = [(str(n), tiny_files[: max(1, math.ceil(n / TINY_FILE_ROWS))]) for n in tiny]
    if tiny and curve:
        run_curve(points, "tiny", f"{curve}_curve_tiny")
    elif tiny:
        alternated(
            points,
            args.repeats,
            lambda label, fs: one(0.0, fs, name=f"tiny{label}"),
            lambda label, r: save(label, r, under="tiny"),
        )
    if args.airflow_gb:
        n = max(1, round(args.airflow_gb * 1e9 / file_bytes))
        if args.airflow_stack in ("dagtest", "both"):
            save(
                "airflow",
                {"gb": args.airflow_gb, **run_airflow(files[:n], work, shard_bytes, args.row_group_rows)},
                under=None,
            )
        if args.airflow_stack in ("real", "both"):
            res = run_airflow_real(files[:n], work, shard_bytes, args.row_group_rows, args.airflow_idle)
            save(f"{args.airflow_gb:g}", {"gb": args.airflow_gb, **res}, under="airflow_real")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
