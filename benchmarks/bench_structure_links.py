"""Link density (or item text share) as a navigation signal for the ``structure`` preset: measured, not kept
(RESULTS.md, *Structure preset on real pages*).

For each labelled page of the given sets (``benchmarks/labels/structure_pages.json``, ``left_out`` excluded):
its text by the ingest extractor (resiliparse, main content), and its **link density**: the non-space characters
inside ``<a>`` elements (a regular expression over the HTML: walking resiliparse's DOM in Python cost ~1 s a
page on index pages) over the non-space characters of the page body. Then, per threshold, the share of
navigation pages dropped and of prose kept by the ``structure`` preset alone, by it with ``link density <=
threshold`` added, and by that rule alone.

``--feature item``: the **item text share** instead, the non-space characters whose nearest enclosing block is a
list item, definition term or description, or table cell (``li dt dd td th``) over the body's outside ``<pre>``
(an index, a table of contents or an item table holds its text in such elements, prose in paragraphs).

usage: python -P benchmarks/bench_structure_links.py SET[,SET...] [--feature link|item] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

LABELS = os.path.join(REPO, "benchmarks", "labels", "structure_pages.json")
THRESHOLDS = (0.4, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.9)
ANCHOR = re.compile(r"<a\b[^>]*>(.*?)</a\s*>", re.S | re.I)
TAG = re.compile(r"<[^>]*>")


def _nonspace(s: str) -> int:
    return len("".join(s.split()))


_ITEM, _SKIP = {"li", "dt", "dd", "td", "th"}, {"script", "style", "noscript", "head", "title"}


def item_text_share(html: str) -> float:
    """Non-space characters whose nearest block among items, cells, paragraphs and ``pre`` is an item or cell,
    over those outside ``pre`` (lxml's tree, walked without recursion)."""
    import lxml.html

    try:
        root = lxml.html.document_fromstring(html.encode("utf-8", "surrogatepass"))
    except Exception:  # an empty or unparseable document
        return 0.0
    body = root.find("body")
    counts = {"item": 0, "pre": 0, "other": 0}
    stack = [(body if body is not None else root, "other")]
    while stack:
        el, ctx = stack.pop()
        tag = el.tag if isinstance(el.tag, str) else ""
        if tag in _SKIP:
            ctx = None  # its text is not the page's, its tail is (counted below by its parent's context)
        elif tag in _ITEM:
            ctx = "item"
        elif tag in ("p", "pre", "blockquote"):
            ctx = "pre" if tag == "pre" else "other"
        if ctx and el.text:
            counts[ctx] += _nonspace(el.text)
        for child in el:
            stack.append((child, ctx))
            if child.tail and ctx:
                counts[ctx] += _nonspace(child.tail)
    return counts["item"] / max(1, counts["item"] + counts["other"])


def main() -> int:
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.html import HTMLTree

    from airflow_curation.core.filters import apply_rules, resolve_rules
    from airflow_curation.core.html_text import decode_html
    from airflow_curation.core.signals import compute_signals

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sets")
    ap.add_argument("--feature", choices=("link", "item"), default="link")
    ap.add_argument("--json")
    args = ap.parse_args()
    with open(LABELS) as fh:
        pages = [p for p in json.load(fh)["pages"] if p["set"] in args.sets.split(",") and p["label"] != "left_out"]
    texts, density = [], []
    for p in pages:
        with open(p["path"], "rb") as fh:
            html = decode_html(fh.read())
        tree = HTMLTree.parse(html)
        texts.append(extract_plain_text(tree, main_content=True, alt_texts=False, links=False).strip())
        if args.feature == "item":
            density.append(item_text_share(html))
            continue
        total = _nonspace(tree.body.text) if tree.body else 0
        links = sum(_nonspace(TAG.sub("", m)) for m in ANCHOR.findall(html))
        density.append(min(1.0, links / total) if total else 0.0)
    density_a = np.array(density)
    nav = np.array([p["label"] == "nav" for p in pages])
    keep = apply_rules(compute_signals(texts), resolve_rules("structure")).column("keep").to_numpy(zero_copy_only=False)
    keep = np.asarray(keep)
    key = "link_density" if args.feature == "link" else "item_text_share"
    out = {
        "sets": args.sets,
        "feature": args.feature,
        "nav": int(nav.sum()),
        "prose": int((~nav).sum()),
        "structure": [float((~keep[nav]).mean()), float(keep[~nav].mean())],
        "thresholds": {},
        "nav_kept_by_structure": [
            {"path": p["path"], key: round(d, 3)} for p, d, k, n in zip(pages, density, keep, nav) if n and k
        ],
    }
    print(f"{args.sets}: {out['nav']} nav, {out['prose']} prose pages")
    print(f"structure alone: nav dropped {out['structure'][0]:.3f}, prose kept {out['structure'][1]:.3f}")
    for th in THRESHOLDS:
        both, alone = keep & (density_a <= th), density_a <= th
        r = [
            float((~both[nav]).mean()),
            float(both[~nav].mean()),
            float((~alone[nav]).mean()),
            float(alone[~nav].mean()),
        ]
        out["thresholds"][str(th)] = r
        print(f"<= {th}: with structure {r[0]:.3f} / {r[1]:.3f}, alone {r[2]:.3f} / {r[3]:.3f}")
    for row in out["nav_kept_by_structure"]:
        print(f"nav kept by structure: {key} {row[key]:.2f} {row['path']}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
