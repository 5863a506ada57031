"""What a task pays for its compiled kernels, and what a portable kernel cache would cost.

    PYTHONPATH=$PWD .venv/bin/python -P benchmarks/bench_kernel_cache.py --rounds 5 --cpu 1 \\
        --kernel-files <dir>/part-*.parquet --json benchmarks/results/kernel_cache.json

(a) **Stage processes by cache state.** A preprocess and a dedup process (``--mapper local``, one worker) on
the demo corpus's lake (``scripts/make_sample_corpus.py``), each in a fresh process pinned to one CPU, with
numba's cache **cold** (an empty ``NUMBA_CACHE_DIR``: a pod of an image built without ``curation warm``, whose
home is an empty ``/tmp``), **seeded** (an empty one plus ``CURATION_KERNEL_CACHE``: the image's prebuilt cache
copied on import, what the project's image does) and **warm** (the warmed folder itself: a shared venv after
its first task). The three are rotated per round; CPU seconds of the child (user + system, ``wait4``).

(b) **Kernels compiled for the host CPU or for a portable target** (``NUMBA_CPU_NAME=generic``: any x86-64;
``x86-64-v3``: AVX2, every x86 server CPU of the last decade; code that loads on any such node, so one prebuilt
cache would serve a cluster of mixed CPU models): CPU s of the signal kernel (``SignalComputer.compute``) and
of MinHash signatures over ``--kernel-files``, each target in its own warmed cache, rotated per round, with a
SHA-256 of every output so the targets are compared on what they computed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CURATION = str(Path(sys.executable).parent / "curation")
STATES = ("cold", "seeded", "warm")
STAGES = ("preprocess", "dedup")
# numba's code for this machine's CPU model, for any x86-64, and for x86-64-v3 (AVX2: every x86 server CPU since
# 2013-2015); NUMBA_CPU_NAME takes LLVM's names
CPU_MODELS = ("host", "generic", "x86-64-v3")

KERNEL_CHILD = r"""
import hashlib, json, sys, time
import pyarrow.compute as pc
import pyarrow.parquet as pq
from airflow_curation.core.signals import SignalComputer, warm_up
from airflow_curation.core.minhash import MinHasher, MinHashParams, prepare
warm_up()
sc, mh = SignalComputer(), MinHasher(MinHashParams())
mh.signatures(prepare(["warm up the kernel outside the timing"]), prepared=True)
h = hashlib.sha256()
sig_cpu = mh_cpu = mb = 0.0
for f in sys.argv[1:]:
    for b in pq.ParquetFile(f).iter_batches(batch_size=4096, columns=["text"]):
        t = b.column(0)
        mb += pc.sum(pc.binary_length(t)).as_py() / 1e6
        t0 = time.process_time()
        out = sc.compute(t)
        sig_cpu += time.process_time() - t0
        p = prepare(t)
        t0 = time.process_time()
        sig, counts = mh.signatures(p, prepared=True)
        mh_cpu += time.process_time() - t0
        for c in out.columns:
            h.update(c.to_numpy().tobytes())
        h.update(sig.tobytes())
        h.update(counts.tobytes())
print(json.dumps({"signals_cpu_s": sig_cpu, "minhash_cpu_s": mh_cpu, "mb": mb, "sha": h.hexdigest()}))
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_") and k != "CURATION_KERNEL_CACHE"}
    return {**env, **extra}


def _child(cmd: list[str], env: dict[str, str], cpu: int) -> tuple[float, str]:
    """Run ``cmd`` pinned to ``cpu``; its CPU seconds (user + system, its own and its children's) and stdout."""
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(["taskset", "-c", str(cpu), *cmd], env=env, stdout=out, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err = proc.stderr.read().decode(errors="replace")
        proc.stderr.close()
        out.seek(0)
        text = out.read().decode()
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{err[-3000:]}")
    return usage.ru_utime + usage.ru_stime, text


def _lakes(work: Path, modules: int) -> tuple[Path, Path, Path]:
    """The demo corpus's lake after ingest and after preprocess (the inputs of the two measured stages), and a
    warmed kernel cache (``curation warm``)."""
    corpus = work / "corpus"
    subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "make_sample_corpus.py"),
            "--out",
            str(corpus),
            "--modules",
            str(modules),
        ],
        check=True,
        capture_output=True,
    )
    seed = work / "seed"
    subprocess.run([CURATION, "warm"], env=_env(NUMBA_CACHE_DIR=str(seed)), check=True, capture_output=True)
    ingested, preprocessed = work / "lake-ingested", work / "lake-preprocessed"
    env = _env(NUMBA_CACHE_DIR=str(seed))
    lake = ["--lake", str(ingested), "--dataset", "d", "--run-id", "r"]
    subprocess.run([CURATION, "ingest", str(corpus / "data"), *lake], env=env, check=True, capture_output=True)
    shutil.copytree(ingested, preprocessed)
    lake = ["--lake", str(preprocessed), "--dataset", "d", "--run-id", "r", "--mapper", "local"]
    subprocess.run([CURATION, "preprocess", *lake], env=env, check=True, capture_output=True)
    return ingested, preprocessed, seed


