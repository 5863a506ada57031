"""Connected components on near-duplicate-shaped graphs: two code trees side by side (A/B alternated).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_components.py --a <tree> --b <tree> --rounds 3 \\
        --json benchmarks/results/components_ab.json

A synthetic graph (``--graphs``) is many small clusters (sizes drawn from a Zipf law, each a random tree: what
LSH buckets of near copies give) and one giant component shaped as near copies drifting (each node a near copy
of one of the 50 before it), over node keys of many shards; ``--lake-edges DIR:WRITTEN`` adds a dedup run's own
edge files (``dedup/<run key>/edges``, written in WRITTEN partitions). Each contender runs
``connected_components`` on the same edge files in fresh processes pinned to one core (``--cpu``), rotated in
turn: A, B with the memory budget that gives ``--partitions`` for the first step (B shrinks its steps' partitions
with the live edges; A has no such rule), and B at ``--partitions`` throughout (``B fixed``: finished stars
dropped, nothing else). Recorded: CPU seconds, rounds, the (file, step) reads and the directed edges every
step wrote (what the steps carry), and a digest of the labels (the same for every contender, or the run fails).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CHILD = r"""
import inspect, json, logging, re, sys, time, resource
import numpy as np
from airflow_curation.core import components
from airflow_curation.core.lsh import read_partition
uris, work, parts, budget = sys.argv[1].split(","), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
written = int(sys.argv[5])
steps = []
class H(logging.Handler):
    def emit(self, r):
        m = re.search(r"(\d+) directed edges", r.getMessage())
        if m:
            steps.append(int(m.group(1)))
logging.getLogger(components.__name__).addHandler(H())
logging.getLogger(components.__name__).setLevel(logging.INFO)
kw = {"memory_budget": budget} if budget and "memory_budget" in inspect.signature(components.connected_components).parameters else {}
t = time.process_time()
got = components.connected_components(uris, work, parts, 16, input_partitions=written, **kw)
cpu = time.process_time() - t
labels = got[0]
h = np.uint64(0)
n = 0
for q in range(16):
    r = read_partition(labels, q, {"node": np.uint64, "label": np.uint64})
    with np.errstate(over="ignore"):
        h += (r["node"] * np.uint64(0x9E3779B97F4A7C15) ^ r["label"]).sum(dtype=np.uint64)
    n += r["node"].size
