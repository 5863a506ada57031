"""Decontamination against datatrove's n-gram decontamination: flagged set and CPU per core.

Same generated data for both (``tests/decontaminate/gen.py``: documents, some of which copy a restyled
passage of an evaluation row, and evaluation sets of three benchmarks), 13-grams, datatrove's default
normalisation on both sides. Each round runs, in fresh processes and alternating which goes first:

- ours: the decontaminate stage on the documents as Parquet shards (plain-file mode, one worker): the index
  built from the evaluation JSONL files, every shard probed, attrs Parquet + checkpoints + manifest written;
- datatrove 0.10.1 (``.venv-oracles``, ``tests/decontaminate/datatrove_oracle.py``): its indexer's
  ``compute_hashes`` over the evaluation texts, the ``.index.hashes`` files, then ``NGramsDecontFilter``
  over the documents, in memory (no reading or writing of documents).

Both are timed inside their process around the work only (imports excluded): CPU seconds (one core each)
and wall. Reported: the median and spread of ``--rounds`` rounds, the per-core throughput ratio, and whether
both flag the same documents (and the same first n-gram and benchmark).

    .venv/bin/python benchmarks/bench_decontaminate.py --docs 2000 --rounds 5
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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.results import RESULTS, replace_block
from tests.decontaminate import gen

OUT = REPO / "benchmarks" / "results" / "decontaminate.json"
ORACLE = REPO / "tests" / "decontaminate" / "datatrove_oracle.py"
TARGET = "airflow_curation.stages.decontaminate.stage:DecontaminateStage"
N = 13

OURS = """
import json, sys, time
from airflow_curation.core.layout import Lake
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.decontaminate.stage import DecontaminateStage
spec = json.load(open(sys.argv[1]))
wall, cpu = time.perf_counter(), time.process_time()
stage = DecontaminateStage(Lake(spec["out"], "_curation"), spec["config"], "bench")
StageRunner(stage).run()
print(json.dumps({"seconds": time.perf_counter() - wall, "cpu": time.process_time() - cpu}))
"""


def run_ours(tmp: Path, shards: list[str], evals: dict[str, str], k: int) -> dict:
    out = tmp / f"ours-{k}"
    spec = tmp / "ours.json"
    config = {"inputs": shards, "output_dir": str(out), "eval_sets": evals, "ngram": N, "workers": 1}
    spec.write_text(json.dumps({"out": str(out), "config": config}))
    env = {**os.environ, "PYTHONPATH": str(REPO), "CURATION_STAGES": f"decontaminate={TARGET}"}
    proc = subprocess.run([sys.executable, "-c", OURS, str(spec)], capture_output=True, text=True, env=env)
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    timing = json.loads(proc.stdout.strip().splitlines()[-1])
    flagged = {}
    for s in shards:
        for r in pq.read_table(out / Path(s).name).to_pylist():
            if r["contaminated"]:
                flagged[int(r["id"])] = (r["contamination_ngram"], r["contamination_benchmark"])
    shutil.rmtree(out)
    return {**timing, "flagged": flagged}


def run_datatrove(python: str, tmp: Path, evals: dict[str, list[str]], docs: list[str], k: int) -> dict:
    spec = tmp / "dt.json"
    spec.write_text(json.dumps({"n": N, "eval": evals, "docs": docs, "index_dir": str(tmp / f"dt-{k}")}))
    proc = subprocess.run([python, str(ORACLE), str(spec)], capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    out = json.loads(proc.stdout)
    return {
        "seconds": out["index_seconds"] + out["filter_seconds"][0],
        "cpu": out["index_cpu"] + out["filter_cpu"][0],
        "flagged": {f["i"]: (f["ngram"], f["task"]) for f in out["flagged"]},
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=2000)
    ap.add_argument("--eval-rows", type=int, default=300, help="rows per benchmark (three benchmarks)")
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--oracle-python", default=str(REPO / ".venv-oracles" / "bin" / "python"))
    args = ap.parse_args()

    evals, docs, expected = gen.make(11, args.docs, dict.fromkeys(("arc", "gsm8k", "mmlu"), args.eval_rows), N)
    mb = sum(len(d.encode()) for d in docs) / 1e6
    tmp = Path(tempfile.mkdtemp(prefix="bench-decon-"))
    eval_files = {}
    for b, rows in evals.items():
        eval_files[b] = str(tmp / f"{b}_test.jsonl")
        Path(eval_files[b]).write_text("".join(json.dumps({"text": t}) + "\n" for t in rows))
    shards = []
    for s in range(args.shards):
        idx = range(s, len(docs), args.shards)
        shards.append(str(tmp / f"docs-{s}.parquet"))
        pq.write_table(pa.table({"id": [str(i) for i in idx], "text": [docs[i] for i in idx]}), shards[-1])

    ours, theirs = [], []
    load = [os.getloadavg()[0]]
    for k in range(args.rounds):
        first, second = (run_ours, run_datatrove) if k % 2 == 0 else (run_datatrove, run_ours)
        for fn in (first, second):
            if fn is run_ours:
                ours.append(run_ours(tmp, shards, eval_files, k))
            else:
                theirs.append(run_datatrove(args.oracle_python, tmp, evals, docs, k))
        load.append(os.getloadavg()[0])
        print(f"round {k}: ours {ours[-1]['cpu']:.2f} CPU s, datatrove {theirs[-1]['cpu']:.2f} CPU s", file=sys.stderr)
    shutil.rmtree(tmp)

    def stats(runs: list[dict], key: str) -> dict:
        values = [r[key] for r in runs]
        return {"median": statistics.median(values), "min": min(values), "max": max(values)}

    o_flag, t_flag = ours[0]["flagged"], theirs[0]["flagged"]
    result = {
        "docs": len(docs),
        "mb": round(mb, 3),
        "eval_rows": {b: len(r) for b, r in evals.items()},
        "ngram": N,
        "rounds": args.rounds,
        "load_avg_1m": load,
        "cores": os.cpu_count(),
        "ours": {"cpu": stats(ours, "cpu"), "wall": stats(ours, "seconds")},
        "datatrove": {"cpu": stats(theirs, "cpu"), "wall": stats(theirs, "seconds")},
        "flagged": {"ours": len(o_flag), "datatrove": len(t_flag), "planted": len(expected)},
        "same_flagged_documents": set(o_flag) == set(t_flag),
        "same_first_ngram_and_benchmark": o_flag == t_flag,
        "flagged_stable_across_rounds": all(r["flagged"] == o_flag for r in ours)
        and all(r["flagged"] == t_flag for r in theirs),
    }
    result["per_core_speedup"] = result["datatrove"]["cpu"]["median"] / result["ours"]["cpu"]["median"]
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    write_results(result, args)
    return 0


def write_results(r: dict, args: argparse.Namespace) -> None:
    def row(name: str, side: dict) -> str:
        c, w = side["cpu"], side["wall"]
        return (
            f"| {name} | {c['median']:.2f} ({c['min']:.2f}-{c['max']:.2f}) | {w['median']:.2f} "
            f"| {r['mb'] / c['median']:.2f} |"
        )

    cmd = f".venv/bin/python benchmarks/bench_decontaminate.py --docs {args.docs} --rounds {args.rounds}"
    section = f"""## Decontamination against datatrove's n-gram decontamination (`benchmarks/bench_decontaminate.py`)

