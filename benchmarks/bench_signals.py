"""Quality signals: MB/s per core of ours against datatrove's filters and a pure-Python reference,
on the same real text in the same run.

Text: the Python 3.11 documentation sources (Debian ``python3.11-doc``, reStructuredText prose) when
installed, else the standard library's docstrings. Every figure is one process on one core; MB/s are
computed from the process's CPU time (``time.process_time``), which other engineers' load on the
shared machine disturbs less than wall time (wall time is printed beside it).

Contenders:
- ``ours: signals + rules``: every signal of ``core.signals`` (the structure signals included) plus the
  gopher, c4, fineweb and structure presets.
- ``ours: whole preprocess pass``: the stage's per-shard work: read a zstd Parquet shard, signals,
  rules, write the attrs Parquet file.
- ``pure Python reference``: ``core.signals.reference_signals`` (the same definitions, plain Python).
- ``pyarrow.compute``: the vectorised regex approach (char-class fractions, word and line counts:
  7 of our 45 signals), the fastest peer figure of the design notes.
- ``datatrove``: ``GopherQualityFilter`` + ``GopherRepetitionFilter`` + ``FineWebQualityFilter`` +
  ``C4QualityFilter`` on each document (its defaults; spaCy word tokenizer), run in the oracle venv
  (``scripts/setup_oracles.sh``).

usage: .venv/bin/python benchmarks/bench_signals.py [--peer-mb 1.5] [--repeat 2] [--no-write]
       .venv/bin/python benchmarks/bench_signals.py --stage-mb 400 [--runs 5] [--baseline-tree DIR] [--preset P]

``--stage-mb``: the stage level instead. The first N MB of the scale corpus (``scale_corpus.py``: Debian
documentation and sources) as zstd Parquet files of ~32 MB of text; ``curation preprocess FILE... --workers
1`` in a fresh process per run (process start, imports and the compiled kernels' loading included), CPU
seconds (user + system, ``wait4``), MB/s = text MB / CPU s, ``--runs`` runs, median and spread, every run
in ``benchmarks/results/preprocess_stage_<MB>.json``. ``--baseline-tree``: a checkout of other code (e.g.
``git archive`` of main) run alternately with this one, on the same files. Each run is followed by the same
command on 200 rows (the process's fixed cost), so the rate past it (the per-MB term) is reported too, and
the two trees' CPU-s ratio per round (back to back, under the same load). Each round also runs one process per
tree that preprocesses the same files twice (``Preprocessor.run_file`` per file, as a unit does; numpy's huge pages
off, as in a stage): its second pass is a long-lived worker's rate, the scratch, Arrow's buffers and the kernels
already in place (``warm_pass_cpu_s``: both passes' CPU s, ``getrusage``). ``--preset``: every one of these
processes runs that preset (``preprocess_stage_<MB>_<preset>.json``), e.g. the reference-compatible ones.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

import pyarrow as pa
import pyarrow.compute as pc

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from results import RESULTS, replace_block  # noqa: E402  (benchmarks/ is this script's folder)

from airflow_curation.core.filters import apply_rules, resolve_rules
from airflow_curation.core.shards import write_parquet
from airflow_curation.core.signals import SignalComputer, reference_signals, warm_up
from airflow_curation.stages.preprocess.stage import Preprocessor

DOCS = "/usr/share/doc/python3.11/html/_sources"
ORACLE_PY = os.path.join(REPO, ".venv-oracles", "bin", "python")
PRESET = "gopher,c4,fineweb,structure"

DATATROVE = r"""
import json, sys, time
from datatrove.data import Document
from datatrove.pipeline.filters import (C4QualityFilter, FineWebQualityFilter, GopherQualityFilter,
                                        GopherRepetitionFilter)
texts = json.load(open(sys.argv[1]))
filters = [GopherQualityFilter(), GopherRepetitionFilter(), FineWebQualityFilter(), C4QualityFilter()]
for f in filters:  # load the spaCy tokenizer outside the timing
    f.filter(Document(text="warm up. " * 20, id="w"))
t0, w0 = time.process_time(), time.perf_counter()
kept = 0
for i, t in enumerate(texts):
    ok = True
    for f in filters:
        r = f.filter(Document(text=t, id=str(i)))
        ok = ok and (r if isinstance(r, bool) else r[0])
    kept += ok
