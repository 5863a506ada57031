"""The whole validate stage with DuckDB (one task; split into tasks + merge) and Daft (native; on Ray), side by
side on the same lake, alternated.

    .venv/bin/python benchmarks/bench_validate_engines.py [--gb 0.3] [--rounds 3] [--groups 3] [--workdir DIR]

Each run is a fresh process running the real stage (every metric, the checks, the JSON + HTML report) over
the lake ``bench_validate.generate`` writes (shards of 50,000 rows with attrs/preprocess and attrs/dedup):

- ``duckdb``: the stage in one process (one group);
- ``duckdb-split``: ``--groups`` tasks (``StageRunner.run(shard_group=(i, n))``, what an array task runs),
  one after the other in the process, then the collect step (the merge); each task's and the merge's seconds;
- ``daft``: ``query_engine: daft``, Daft's native runner;
- ``daft-ray``: Daft on a local Ray (``num_cpus`` = the machine's cores) the benchmark starts once, before
  the rounds (start-up timed apart, not counted); each run's driver connects to it.

The engines run in turn within each round (rounds alternate their order), median and min-max of the rounds.
Every run's counts and verdicts (rows, text bytes, distinct ids, null counts, funnel, duplicates, clusters,
attrs rows, drop reasons, each check's status) must equal the first DuckDB run's; the quantiles are not
compared (Daft's are approximate). Seconds are wall; CPU-s are the child's own (Ray's workers are other
processes: not counted for ``daft-ray``). Writes ``benchmarks/results/validate_engines.json`` and its section
of RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from bench_validate import ROWS_PER_SHARD, generate  # noqa: E402  (benchmarks/ is this script's folder)
from results import RESULTS, replace_block  # noqa: E402

from airflow_curation.core.layout import Lake  # noqa: E402

ENGINES = ("duckdb", "duckdb-split", "daft", "daft-ray")
JSON_OUT = os.path.join(os.path.dirname(__file__), "results", "validate_engines.json")
COMPARED = ("rows", "text_bytes", "distinct_ids", "null_counts", "missing_attrs", "funnel", "duplicates")
COMPARED += ("clusters", "attrs_rows", "drop_reasons")


def child(args) -> None:
    """One run of the stage, in this fresh process; prints its figures as JSON."""
    from airflow_curation.stages.base import StageRunner
    from airflow_curation.stages.validate import ValidateStage

    uri, _ = generate(args.workdir, args.gb)
    lake = Lake(args.workdir, "bench")
    shutil.rmtree(lake.path("_checkpoints", "validate"), ignore_errors=True)  # the work, not a reused verdict
    config = {"input_manifest": uri, "max_duplicate_rate": 0.5, "fail_on_error": False}
    out: dict = {"engine": args.child}
    if args.child.startswith("daft"):
        config["query_engine"] = "daft"
    if args.child == "daft-ray":  # the benchmark's Ray (started once, outside the timed runs)
        config["daft_runner"], config["ray_address"] = "ray", args.ray_address
    if args.child == "duckdb-split":
        config["part_rows"] = ROWS_PER_SHARD  # a part per shard, the tasks a part each (or more)
    run_id = f"{args.child}-{time.time_ns()}"
    cpu0, t0 = _cpu(), time.perf_counter()
    if args.child == "duckdb-split":
        out["tasks_s"] = []
        for i in range(args.groups):
            t = time.perf_counter()
            StageRunner(ValidateStage(lake, config, run_id)).run(shard_group=(i, args.groups))
            out["tasks_s"].append(time.perf_counter() - t)
        t = time.perf_counter()
        StageRunner(ValidateStage(lake, config, run_id)).run(collect=True)
        out["merge_s"] = time.perf_counter() - t
    else:
        StageRunner(ValidateStage(lake, config, run_id)).run()
    out["seconds"], out["cpu_s"] = time.perf_counter() - t0, _cpu() - cpu0
    with open(os.path.join(args.workdir, "bench", "_manifests", run_id, "report.json")) as f:
        report = json.load(f)
    out["numbers"] = {k: report["metrics"][k] for k in COMPARED}
    out["checks"] = {c["name"]: c["status"] for c in report["checks"]}
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(out))


class _SlowClock:
    """The ``time`` module, its ``monotonic`` divided by ``factor``."""

    def __init__(self, factor: float) -> None:
        self.factor = factor

    def monotonic(self) -> float:
        return time.monotonic() / self.factor

    def __getattr__(self, name: str):
        return getattr(time, name)


def start_ray() -> tuple[str, float]:
    """A local Ray of this machine's cores for the daft-ray runs (their driver connects to it): its address
    and start-up seconds. Ray gives its raylet 30 s to register; a loaded machine can miss that: retried."""
    os.environ["RAY_AUTH_MODE"] = "disabled"  # as in the runs' drivers
    import ray
    import ray._private.node as ray_node

    # Ray 2.60 gives the raylet a fixed 30 s to register with the GCS (node.py, not configurable); on a machine
    # loaded 10x past its cores it misses that every time. Its start-up wait, only, reads a 5x slower clock.
    ray_node.time = _SlowClock(5.0)

    t = time.perf_counter()
    for attempt in range(5):
        try:
            ray.init(num_cpus=os.cpu_count() or 2, include_dashboard=False)
            break
        except Exception as e:  # noqa: BLE001
            ray.shutdown()
            print(f"Ray start-up failed ({e}), attempt {attempt + 1} of 5", flush=True)
            if attempt == 4:
                raise
            time.sleep(20)
    return ray.get_runtime_context().gcs_address, time.perf_counter() - t


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _stats(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "runs": xs}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=0.3, help="text bytes of the lake, in GB")
    ap.add_argument("--workdir", default="/tmp/bench_validate_engines")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--groups", type=int, default=3, help="duckdb-split: tasks of the array")
    ap.add_argument("--engines", default=",".join(ENGINES), help="comma-separated, of " + ", ".join(ENGINES))
    ap.add_argument("--no-results", dest="results", action="store_false")
    ap.add_argument("--child", choices=ENGINES, help=argparse.SUPPRESS)
    ap.add_argument("--ray-address", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    uri, text_bytes = generate(args.workdir, args.gb)
    engines = tuple(args.engines.split(","))
    ray_address, ray_startup = start_ray() if "daft-ray" in engines else (None, None)
    runs: dict[str, list[dict]] = {e: [] for e in engines}
    ref = None
    for r in range(args.rounds):
        order = engines if r % 2 == 0 else engines[::-1]
        for engine in order:
            cmd = [sys.executable, __file__, "--child", engine, "--gb", str(args.gb), "--workdir", args.workdir]
            cmd += ["--groups", str(args.groups)] + (["--ray-address", ray_address] if ray_address else [])
            env = {
                **os.environ,
                "RAY_AUTH_MODE": "disabled",
                "PYTHONPATH": os.path.join(os.path.dirname(__file__), ".."),
            }
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if proc.returncode != 0:
                raise RuntimeError(f"{engine} child failed:\n{proc.stderr[-3000:]}")
            got = json.loads(proc.stdout.strip().splitlines()[-1])
            if ref is None:
                ref = {"numbers": got["numbers"], "checks": got["checks"]}
            for key in ("numbers", "checks"):
                if got[key] != ref[key]:
                    raise AssertionError(f"{engine}: {key} differ from the first run's:\n{got[key]}\n{ref[key]}")
            runs[engine].append(got)
            extra = (
                f" (tasks {', '.join(f'{t:.1f}' for t in got['tasks_s'])}, merge {got['merge_s']:.1f})"
                if "tasks_s" in got
                else ""
            )
            print(f"round {r} {engine:13s} {got['seconds']:7.2f} s  {got['cpu_s']:7.2f} CPU-s{extra}", flush=True)
    load = os.getloadavg()
    out = {
        "command": f".venv/bin/python benchmarks/bench_validate_engines.py --gb {args.gb} --rounds {args.rounds} "
        f"--groups {args.groups}",
        "at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_end": load,
        "ray_startup_s": ray_startup,
        "cores": os.cpu_count(),
        "text_bytes": text_bytes,
        "rows": ref["numbers"]["rows"],
        "numbers": ref["numbers"],
        "checks": ref["checks"],
        "engines": {
            e: {
                "seconds": _stats([g["seconds"] for g in rs]),
                "cpu_s": _stats([g["cpu_s"] for g in rs]),
                "peak_rss_mib": _stats([g["peak_rss_mib"] for g in rs]),
                **({"largest_task_s": _stats([max(g["tasks_s"]) for g in rs])} if "tasks_s" in rs[0] else {}),
                **({"merge_s": _stats([g["merge_s"] for g in rs])} if "merge_s" in rs[0] else {}),
            }
            for e, rs in runs.items()
        },
    }
    os.makedirs(os.path.dirname(JSON_OUT), exist_ok=True)
    with open(JSON_OUT, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
    print(f"all runs agree on the counts and verdicts; wrote {JSON_OUT}")
    if args.results:
        write_results(out)


def _fmt(s: dict) -> str:
    return f"{s['median']:.2f} ({s['min']:.2f}-{s['max']:.2f})"


def write_results(out: dict) -> None:
    e = out["engines"]
    base = e[next(iter(e))]["seconds"]["median"]
    load = ", ".join(f"{x:.1f}" for x in out["load_end"])
    lines = [
        "## Validate: DuckDB (one task, split + merge) and Daft (native, Ray) on the same lake "
        "(`benchmarks/bench_validate_engines.py`)",
        "",
        f"Command: `{out['command']}` (run {out['at']}; JSON: `benchmarks/results/validate_engines.json`). The "
        f"whole stage (metrics, checks, report) over {out['text_bytes'] / 1e9:.2f} GB of text in {out['rows']:,} "
        "rows (shards of 50,000, attrs/preprocess and attrs/dedup), each run a fresh process, the engines in turn "
        "each round (order reversed every other round), median (min-max). *duckdb-split*: a part per shard, the "
        "array's tasks run one after the other in the process, then the merge (collect). *daft-ray*: a local Ray "
        f"of {out['cores']} CPUs the benchmark starts once ({out['ray_startup_s'] or 0:.0f} s, not counted), each "
        "run's driver connecting to it (its workers' CPU is not in CPU-s). Every "
        "run gave the same counts and verdicts (rows, bytes, distinct ids, nulls, funnel, duplicates, clusters, "
        "drop reasons, each check's status; the quantiles, exact in both, are compared by `bench_daft_quantiles.py`).",
        f"**Machine: {out['cores']} cores shared with other helpers' work (load average {load} at the end).**",
        "",
        f"| engine | seconds | vs {next(iter(e))} | CPU-s | peak RSS MiB | largest task s | merge s |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, s in e.items():
        task = _fmt(s["largest_task_s"]) if "largest_task_s" in s else ""
        merge = _fmt(s["merge_s"]) if "merge_s" in s else ""
        lines.append(
            f"| {name} | {_fmt(s['seconds'])} | {s['seconds']['median'] / base:.2f} | {_fmt(s['cpu_s'])} | "
            f"{s['peak_rss_mib']['median']:.0f} | {task} | {merge} |"
        )
    replace_block(RESULTS, "bench_validate_engines", "\n".join(lines), after="bench_validate_scaling")
    print(f"wrote the bench_validate_engines section of {RESULTS}")


if __name__ == "__main__":
    main()
