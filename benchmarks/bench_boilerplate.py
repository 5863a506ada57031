"""Boilerplate across documents: the boilerplate stage's line counting and removal against dolma's bloom-filter
paragraph dedup and a plain-Python exact-hash baseline, on the same pages.

Pages: every ``.html`` file under /usr/share/doc (and the HTML documentation of the installed Python
packages with ``--site-packages``), extracted by the project's HTML extractor (resiliparse), cached under
``benchmarks/data/`` (ignored). Each peer runs in a fresh ``python -P`` process (dolma: its CLI, one
process), A, B and C alternated, ``--runs`` times; the load average is recorded before each run and every
run is kept.

- ``boilerplate`` (this project): ``core/boilerplate.py``, the functions the stage runs per shard and per
  partition (counts per document, summed, lines held by >= ``min_documents`` documents removed), one core,
  spill files left out (the stage's own end-to-end figures are not these);
- ``python exact``: a dict of line -> documents holding it, then the same removal, in plain Python;
- ``dolma``: ``dolma dedupe`` with paragraphs (its CLI, Rust, one process), a bloom filter sized for the
  pages' paragraphs at a false-positive rate of 1e-4, and one at 1e-2.

Semantics differ and the JSON says by how much: dolma removes every paragraph (line) *seen before* (the
first occurrence is kept, repeats inside one document are removed too); the boilerplate stage removes
every occurrence of a line held by at least ``min_documents`` documents. Dolma's bloom-filter cost is
measured against an exact seen-before oracle over the same paragraphs: the paragraphs it removed that
were never seen before are false positives (lost text).

usage: python -P benchmarks/bench_boilerplate.py [--runs 3] [--site-packages DIR] [--render]
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

from results import RESULTS, replace_block  # noqa: E402

DATA = os.path.join(REPO, "benchmarks", "data", "boilerplate_pages.parquet")
OUT = os.path.join(REPO, "benchmarks", "results", "boilerplate.json")
DOLMA = os.environ.get("DOLMA", "/work/main/.venv-dolma/bin/dolma")
MIN_DOCUMENTS = (10, 2)


def build_pages(site_packages: str | None) -> str:
    """The pages as Parquet (``id``, ``text``), extracted once."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from airflow_curation.core.html_text import html_to_text

    if os.path.exists(DATA):
        return DATA
    files = sorted(glob.glob("/usr/share/doc/**/*.html", recursive=True))
    if site_packages:
        files += sorted(glob.glob(os.path.join(site_packages, "**", "*.html"), recursive=True))
    ids, texts = [], []
    for f in files:
        if not os.path.isfile(f):
            continue
        text = html_to_text(open(f, "rb").read())
        if text.strip():
            ids.append(f)
            texts.append(text)
    os.makedirs(os.path.dirname(DATA), exist_ok=True)
    pq.write_table(pa.table({"id": ids, "text": texts}), DATA + ".tmp")
    os.replace(DATA + ".tmp", DATA)
    return DATA


# -- the peers, each run in a fresh process (``--peer``) ----------------------------------------------------
def peer_boilerplate(texts, min_documents: int) -> dict:
    import numpy as np
    import pyarrow.compute as pc

    from airflow_curation.core.boilerplate import document_line_counts, remove_lines, sum_counts

    started = time.perf_counter()
    batches = [texts.slice(i, 8192) for i in range(0, len(texts), 8192)]  # Arrow, as the stage reads it
    keys, docs, _ = document_line_counts(batches)
    keys, docs = sum_counts(keys, docs)
    frequent = np.sort(keys[docs >= min_documents])
    removed = 0
    kept_bytes = 0
    for b in batches:
        clean, r = remove_lines(b, frequent)
        removed += int(r.sum())
        kept_bytes += int(pc.sum(pc.binary_length(clean)).as_py() or 0)
    return {"seconds": time.perf_counter() - started, "lines_removed": removed, "kept_bytes": kept_bytes}


