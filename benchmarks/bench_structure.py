"""Structure signals: how well each preset drops real navigation/index pages and keeps real prose.

Pages: the Python 3.11 documentation and the Debian handbook (en-US) as installed by
``scripts/install_system_deps.sh``, converted to text by ``tests/preprocess/corpus.html_to_text`` (a
standard-library ``html.parser`` pass: one line per block element, the Sphinx main content only).
Labels come from paths and markup, never from the signals (``corpus.page_label``): indexes, contents
and table-of-contents pages are navigation; other pages are prose.

For each preset: precision and recall of "drop" for the navigation pages, and the fraction of prose
kept. Prints a Markdown table (for docs/preprocess.md).

usage: .venv/bin/python benchmarks/bench_structure.py
"""

from __future__ import annotations

import os
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))

from preprocess import corpus  # type: ignore  # noqa: E402

from airflow_curation.core.filters import apply_rules, resolve_rules  # noqa: E402
from airflow_curation.core.signals import compute_signals  # noqa: E402

PRESETS = (
    "gopher",
    "structure",
    "gopher,structure",
    "fineweb",
    "c4",
    "gopher,c4,fineweb",
    "gopher,c4,fineweb,structure",
)


def scores(drop: np.ndarray, nav: np.ndarray) -> tuple[float, float, float]:
    """(precision, recall) of drop for navigation pages, and the fraction of prose kept."""
    tp = int((drop & nav).sum())
    precision = tp / int(drop.sum()) if drop.any() else 0.0
    return precision, tp / int(nav.sum()), 1 - float(drop[~nav].mean())


def main() -> int:
    if not os.path.isdir(corpus.PYDOC_HTML):
        raise SystemExit("no pages: scripts/install_system_deps.sh installs python3.11-doc and debian-handbook")
    rows = corpus.labelled_pages()
    nav = np.array([r[1] for r in rows])
    signals = compute_signals([r[2] for r in rows])
    print(f"{int(nav.sum())} navigation/index pages, {int((~nav).sum())} prose pages")
    print("| preset | precision of drop (nav) | recall of drop (nav) | prose kept |")
    print("| --- | ---: | ---: | ---: |")
    for preset in PRESETS:
        drop = ~np.asarray(apply_rules(signals, resolve_rules(preset)).column("keep").to_numpy(zero_copy_only=False))
        p, r, kept = scores(drop, nav)
        print(f"| `{preset}` | {p:.3f} | {r:.3f} | {kept:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