print(json.dumps({"cpu": time.process_time() - t0, "wall": time.perf_counter() - w0, "kept": kept}))
"""


def load_corpus() -> tuple[list[str], str]:
    files = sorted(glob.glob(os.path.join(DOCS, "**", "*.txt"), recursive=True))
    if files:
        texts = []
        for f in files:
            with open(f, encoding="utf-8", errors="replace") as fh:
                texts.append(fh.read())
        return texts, f"python3.11-doc reST sources ({len(files)} files)"
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from preprocess import corpus  # type: ignore

    texts = corpus.prose_docs(limit=100000)
    return texts, f"standard-library docstrings ({len(texts)} documents)"


def mb(texts: list[str]) -> float:
    return sum(len(t.encode("utf-8")) for t in texts) / 1e6


def subset(texts: list[str], target_mb: float) -> list[str]:
    """Every k-th document until ``target_mb``: the same mix of lengths as the whole corpus."""
    step = max(1, int(mb(texts) / target_mb))
    out, size = [], 0.0
    for t in texts[::step]:
        out.append(t)
        size += len(t.encode("utf-8")) / 1e6
        if size >= target_mb:
            break
    return out


def timed(fn, min_cpu: float = 0.0) -> tuple[float, float]:
    """(CPU s, wall s) of one call; with ``min_cpu``, repeated until that much CPU time and averaged."""
    t0, w0, n = time.process_time(), time.perf_counter(), 0
    while True:
        fn()
        n += 1
        if time.process_time() - t0 >= min_cpu:
            return (time.process_time() - t0) / n, (time.perf_counter() - w0) / n


def ours_signals(texts: list[str]) -> tuple[float, float]:
    arr = pa.array(texts, type=pa.large_string())
    computer, rules = SignalComputer(), resolve_rules(PRESET)
    return timed(lambda: apply_rules(computer.compute(arr), rules), min_cpu=2.0)


def pyarrow_peer(texts: list[str]) -> tuple[float, float]:
    """The vectorised-but-regex approach of the design notes' probe: 7 of our 45 signals."""
    arr = pa.array(texts, type=pa.large_string())

    def run():
        n = pc.utf8_length(arr)
        for pattern in (r"[^\p{L}]", r"[^\p{L}\p{N}]", r"[^\p{Nd}]", r"\S"):
            pc.divide(pc.cast(pc.utf8_length(pc.replace_substring_regex(arr, pattern, "")), pa.float64()), n)
        words = pc.utf8_split_whitespace(arr)
        pc.list_value_length(words)
        lines = pc.split_pattern(arr, "\n")
        pc.list_value_length(lines)
        pc.utf8_length(pc.list_flatten(lines))

    return timed(run, min_cpu=2.0)


def ours_whole_pass(texts: list[str], tmp: str) -> tuple[float, float]:
    shard = os.path.join(tmp, "shard.parquet")
    table = pa.table(
        {
            "id": [f"d{i}" for i in range(len(texts))],
            "text": texts,
            "source": ["bench"] * len(texts),
            "meta": [None] * len(texts),
        }
    )
    write_parquet(shard, table, row_group_rows=512)
    pre = Preprocessor(preset=PRESET)
    run = lambda: pre.run_file(shard, os.path.join(tmp, "attrs.parquet"), batch_rows=512)  # noqa: E731
    # A worker runs shard after shard: the first pass's one-off costs (Arrow's memory pool growing, ~2,500
    # page faults) stay out of the figure, as the signals row's first call does. Then averaged over
    # repeats like the other rows: one pass alone swings 15% on a shared machine.
    run()
    return timed(run, min_cpu=3.0)