def peer_python(texts: list[str], min_documents: int) -> dict:
    started = time.perf_counter()
    held: dict[str, int] = {}
    for t in texts:
        for line in {s.strip() for s in t.split("\n")}:
            if line:
                held[line] = held.get(line, 0) + 1
    removed = kept_bytes = 0
    for t in texts:
        out = []
        for s in t.split("\n"):
            if s.strip() and held[s.strip()] >= min_documents:
                removed += 1
            else:
                out.append(s)
        kept_bytes += len("\n".join(out).encode())
    return {"seconds": time.perf_counter() - started, "lines_removed": removed, "kept_bytes": kept_bytes}


def run_peer(name: str, min_documents: int) -> dict:
    """One peer in a fresh ``python -P`` process."""
    code = (
        f"import json,sys; sys.path.insert(0,{REPO!r}); sys.path.insert(0,{os.path.join(REPO, 'benchmarks')!r}); "
        "import pyarrow.parquet as pq; import bench_boilerplate as b; "
        f"t=pq.read_table({DATA!r}).column('text'); t=t.to_pylist() if {name!r}=='python' else t; "
        f"print(json.dumps(b.peer_{name}(t,{min_documents})))"
    )
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def dolma_documents(folder: str) -> tuple[list[str], list[str]]:
    import pyarrow.parquet as pq

    t = pq.read_table(DATA)
    ids, texts = t.column("id").to_pylist(), t.column("text").to_pylist()
    os.makedirs(os.path.join(folder, "documents"), exist_ok=True)
    with gzip.open(os.path.join(folder, "documents", "pages.jsonl.gz"), "wt", compresslevel=1) as f:
        for i, text in zip(ids, texts):
            f.write(json.dumps({"id": i, "text": text, "source": "doc", "version": "v0"}) + "\n")
    return ids, texts


def run_dolma(folder: str, fp_rate: float, paragraphs: int, size: int = 0) -> tuple[dict, dict[str, list]]:
    """``dolma dedupe`` over the pages (paragraphs = lines), one process; its spans per document id."""
    shutil.rmtree(os.path.join(folder, "attributes"), ignore_errors=True)
    bloom = os.path.join(folder, "bloom.bin")
    if os.path.exists(bloom):
        os.remove(bloom)
    cmd = [
        DOLMA,
        "dedupe",
        "--documents",
        os.path.join(folder, "documents", "*.jsonl.gz"),
        "--dedupe.name",
        "bp",
        "--dedupe.paragraphs.attribute_name",
        "bp_para",
        "--dedupe.skip_empty",
        "--bloom_filter.file",
        bloom,
        "--no-bloom_filter.read_only",
        "--bloom_filter.estimated_doc_count",
        str(paragraphs),
        "--bloom_filter.desired_false_positive_rate",
        str(fp_rate),
        "--processes",
        "1",
    ]
    if size:  # a filter of this many bytes, whatever the estimate says: what its false positives cost
        cmd += ["--bloom_filter.size_in_bytes", str(size)]
    started = time.perf_counter()
    subprocess.run(cmd, capture_output=True, text=True, check=True)
    seconds = time.perf_counter() - started
    spans: dict[str, list] = {}
    for f in glob.glob(os.path.join(folder, "attributes", "bp", "*.gz")):
        with gzip.open(f, "rt") as fh:
            for line in fh:
                r = json.loads(line)
                spans[r["id"]] = r["attributes"]["bp_para"]
    return {"seconds": seconds, "bloom_bytes": os.path.getsize(bloom)}, spans


def dolma_quality(ids: list[str], texts: list[str], spans: dict[str, list]) -> dict:
    """Dolma's removed paragraphs against an exact seen-before oracle over the same paragraphs (dolma splits
    on ``\\n`` and skips empty ones; a span covers the paragraph and its newline)."""
    seen: set[str] = set()
    flagged = oracle = fp = fn = removed_bytes = 0
    for i, text in zip(ids, texts):
        starts = {int(s[0]) for s in spans.get(i, [])}
        pos = 0
        for para in text.split("\n"):
            dup = para in seen if para.strip() else False
            if para.strip():
                seen.add(para)
            hit = pos in starts
            flagged += hit
            oracle += dup
            fp += hit and not dup
            fn += dup and not hit
            removed_bytes += len(para.encode()) if hit else 0
            pos += len(para) + 1
    return {
        "lines_removed": flagged,
        "seen_before_exact": oracle,
        "false_positives": fp,
        "false_negatives": fn,
        "false_positive_rate_of_removed": fp / flagged if flagged else 0.0,
        "removed_bytes": removed_bytes,
    }