Command: `{cmd}` (run {time.strftime("%Y-%m-%d %H:%M", time.gmtime())} UTC;
datatrove 0.10.1 from `scripts/setup_oracles.sh`). Data: `tests/decontaminate/gen.py`, {r["docs"]} documents
({r["mb"]:.1f} MB) in {args.shards} Parquet shards, three benchmarks of {args.eval_rows} rows, 13-grams;
{r["flagged"]["planted"]} documents carry a restyled 13-word passage of an evaluation row (case, punctuation,
numbers, accents), about 5% more a 12-word near miss. Ours: the stage end to end (index built, shards probed,
attrs + checkpoints + manifest written, one worker); datatrove: its indexer's hashes + `NGramsDecontFilter`
over the documents in memory (nothing read or written). CPU seconds inside each process around the work
(one core each; each side's one-off costs included: ours the index and the compiled kernel's load,
datatrove's its index and spaCy's load), median (min-max) of {r["rounds"]} alternated rounds.
**Machine: {r["cores"]} cores shared with other helpers' test suites, 1-minute load
{min(r["load_avg_1m"]):.1f}-{max(r["load_avg_1m"]):.1f} during the run: absolute figures and wall times are
noisy; the CPU ratio is the comparison.**

| contender | CPU s | wall s (median) | MB/s per core |
| --- | --- | --- | --- |
{row("ours: decontaminate stage", r["ours"])}
{row("datatrove NGramsDecontIndexer hashes + NGramsDecontFilter", r["datatrove"])}

Per-core throughput, ours / datatrove: **{r["per_core_speedup"]:.1f}x**. Flagged: ours {r["flagged"]["ours"]},
datatrove {r["flagged"]["datatrove"]} (planted {r["flagged"]["planted"]}); same documents:
{r["same_flagged_documents"]}; same first n-gram and benchmark for each: {r["same_first_ngram_and_benchmark"]};
JSON: `benchmarks/results/decontaminate.json`. Where the time goes: datatrove tokenizes every document with
spaCy's English tokenizer and hashes each 13-gram string in Python; ours normalises with str/regex passes
and hashes every window of a batch in one compiled pass, probing a sorted index with numpy."""
    replace_block(RESULTS, "bench_decontaminate", section)


if __name__ == "__main__":
    sys.exit(main())
