"""Near dedup quality and speed against datasketch's MinHashLSH, and scaling from 1x to 10x data.

    .venv/bin/python benchmarks/bench_near_dedup.py [--scales 1,2,5,10] [--unit-mb 4]

1. Quality, on the handbook near-duplicate corpus of ``tests/dedup`` (26 locales of 10 pages plus
   mutated English copies) against all-pairs exact Jaccard computed with plain Python:
   - candidate pairs (LSH buckets, 128 permutations, threshold 0.8, the same 9 bands x 13 rows on both
     sides), averaged over 3 seeds;
   - documents flagged duplicate (a document is truly one when an earlier document reaches Jaccard
     0.8): ours = the dedup stage end to end; datasketch = query-then-insert in document order.
   Wall time: the dedup stage end to end (Parquet in, attrs out) vs datasketch MinHash + LSH.
2. Scaling: the dedup stage (one worker, in a fresh process per size, timed after its imports) on
   1x..10x of real text (Debian handbook + Python docs pages); wall and CPU time (the CPU time is what
   a shared, loaded machine does not distort), their ratio to 1x, and peak RSS of the worker process.

3. End to end (``--e2e-mb``): the first N MB of the scale corpus (``scale_corpus.py``: Debian
   documentation and sources, code and docs of this machine) as zstd Parquet files of ~32 MB of text;
   ours = ``curation dedup FILE... --no-exact --workers 1`` in a fresh process, datasketch = a fresh
   process reading the same files, MinHash (128 permutations, word 5-grams of NFKC + lowercase text) and
   MinHashLSH at threshold 0.8, query then insert. Process start and imports are included on both sides;
   CPU seconds (user + system, ``wait4``) of each child; the two alternate, ``--e2e-runs`` rounds; median
   and spread; every run is kept in ``benchmarks/results/near_dedup_e2e_<MB>.json``.

The process is pinned to one CPU (its children inherit it): figures are per core.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

THRESHOLD = 0.8
REPEAT = 3


def _scores(pred: set, truth: set) -> tuple[float, float, float]:
    tp = len(pred & truth)
    p, r = tp / max(1, len(pred)), tp / max(1, len(truth))
    return p, r, 2 * p * r / max(1e-12, p + r)


def run_stage(files: list[str], work: str, **config) -> tuple[float, dict[str, list[dict]]]:
    from airflow_curation.core.layout import Lake
    from airflow_curation.stages.base import StageRunner
    from airflow_curation.stages.dedup.stage import DedupStage

    t = time.perf_counter()
    stage = DedupStage(
        Lake(os.path.join(work, "lake"), "bench"),
        {"inputs": files, "output_dir": os.path.join(work, "out"), **config},
        "bench",
    )
    StageRunner(stage).run()
    seconds = time.perf_counter() - t
    out = {f: pq.read_table(os.path.join(work, "out", os.path.basename(f))).to_pylist() for f in files}
    return seconds, out


def quality() -> None:
    from datasketch import MinHash, MinHashLSH

    from airflow_curation.core.lsh import bucket_pairs
    from airflow_curation.core.minhash import MinHasher, MinHashParams, band_hashes, lsh_params
    from tests.dedup.corpus import exact_jaccard_matrix, near_duplicate_corpus, shingle_set

    docs = near_duplicate_corpus()
    ids, texts = [i for i, _ in docs], [t for _, t in docs]
    mb = sum(len(t.encode()) for t in texts) / 1e6
    jac = exact_jaccard_matrix(texts)
    i, j = np.nonzero(np.triu(jac >= THRESHOLD))
    truth_pairs = set(zip(i.tolist(), j.tolist()))
    bands, rows = lsh_params(THRESHOLD, 128)
    print(f"quality corpus: {len(texts)} documents, {mb:.1f} MB, {len(truth_pairs)} pairs with Jaccard >= {THRESHOLD}")

    ours, theirs = [], []
    for seed in (1, 2, 3, 4, 5):
        sig, _ = MinHasher(MinHashParams(seed=seed)).signatures(texts)
        ours.append(_scores(bucket_pairs(band_hashes(sig, bands, rows)), truth_pairs))
        lsh = MinHashLSH(threshold=THRESHOLD, num_perm=128)
        sketches = []
        for k, t in enumerate(texts):
            m = MinHash(num_perm=128, seed=seed)
            m.update_batch([" ".join(s).encode() for s in shingle_set(t)])
            lsh.insert(k, m)
            sketches.append(m)
        pred = {(min(k, o), max(k, o)) for k, m in enumerate(sketches) for o in lsh.query(m) if o != k}
        theirs.append(_scores(pred, truth_pairs))
    p, r, f = np.mean(ours, axis=0)
    dp, dr, df = np.mean(theirs, axis=0)
    v = jac[np.triu_indices(len(texts), 1)]
    hit = 1 - (1 - v**rows) ** bands
    exp_r = hit[v >= THRESHOLD].sum() / (v >= THRESHOLD).sum()
    exp_p = hit[v >= THRESHOLD].sum() / hit.sum()
    print("\ncandidate pairs (mean of seeds 1-5, 9 bands x 13 rows on both sides)")
    print("| system | precision | recall | F1 |\n| --- | ---: | ---: | ---: |")
    print(f"| ours (LSH buckets) | {p:.3f} | {r:.3f} | {f:.3f} |")
    print(f"| datasketch MinHashLSH | {dp:.3f} | {dr:.3f} | {df:.3f} |")
    print(f"| S-curve expectation | {exp_p:.3f} | {exp_r:.3f} | {2 * exp_p * exp_r / (exp_p + exp_r):.3f} |")
    print(
        f"seed-to-seed spread (sd of F1): ours {np.std([x[2] for x in ours]):.3f}, "
        f"datasketch {np.std([x[2] for x in theirs]):.3f}"
    )

    # Document level, in document order: a document is a duplicate when an earlier one is similar.
    # The quality part above left millions of small objects (shingle sets, the Jaccard matrix): freeze
    # them so that the cyclic GC does not walk them during either contender's timed runs.
    gc.collect()
    gc.freeze()
    truth_dup = {int(y) for x, y in truth_pairs}
    with tempfile.TemporaryDirectory() as work:
        files = []
        f = os.path.join(work, "corpus.parquet")
        pq.write_table(pa.table({"id": ids, "text": texts}), f, row_group_size=64)
        files.append(f)
        ours_rows = {}
        timings = {}
        run_stage(files, os.path.join(work, "warm"), exact=False)  # compiled kernels loaded once
        for verify in (False, True):
            best = (float("inf"), float("inf"))
            for k in range(REPEAT):
                c = time.process_time()
                seconds, out = run_stage(files, os.path.join(work, f"v{verify}-{k}"), verify=verify, exact=False)
                best = min(best, (time.process_time() - c, seconds))
            timings[verify] = best
            ours_rows[verify] = {k for k, row in enumerate(out[f]) if row["is_duplicate"]}
    ds_best = (float("inf"), float("inf"))
    for _ in range(REPEAT):
        c, t = time.process_time(), time.perf_counter()
        lsh = MinHashLSH(threshold=THRESHOLD, num_perm=128)
        ds_dup = set()
        for k, text in enumerate(texts):
            m = MinHash(num_perm=128)
            m.update_batch([" ".join(s).encode() for s in shingle_set(text)])
            if lsh.query(m):
                ds_dup.add(k)
            lsh.insert(k, m)
        ds_best = min(ds_best, (time.process_time() - c, time.perf_counter() - t))
    print(
        f"\ndocuments flagged duplicate (one seed), end to end on one core, best of {REPEAT}: CPU seconds "
        "of the process (the comparison; wall is inflated by the other jobs on this machine) and wall"
    )
    print(
        "| system | precision | recall | F1 | CPU s | wall s | ours faster by (CPU) |\n"
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    )
    for name, flagged, (cpu, wall) in (
        ("ours: dedup stage", ours_rows[False], timings[False]),
        ("ours: dedup stage --verify", ours_rows[True], timings[True]),
        ("datasketch MinHash + MinHashLSH", ds_dup, ds_best),
    ):
        pp, rr, ff = _scores(flagged, truth_dup)
        print(f"| {name} | {pp:.3f} | {rr:.3f} | {ff:.3f} | {cpu:.3f} | {wall:.2f} | {ds_best[0] / cpu:.1f}x |")


def scale_worker(mb: float, work: str) -> None:
    """One size, in this (fresh) process: the dedup stage on ``mb`` megabytes; prints JSON."""
    from bench_minhash import corpus

    docs = corpus(mb)
    files = []
    for k in range(4):
        f = os.path.join(work, f"part-{k}.parquet")
        part = docs[k::4]
        pq.write_table(pa.table({"id": [f"{k}-{n}" for n in range(len(part))], "text": part}), f, row_group_size=256)
        files.append(f)
    before = resource.getrusage(resource.RUSAGE_SELF)
    seconds, out = run_stage(files, work)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime - before.ru_utime - before.ru_stime
    dups = sum(r["is_duplicate"] for rows in out.values() for r in rows)
    rss = usage.ru_maxrss * 1024
    print(
        json.dumps(
            {
                "mb": sum(len(d.encode()) for d in docs) / 1e6,
                "docs": len(docs),
                "seconds": seconds,
                "cpu_seconds": cpu,
                "peak_rss": rss,
                "duplicates": dups,
            }
        )
    )


def scaling(scales: list[int], unit_mb: float, cpu: int) -> None:
    print(f"\nscaling: the dedup stage, one worker, unit {unit_mb} MB of real text")
    print(
        "| size | MB | documents | wall s | CPU s | CPU time ratio to 1x | MB per CPU s | peak RSS MiB | duplicates |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    base = None
    for s in scales:
        with tempfile.TemporaryDirectory() as work:
            proc = subprocess.run(
                [sys.executable, __file__, "--scale-worker", str(s * unit_mb), "--work", work, "--cpu", str(cpu)],
                capture_output=True,
                text=True,
                check=True,
            )
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        base = base or r
        print(
            f"| {s}x | {r['mb']:.1f} | {r['docs']} | {r['seconds']:.2f} | {r['cpu_seconds']:.2f} "
            f"| {r['cpu_seconds'] / base['cpu_seconds']:.2f} | {r['mb'] / r['cpu_seconds']:.1f} "
            f"| {r['peak_rss'] / 2**20:.0f} | {r['duplicates']} |"
        )


DATASKETCH = r"""
import sys, pyarrow.parquet as pq
from datasketch import MinHash, MinHashLSH
from tests.dedup.corpus import shingle_set
lsh, flagged, k = MinHashLSH(threshold=float(sys.argv[1]), num_perm=128), 0, 0
for f in sys.argv[2:]:
    for text in pq.read_table(f, columns=["text"]).column(0).to_pylist():
        m = MinHash(num_perm=128)
        m.update_batch([" ".join(s).encode() for s in shingle_set(text or "")])
        flagged += bool(lsh.query(m))
        lsh.insert(k, m)
        k += 1