def stage_processes(rounds: int, cpu: int, modules: int) -> dict:
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-kernel-cache-") as tmp:
        work = Path(tmp)
        ingested, preprocessed, seed = _lakes(work, modules)
        k = 0
        for r in range(rounds):
            states = STATES[r % 3 :] + STATES[: r % 3]  # rotated: each state takes every place in turn
            for state in states:
                for stage in STAGES:
                    k += 1
                    lake = work / f"run-{k}"
                    shutil.copytree(ingested if stage == "preprocess" else preprocessed, lake)
                    cache = work / f"cache-{k}"
                    env = {
                        "cold": _env(NUMBA_CACHE_DIR=str(cache)),
                        "seeded": _env(NUMBA_CACHE_DIR=str(cache), CURATION_KERNEL_CACHE=str(seed)),
                        "warm": _env(NUMBA_CACHE_DIR=str(seed)),
                    }[state]
                    argv = [
                        CURATION,
                        stage,
                        "--lake",
                        str(lake),
                        "--dataset",
                        "d",
                        "--run-id",
                        "r",
                        "--mapper",
                        "local",
                    ]
                    load = os.getloadavg()[0]
                    cpu_s, _ = _child(argv, env, cpu)
                    runs.append({"round": r, "state": state, "stage": stage, "cpu_s": round(cpu_s, 3), "load_1m": load})
                    shutil.rmtree(lake)
                    shutil.rmtree(cache, ignore_errors=True)
    return {"rounds": rounds, "cpu": cpu, "modules": modules, "runs": runs}


def kernel_cpu_models(files: list[str], rounds: int, cpu: int, models: tuple[str, ...] = CPU_MODELS) -> dict:
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-kernel-cpu-") as tmp:
        envs = {
            # a portable target is a name alone: NUMBA_CPU_FEATURES empty, else numba adds this host's features
            # (AVX-512 here) to any name but generic, and the code and its cache key are this host's again
            name: _env(
                NUMBA_CACHE_DIR=f"{tmp}/{name}",
                **({} if name == "host" else {"NUMBA_CPU_NAME": name, "NUMBA_CPU_FEATURES": ""}),
            )
            for name in models
        }
        for env in envs.values():  # compile each variant's kernels into its cache, outside the timing
            _child([sys.executable, "-P", "-c", KERNEL_CHILD, files[0]], {**env, "PYTHONPATH": str(REPO)}, cpu)
        for r in range(rounds):
            order = models[r % len(models) :] + models[: r % len(models)]  # rotated
            for name in order:
                load = os.getloadavg()[0]
                _, out = _child(
                    [sys.executable, "-P", "-c", KERNEL_CHILD, *files], {**envs[name], "PYTHONPATH": str(REPO)}, cpu
                )
                runs.append({"round": r, "cpu_model": name, "load_1m": load, **json.loads(out)})
    return {"rounds": rounds, "cpu": cpu, "files": files, "models": list(models), "runs": runs}


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def report(record: dict) -> str:
    lines = []
    proc = record.get("processes")
    if proc:
        lines += [
            f"(a) Stage processes by kernel-cache state: demo corpus ({proc['modules']} modules), {proc['rounds']} rounds, "
            f"states rotated, pinned to CPU {proc['cpu']}; CPU s of the whole process, median (min-max); "
            f"1-minute load {min(r['load_1m'] for r in proc['runs']):.1f}-{max(r['load_1m'] for r in proc['runs']):.1f}.",
            "",
            "| stage | cold | seeded (image's cache copied on import) | warm | cold - seeded |",
            "| --- | ---: | ---: | ---: | ---: |",
        ]
        for stage in STAGES:
            by = {s: [r["cpu_s"] for r in proc["runs"] if r["stage"] == stage and r["state"] == s] for s in STATES}
            gap = statistics.median(by["cold"]) - statistics.median(by["seeded"])
            lines.append(
                f"| {stage} | {_median(by['cold'])} | {_median(by['seeded'])} | {_median(by['warm'])} | {gap:.2f} |"
            )
        lines.append("")
    models = record.get("cpu_models")
    if models:
        names = models.get("models", ["host", "generic"])
        shas = {r["sha"] for r in models["runs"]}
        lines += [
            f"(b) Kernels for the host CPU against portable targets (`NUMBA_CPU_NAME`): {models['runs'][0]['mb']:.1f} MB "
            f"of text, {models['rounds']} rounds rotated, CPU {models['cpu']}; outputs identical in every run: "
            f"{'yes' if len(shas) == 1 else 'NO'}; CPU s of the kernel, median (min-max), and its ratio to host's "
            "in the same round.",
            "",
            "| kernel | " + " | ".join(names) + " | " + " | ".join(f"{n} / host" for n in names[1:]) + " |",
            "| --- |" + " ---: |" * (2 * len(names) - 1),
        ]
        for key, label in (("signals_cpu_s", "signal kernel"), ("minhash_cpu_s", "MinHash signatures")):
            by = {n: {r["round"]: r[key] for r in models["runs"] if r["cpu_model"] == n} for n in names}
            cells = [_median(list(by[n].values())) for n in names]
            cells += [_median([by[n][k] / by["host"][k] for k in by["host"]]) for n in names[1:]]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cpu", type=int, default=1)
    ap.add_argument("--modules", type=int, default=64, help="stdlib modules in the demo corpus")
    ap.add_argument("--kernel-files", nargs="*", default=[], help="Parquet files with a text column, for (b)")
    ap.add_argument("--cpu-models", default=",".join(CPU_MODELS), help="for (b): host and NUMBA_CPU_NAME values")
    ap.add_argument("--skip-processes", action="store_true")
    ap.add_argument("--json", help="write the record here")
    ap.add_argument("--report", help="print the tables of a record written before, run nothing")
    args = ap.parse_args()
    if args.report:
        print(report(json.loads(Path(args.report).read_text())))
        return 0
    record = {"started": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": sys.argv}
    t0 = time.monotonic()
    if not args.skip_processes:
        record["processes"] = stage_processes(args.rounds, args.cpu, args.modules)
    if args.kernel_files:
        models = tuple(args.cpu_models.split(","))
        record["cpu_models"] = kernel_cpu_models(args.kernel_files, args.rounds, args.cpu, models)
    record["wall_s"] = round(time.monotonic() - t0, 1)
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n")
    print(report(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