def _stats(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "runs": xs}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--site-packages", default=None)
    ap.add_argument("--render", action="store_true")
    args = ap.parse_args()
    if args.render:
        with open(OUT) as fh:
            result = json.load(fh)
    else:
        build_pages(args.site_packages)
        folder = tempfile.mkdtemp(prefix="bench-boilerplate-")
        ids, texts = dolma_documents(folder)
        mb = sum(len(t.encode()) for t in texts) / 1e6
        paragraphs = sum(1 for t in texts for p in t.split("\n") if p.strip())
        result = {
            "pages": len(texts),
            "text_mb": round(mb, 3),
            "lines": paragraphs,
            "cpu": os.cpu_count(),
            "load_before_runs": [],
            "peers": {},
        }
        runs: dict[str, list[dict]] = {}
        for r in range(args.runs):
            for md in MIN_DOCUMENTS:
                for peer in ("boilerplate", "python"):
                    result["load_before_runs"].append(os.getloadavg()[0])
                    runs.setdefault(f"{peer} min_documents={md}", []).append(run_peer(peer, md))
            for fp, size in ((1e-4, 0), (1e-2, 0), (1e-2, 1 << 16)):
                result["load_before_runs"].append(os.getloadavg()[0])
                out, spans = run_dolma(folder, fp, paragraphs, size)
                out.update(dolma_quality(ids, texts, spans))
                name = f"dolma bloom fp={fp:g}" + (f", {size >> 10} KiB" if size else "")
                runs.setdefault(name, []).append(out)
            print(f"run {r + 1}/{args.runs} done", file=sys.stderr)
        shutil.rmtree(folder, ignore_errors=True)
        for name, rs in runs.items():
            secs = [x["seconds"] for x in rs]
            summary = {k: v for k, v in rs[0].items() if k != "seconds"}
            result["peers"][name] = {"seconds": _stats(secs), "mb_per_s": mb / statistics.median(secs), **summary}
        with open(OUT + ".tmp", "w") as fh:
            json.dump(result, fh, indent=1)
        os.replace(OUT + ".tmp", OUT)
    text = "## Boilerplate across documents (`bench_boilerplate.py`)\n\n" + render(result)
    print(text)
    replace_block(RESULTS, "bench_boilerplate", text)
    return 0


def render(r: dict) -> str:
    lines = [
        f"{r['pages']} pages ({r['text_mb']} MB of text, {r['lines']} non-blank lines) extracted from every `.html` under",
        "/usr/share/doc by the project's extractor. One process each, fresh per run, alternated; "
        f"{len(r['peers']['boilerplate min_documents=10']['seconds']['runs'])} runs; load average before the runs "
        f"{min(r['load_before_runs']):.1f}-{max(r['load_before_runs']):.1f} on {r['cpu']} cores. Command: "
        "`python -P benchmarks/bench_boilerplate.py` (`--render` rebuilds this table from "
        "`benchmarks/results/boilerplate.json`).",
        "",
        "Dolma removes every line seen before (keeps the first occurrence); the boilerplate stage removes every",
        "occurrence of a line held by at least `min_documents` documents. Dolma's false positives are lines it",
        "removed that an exact seen-before pass over the same lines never saw before (text lost to the bloom filter).",
        "",
        "| peer | median s (min-max) | MB/s | lines removed | dolma false positives | bloom bytes |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, p in r["peers"].items():
        s = p["seconds"]
        fp = (
            f"{p['false_positives']} ({100 * p['false_positive_rate_of_removed']:.2f}% of removed)"
            if "false_positives" in p
            else "-"
        )
        lines.append(
            f"| {name} | {s['median']:.2f} ({s['min']:.2f}-{s['max']:.2f}) | {p['mb_per_s']:.1f} | "
            f"{p['lines_removed']} | {fp} | {p.get('bloom_bytes', '-')} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