print(flagged)
"""


def end_to_end(mb: float, runs: int, corpus_dir: Path) -> None:
    """Ours and datasketch in fresh processes on the same Parquet files, alternated."""
    from bench_ingest import CURATION, _measure
    from scale_corpus import parquet_inputs

    files, text_mb = parquet_inputs(corpus_dir, mb, corpus_dir / f"parquet-{mb:g}")
    names = [str(f) for f in files]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    record: dict = {"mb": text_mb, "files": len(files), "threshold": THRESHOLD, "runs": []}
    load_before = os.getloadavg()
    path = ROOT / "benchmarks" / "results" / f"near_dedup_e2e_{mb:g}.json"
    print(f"\nend to end, {text_mb:.1f} MB in {len(files)} files, {runs} alternated rounds")
    with tempfile.TemporaryDirectory() as work:  # warm: numba's on-disk cache of the kernels
        _measure([*CURATION, "dedup", names[0], "--output", work, "--no-exact", "--workers", "1"], env)
    for r in range(runs):
        for who in ("ours", "datasketch") if r % 2 == 0 else ("datasketch", "ours"):
            with tempfile.TemporaryDirectory() as work:
                if who == "ours":
                    cmd = [*CURATION, "dedup", *names, "--output", work, "--no-exact", "--workers", "1"]
                    cmd += ["--threshold", str(THRESHOLD), "--mapper", "local"]
                    wall, cpu, rss, _ = _measure(cmd, env)
                    out = pq.read_table(work, columns=["is_duplicate"]).column(0)
                    flagged = int(pa.compute.sum(out).as_py() or 0)
                else:
                    wall, cpu, rss, stdout = _measure([sys.executable, "-c", DATASKETCH, str(THRESHOLD), *names], env)
                    flagged = int(stdout.split()[-1])
            run = {"round": r, "who": who, "wall_s": wall, "cpu_s": cpu, "peak_rss": rss, "flagged": flagged}
            run["load"] = os.getloadavg()[0]
            record["runs"].append(run)
            print(json.dumps(run), flush=True)
            path.write_text(json.dumps(record, indent=1) + "\n")  # every run kept, should the rest not finish
    record["load_before"], record["load_after"] = load_before, os.getloadavg()
    summary = {}
    for who in ("ours", "datasketch"):
        cpu = sorted(x["cpu_s"] for x in record["runs"] if x["who"] == who)
        summary[who] = {"median_cpu_s": float(np.median(cpu)), "min_cpu_s": cpu[0], "max_cpu_s": cpu[-1]}
    ratios = [
        d["cpu_s"] / o["cpu_s"]
        for o, d in zip(*([x for x in record["runs"] if x["who"] == w] for w in ("ours", "datasketch")))
    ]
    summary["ratio_of_medians"] = summary["datasketch"]["median_cpu_s"] / summary["ours"]["median_cpu_s"]
    summary["ratio_per_round"] = ratios
    record["summary"] = summary
    o, d = summary["ours"], summary["datasketch"]
    print(
        f"ours {o['median_cpu_s']:.2f} CPU s ({o['min_cpu_s']:.2f}-{o['max_cpu_s']:.2f}), datasketch "
        f"{d['median_cpu_s']:.2f} ({d['min_cpu_s']:.2f}-{d['max_cpu_s']:.2f}): {summary['ratio_of_medians']:.1f}x "
        f"(rounds {min(ratios):.1f}-{max(ratios):.1f}x); load {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f}"
    )
    path.write_text(json.dumps(record, indent=1) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scales", default="1,2,5,10")
    ap.add_argument("--unit-mb", type=float, default=4.5)
    ap.add_argument("--cpu", type=int, default=0)
    ap.add_argument("--skip-quality", action="store_true")
    ap.add_argument("--skip-scaling", action="store_true")
    ap.add_argument("--e2e-mb", type=float, default=0, help="end to end vs datasketch on this many MB")
    ap.add_argument("--e2e-runs", type=int, default=5)
    ap.add_argument("--corpus-dir", default=str(ROOT / "benchmarks" / "data" / "scale"))
    ap.add_argument("--scale-worker", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.sched_setaffinity(0, {args.cpu})
    if args.scale_worker:
        scale_worker(args.scale_worker, args.work)
        return
    print(f"pinned to CPU {args.cpu}; load average {os.getloadavg()[0]:.1f} (other engineers share this machine)")
    if args.e2e_mb:
        end_to_end(args.e2e_mb, args.e2e_runs, Path(args.corpus_dir))
        return
    if not args.skip_quality:
        quality()
    if not args.skip_scaling:
        scaling([int(x) for x in args.scales.split(",")], args.unit_mb, args.cpu)


if __name__ == "__main__":
    main()