print(json.dumps({"cpu_s": cpu, "rounds": got[1], "reads": got[2] if len(got) > 2 else None,
                  "step_edges": steps, "labelled": n, "digest": int(h),
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def graph(clusters_nodes: int, giant: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    sizes = []
    left = clusters_nodes
    while left > 1:
        s = int(min(left, 1000, rng.zipf(1.8) + 1))
        sizes.append(s)
        left -= s
    n = sum(sizes) + giant
    keys = (rng.integers(0, 50_000, n).astype(np.uint64) << np.uint64(32)) | rng.permutation(n).astype(np.uint64)
    a, b, at = [], [], 0
    for s in sizes:  # a random tree over each cluster
        a.append(keys[at + np.arange(1, s)])
        b.append(keys[at + parents("tree", s, rng)])
        at += s
    if giant > 1:  # the giant: a drifting chain
        a.append(keys[at + np.arange(1, giant)])
        b.append(keys[at + parents("drift", giant, rng)])
    return np.concatenate(a), np.concatenate(b)


def parents(kind: str, n: int, rng) -> np.ndarray:
    """The node each of nodes 1..n-1 links to: the one before (a path), any earlier one (a random tree: each a
    near copy of any earlier), or one of the 50 before it (a drifting chain of near copies)."""
    i = np.arange(1, n)
    if kind == "path":
        return i - 1
    if kind == "tree":
        return (rng.random(n - 1) * i).astype(np.int64)
    return i - 1 - (rng.random(n - 1) * np.minimum(i, 50)).astype(np.int64)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", help="code tree A (e.g. a git archive of main)")
    ap.add_argument("--b", help="code tree B")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cpu", type=int, default=1)
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--graphs", default="2000000:0,2000000:250000,0:1000000", help="cluster nodes:giant nodes, ...")
    ap.add_argument("--lake-edges", default="", help="a dedup run's edges folder and its written partitions, DIR:N")
    ap.add_argument("--json", default="benchmarks/results/components_ab.json")
    ap.add_argument("--report", action="store_true", help="print the table of --json and exit")
    ap.add_argument("--growth", action="store_true", help="rounds against component size and shape, then exit")
    args = ap.parse_args()
    if args.report:
        report(json.loads(Path(args.json).read_text()))
        return
    if args.growth:
        growth(args)
        return
    out = {"command": " ".join(sys.argv), "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "runs": []}
    contenders = (("A", args.a, True), ("B", args.b, True), ("B fixed", args.b, False))
    with tempfile.TemporaryDirectory() as tmp:
        inputs = []  # (name, edge files, written partitions, directed edges)
        sys.path.insert(0, args.b)
        from airflow_curation.core.components import write_edges

        for spec in filter(None, args.graphs.split(",")):
            nodes, giant = (int(x) for x in spec.split(":"))
            a, b = graph(nodes, giant, seed=nodes + giant)
            uri = os.path.join(tmp, f"edges-{nodes}-{giant}.parquet")
            write_edges(uri, a, b, args.partitions)
            inputs.append((spec, [uri], args.partitions, 2 * int(a.size)))
        if args.lake_edges:
            folder, written = args.lake_edges.rsplit(":", 1)
            uris = sorted(str(p) for p in Path(folder).glob("unit-*"))
            from airflow_curation.core.lsh import read_partitions

            edges = sum(r["src"].size for _, r in read_partitions(uris, 0, int(written), {"src": np.uint64}))
            inputs.append((f"lake {Path(folder).parent.name}", uris, int(written), int(edges)))
        for spec, uris, written, edges in inputs:
            budget = int(edges * 16 * 4 / args.partitions) + 1  # partitions_for gives --partitions
            for r in range(args.rounds):
                turn = contenders[r % 3 :] + contenders[: r % 3]
                for name, tree, with_budget in turn:
                    work = tempfile.mkdtemp(dir=tmp)
                    cmd = ["taskset", "-c", str(args.cpu), sys.executable, "-P", "-c", CHILD, ",".join(uris), work]
                    cmd += [str(args.partitions), str(budget if with_budget else 0), str(written)]
                    load = os.getloadavg()
                    res = subprocess.run(cmd, env={**os.environ, "PYTHONPATH": tree}, capture_output=True, text=True)
                    if res.returncode:
                        sys.exit(res.stderr)
                    run = json.loads(res.stdout.strip().splitlines()[-1])
                    run.update(tree=name, graph=spec, edges=edges, round=r, load=load)
                    out["runs"].append(run)
                    print(name, spec, {k: run[k] for k in ("cpu_s", "rounds", "reads", "labelled")}, flush=True)
                    shutil.rmtree(work, ignore_errors=True)
            digests = {run["digest"] for run in out["runs"] if run["graph"] == spec}
            if len(digests) != 1:
                sys.exit(f"labels differ between the contenders on {spec}")
    Path(args.json).write_text(json.dumps(out, indent=1))
    report(out)


def shaped(kind: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """One component of ``n`` nodes shaped as :func:`parents` says, over random node keys."""
    rng = np.random.default_rng(seed)
    keys = rng.choice(2**40, size=n, replace=False).astype(np.uint64) + np.uint64(1)
    return keys[1:], keys[parents(kind, n, rng)]


def growth(args) -> None:
    """Rounds one component takes by its size and shape, each tree at ``--partitions`` throughout (no budget)."""
    out = {"command": " ".join(sys.argv), "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "runs": []}
    sys.path.insert(0, args.b)
    from airflow_curation.core.components import write_edges

    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("path", "tree", "drift"):
            for n in (10**3, 10**4, 10**5, 10**6):
                a, b = shaped(kind, n, seed=n)
                uri = os.path.join(tmp, f"{kind}-{n}.parquet")
                write_edges(uri, a, b, args.partitions)
                for name, tree in (("A", args.a), ("B fixed", args.b)):
                    work = tempfile.mkdtemp(dir=tmp)
                    cmd = ["taskset", "-c", str(args.cpu), sys.executable, "-P", "-c", CHILD, uri, work]
                    cmd += [str(args.partitions), "0", str(args.partitions)]
                    res = subprocess.run(cmd, env={**os.environ, "PYTHONPATH": tree}, capture_output=True, text=True)
                    if res.returncode:
                        sys.exit(res.stderr)
                    run = json.loads(res.stdout.strip().splitlines()[-1])
                    run.update(tree=name, shape=kind, nodes=n, load=os.getloadavg())
                    out["runs"].append(run)
                    print(name, kind, n, run["rounds"], f"{run['cpu_s']:.2f}", flush=True)
                    shutil.rmtree(work, ignore_errors=True)
    Path(args.json).write_text(json.dumps(out, indent=1))


def report(out: dict) -> None:
    if out["runs"] and "shape" in out["runs"][0]:  # --growth
        print("| shape | nodes | A: rounds, CPU s | B fixed: rounds, CPU s |")
        print("| --- | ---: | --- | --- |")
        for kind in dict.fromkeys(r["shape"] for r in out["runs"]):
            for n in dict.fromkeys(r["nodes"] for r in out["runs"] if r["shape"] == kind):
                got = {r["tree"]: r for r in out["runs"] if r["shape"] == kind and r["nodes"] == n}
                cells = [f"{got[t]['rounds']}, {got[t]['cpu_s']:.2f}" for t in ("A", "B fixed")]
                print(f"| {kind} | {n:,} | {cells[0]} | {cells[1]} |")
        return
    print(
        "| graph (cluster nodes : giant) | directed edges in | tree | CPU s, median (min-max) | rounds | step reads | "
        "edges the steps wrote | peak RSS MiB |"
    )
    print("| --- | ---: | --- | --- | ---: | ---: | ---: | ---: |")
    for spec in dict.fromkeys(r["graph"] for r in out["runs"]):
        for tree in ("A", "B", "B fixed"):
            runs = [r for r in out["runs"] if r["graph"] == spec and r["tree"] == tree]
            cpu = sorted(r["cpu_s"] for r in runs)
            med = cpu[len(cpu) // 2]
            r0 = runs[0]
            print(
                f"| {spec} | {r0['edges']:,} | {tree} | {med:.2f} ({cpu[0]:.2f}-{cpu[-1]:.2f}) | {r0['rounds']} | "
                f"{r0['reads'] if r0['reads'] is not None else '-'} | {sum(r0['step_edges']):,} | "
                f"{max(r['peak_rss_mib'] for r in runs):.0f} |"
            )


if __name__ == "__main__":
    main()