def datatrove(texts: list[str], tmp: str) -> tuple[float, float] | None:
    if not os.path.exists(ORACLE_PY):
        subprocess.run(["bash", os.path.join(REPO, "scripts", "setup_oracles.sh")], check=True)
    path = os.path.join(tmp, "peer.json")
    with open(path, "w") as f:
        json.dump(texts, f)
    proc = subprocess.run([ORACLE_PY, "-c", DATATROVE, path], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(proc.stderr[-2000:], file=sys.stderr)
        return None
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    return r["cpu"], r["wall"]


WARM_CHILD = r"""
import json, os, resource, sys, tempfile
from airflow_curation.core.allocator import use_small_pages
use_small_pages()
from airflow_curation.stages.preprocess.stage import Preprocessor
pre = Preprocessor(**({"preset": sys.argv[1]} if sys.argv[1] else {}))
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
passes = []
with tempfile.TemporaryDirectory() as out:
    for p in range(2):
        t = cpu()
        for k, f in enumerate(sys.argv[2:]):
            pre.run_file(f, os.path.join(out, f"{p}-{k}.parquet"))
        passes.append(cpu() - t)
print(json.dumps(passes))
"""


def stage_level(
    mb_target: float, runs: int, corpus_dir: str, baseline: str | None, cpu: int, preset: str | None = None
) -> None:
    from pathlib import Path

    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    from bench_ingest import CURATION, _measure
    from scale_corpus import parquet_inputs

    # -P: ``-c`` would put the working directory first on sys.path, and a run started from one checkout
    # would import that checkout's code whatever PYTHONPATH names (both "trees" measured the same code)
    CURATION = [CURATION[0], "-P", *CURATION[1:]]

    files, text_mb = parquet_inputs(Path(corpus_dir), mb_target, Path(corpus_dir) / f"parquet-{mb_target:g}")
    tiny = Path(corpus_dir) / "tiny-200.parquet"  # a fresh process's fixed cost: 200 rows
    if not tiny.exists():
        import pyarrow.parquet as pq

        pq.write_table(pq.read_table(files[0]).slice(0, 200), tiny)
    trees = {"ours": REPO, **({"baseline": os.path.abspath(baseline)} if baseline else {})}
    os.sched_setaffinity(0, {cpu})  # the children inherit one CPU: per-core figures
    record = {"mb": text_mb, "files": len(files), "trees": trees, "runs": [], "load_before": os.getloadavg()}
    record["preset"] = preset or "the default"
    with_preset = ["--preset", preset] if preset else []
    print(f"preprocess stage level: {text_mb:.1f} MB in {len(files)} files, {runs} runs per tree")
    for tree in trees.values():  # warm: numba's on-disk cache of each tree's kernels
        with tempfile.TemporaryDirectory() as out:
            _measure(
                [*CURATION, "preprocess", str(files[0]), "--output", out, "--workers", "1", "--mapper", "local"]
                + with_preset,
                _env(tree),
            )
    for r in range(runs):
        for who in list(trees) if r % 2 == 0 else list(trees)[::-1]:
            with tempfile.TemporaryDirectory() as out:
                cmd = [
                    *CURATION,
                    "preprocess",
                    *map(str, files),
                    "--output",
                    out,
                    "--workers",
                    "1",
                    "--mapper",
                    "local",
                    *with_preset,
                ]
                wall, cpu, rss, _ = _measure(cmd, _env(trees[who]))
                digest = _outputs_sha256(out, len(files))
                fixed = [*CURATION, "preprocess", str(tiny), "--output", os.path.join(out, "tiny"), "--workers", "1"]
                fixed += with_preset
                _, fixed_cpu, _, _ = _measure([*fixed, "--mapper", "local"], _env(trees[who]))
            run = {"round": r, "who": who, "wall_s": wall, "cpu_s": cpu, "peak_rss": rss, "mb_per_cpu_s": text_mb / cpu}
            run["fixed_cpu_s"] = fixed_cpu  # the same process on 200 rows
            run["marginal_mb_per_cpu_s"] = text_mb / (cpu - fixed_cpu)
            run["load"] = os.getloadavg()[0]
            run["outputs_sha256"] = digest
            warm = [CURATION[0], "-P", "-c", WARM_CHILD, preset or "", *map(str, files)]
            _, _, _, out = _measure(warm, _env(trees[who]))
            run["warm_pass_cpu_s"] = json.loads(out.strip().splitlines()[-1])
            run["warm_mb_per_cpu_s"] = text_mb / run["warm_pass_cpu_s"][1]
            record["runs"].append(run)
            print(json.dumps(run), flush=True)
    record["load_after"] = os.getloadavg()
    record["summary"] = {}
    for who in trees:
        mine = [x for x in record["runs"] if x["who"] == who]
        summary = {}
        for key in ("mb_per_cpu_s", "marginal_mb_per_cpu_s", "cpu_s", "fixed_cpu_s", "warm_mb_per_cpu_s"):
            v = sorted(x[key] for x in mine)
            summary[key] = {"median": v[len(v) // 2], "min": v[0], "max": v[-1]}
        summary["cpu_s_per_mb"] = {k: text_mb and v / text_mb for k, v in summary["cpu_s"].items()}
        record["summary"][who] = summary
        print(
            f"{who}: whole process median {summary['mb_per_cpu_s']['median']:.1f} MB/s per core "
            f"({summary['mb_per_cpu_s']['min']:.1f}-{summary['mb_per_cpu_s']['max']:.1f}); fixed cost "
            f"{summary['fixed_cpu_s']['median']:.2f} CPU s; past it {summary['marginal_mb_per_cpu_s']['median']:.1f} MB/s; "
            f"a worker's second pass {summary['warm_mb_per_cpu_s']['median']:.1f} MB/s "
            f"({summary['warm_mb_per_cpu_s']['min']:.1f}-{summary['warm_mb_per_cpu_s']['max']:.1f})"
        )
    if baseline:  # CPU-s ratio per round: the two ran back to back, under the same load
        pairs = [[x["cpu_s"] for x in record["runs"] if x["round"] == r] for r in range(runs)]
        order = [[x["who"] for x in record["runs"] if x["round"] == r] for r in range(runs)]
        ratios = sorted(c[o.index("baseline")] / c[o.index("ours")] for c, o in zip(pairs, order))
        record["summary"]["baseline_over_ours_cpu"] = {"median": ratios[len(ratios) // 2], "per_round": ratios}
        print(f"baseline / ours CPU s: median {ratios[len(ratios) // 2]:.3f} ({ratios[0]:.3f}-{ratios[-1]:.3f})")
    digests = {x["outputs_sha256"] for x in record["runs"]}
    record["summary"]["outputs_identical"] = len(digests) == 1  # every run of every tree: the same tables
    print(f"outputs: {'identical' if len(digests) == 1 else 'DIFFERENT'} in every run ({sorted(digests)})")
    print(f"load {record['load_before'][0]:.1f} -> {record['load_after'][0]:.1f}")
    slug = f"_{preset.replace(',', '_')}" if preset else ""
    out = Path(REPO) / "benchmarks" / "results" / f"preprocess_stage_{mb_target:g}{slug}.json"
    out.write_text(json.dumps(record, indent=1) + "\n")


def _outputs_sha256(out: str, n_files: int) -> str:
    """SHA-256 of the output tables (every column's values, in file and row order; Arrow IPC bytes), so that
    trees are compared on what they wrote, not on Parquet's file metadata."""
    import hashlib

    import pyarrow.parquet as pq

    paths = sorted(glob.glob(os.path.join(out, "*.parquet")))
    if len(paths) != n_files:
        raise RuntimeError(f"{out}: {len(paths)} output files for {n_files} inputs")
    h = hashlib.sha256()
    for path in paths:
        table = pq.read_table(path).combine_chunks()
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        h.update(os.path.basename(path).encode() + b"\0" + sink.getvalue().to_pybytes())
    return h.hexdigest()


def _env(tree: str) -> dict:
    """The children import ``tree``'s code with their bytecode cached, as an installed package has it (pip writes
    it at install): where ``PYTHONDONTWRITEBYTECODE`` is set (this sandbox sets it), every fresh process compiled
    the package's ~60 modules from source, ~0.13 CPU s of a stage's fixed cost that no user's worker pays. The
    warm-up run writes each tree's ``__pycache__``."""
    env = {**os.environ, "PYTHONPATH": tree}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stage-mb", type=float, default=0, help="stage level on this many MB of the scale corpus")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--baseline-tree", default=None)
    ap.add_argument("--cpu", type=int, default=0, help="--stage-mb: the CPU the runs are pinned to")
    ap.add_argument("--preset", default=None, help="--stage-mb: the preset the stage runs (default: its default)")
    ap.add_argument("--corpus-dir", default=os.path.join(REPO, "benchmarks", "data", "scale"))
    ap.add_argument("--peer-mb", type=float, default=1.5, help="MB of text the slow peers get (default 1.5)")
    ap.add_argument("--repeat", type=int, default=2, help="the corpus repeated this many times for ours")
    ap.add_argument("--no-write", action="store_true", help="do not update benchmarks/RESULTS.md")
    args = ap.parse_args()
    if args.stage_mb:
        stage_level(args.stage_mb, args.runs, args.corpus_dir, args.baseline_tree, args.cpu, args.preset)
        return 0

    load_at_start = os.getloadavg()[0]
    texts, what = load_corpus()
    full = texts * args.repeat
    small = subset(texts, args.peer_mb)
    warm_up()
    ours_signals(small[:20])  # first call pays for nothing but is kept out of the figures anyway
    rows = []

    def add(name: str, data: list[str], result: tuple[float, float] | None) -> None:
        if result is None:
            rows.append((name, mb(data), None, None, None))
            return
        cpu, wall = result
        rows.append((name, mb(data), cpu, wall, mb(data) / cpu if cpu else float("inf")))

    with tempfile.TemporaryDirectory() as tmp:
        add("ours: signals + rules", full, ours_signals(full))
        add("ours: whole preprocess pass (Parquet in/out)", full, ours_whole_pass(full, tmp))
        add("pyarrow.compute: char-class regexes, word and line counts (7 signals)", full, pyarrow_peer(full))
        add("ours: signals + rules (peer subset)", small, ours_signals(small))
        add("pure Python reference (peer subset)", small, timed(lambda: reference_signals(small)))
        add("datatrove Gopher+Repetition+FineWeb+C4 (peer subset)", small, datatrove(small, tmp))

    ours_small = rows[3][4]
    lines = [
        "| contender | text MB | CPU s | wall s | MB/s per core (CPU) | ours is x faster |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, size, cpu, wall, rate in rows:
        if rate is None:
            lines.append(f"| {name} | {size:.1f} | failed | | | |")
            continue
        base = ours_small if "subset" in name else rows[0][4]  # same data: subset vs subset, full vs full
        ratio = f"{base / rate:.1f}" if not name.startswith("ours") or "subset" in name else ""
        lines.append(f"| {name} | {size:.1f} | {cpu:.2f} | {wall:.2f} | {rate:.1f} | {ratio} |")
    table = "\n".join(lines)
    print(f"text: {what}; full = {mb(full):.1f} MB, peer subset = {mb(small):.1f} MB")
    print(table)
    if not args.no_write:
        load = f"{load_at_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
        write_results(table, what, mb(full), mb(small), args, load)
    return 0


def write_results(table: str, what: str, full_mb: float, small_mb: float, args: argparse.Namespace, load: str) -> None:
    cmd = f".venv/bin/python benchmarks/bench_signals.py --peer-mb {args.peer_mb} --repeat {args.repeat}"
    section = f"""## Quality signals: MB/s per core against datatrove and pure Python (`benchmarks/bench_signals.py`)

Command: `{cmd}` (run {time.strftime("%Y-%m-%d %H:%M", time.gmtime())} UTC).
Text: {what}; ours over {full_mb:.1f} MB, every contender over the same {small_mb:.1f} MB subset (every
k-th document) in the same run. One process, one core each; MB/s from CPU time. "ours is x faster"
compares each row with ours on the same data (the subset rows with ours on the subset, the
pyarrow.compute row with ours on the full text). datatrove runs its Gopher quality, Gopher repetition,
FineWeb and C4 filters with their defaults (spaCy word tokens); ours computes all 45 signals (the 7
structure signals included) and the gopher, c4, fineweb and structure rules. **Machine: 2 cores, shared
with other work (1-minute load average {load}), so absolute figures are noisy; the ratios in one run
are the comparison.**

{table}
"""
    # The notes on what changed and what was tried are kept by hand in their own block after this one.
    replace_block(RESULTS, "bench_signals", section)


if __name__ == "__main__":
    sys.exit(main())
