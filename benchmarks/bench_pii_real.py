"""IPv4 precision and recall on real text, from hand-labelled candidates (``benchmarks/data/pii_ipv4_labelled.json``).

Each row is one dotted quad that some version of the detector reported, with 120 characters before and 100
after it, its file, and a label read by a person: ``address`` (a unicast address, documentation examples
included), ``multicast`` (an address that names no host: reporting it counts as a false positive, missing it
costs nothing) or ``not_address`` (a version, section number, OID...). Three sets: two the rules were tuned
on (Debian docs; man pages and package METADATA) and one labelled after the rules were frozen
(site-packages docs and code). Recall is against the addresses in the file, that is among what either the
old or the new detector found, so it measures what a change loses, not what every detector misses.

usage: .venv/bin/python benchmarks/bench_pii_real.py [--baseline-root DIR] [--render]
   --baseline-root: also score another checkout's core/pii.py (e.g. a clone of the commit before the change)
   --render: rebuild the RESULTS.md table from the committed JSON
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from results import RESULTS, replace_block  # noqa: E402  (benchmarks/ is this script's folder)

DATA = os.path.join(REPO, "benchmarks", "data", "pii_ipv4_labelled.json")
OUT = os.path.join(REPO, "benchmarks", "results", "pii_real.json")


def detector(root: str, name: str):
    spec = importlib.util.spec_from_file_location(name, os.path.join(root, "airflow_curation", "core", "pii.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module.find_pii


def score(find_pii, rows: list[dict]) -> dict:
    tp = fp = fn = 0
    for r in rows:
        text, start = r["before"] + r["match"] + r["after"], len(r["before"])
        found = any(s.start == start and s.end == start + len(r["match"]) for s in find_pii(text, ["ipv4"]))
        if r["label"] == "address":
            tp, fn = tp + found, fn + (not found)
        else:
            fp += found
    return {
        "reported": tp + fp,
        "true_positives": tp,
        "false_positives": fp,
        "missed": fn,
        "precision": tp / (tp + fp) if tp + fp else None,
        "recall": tp / (tp + fn) if tp + fn else None,
    }


def render(result: dict) -> str:
    lines = [
        "Hand-labelled dotted quads from text on the machine (`benchmarks/data/pii_ipv4_labelled.json`); recall is among the",
        "addresses either detector found. Command: `.venv/bin/python benchmarks/bench_pii_real.py --baseline-root <clone of "
        f"{result.get('baseline', 'the previous commit')}>` (`--render` rebuilds this table from `benchmarks/results/pii_real.json`).",
        "",
        "| set | role | candidates | addresses | code | reported | precision | recall |",
        "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: |",
    ]
    for name, s in result["sets"].items():
        for code, sc in s["scores"].items():
            lines.append(
                f"| {name} | {s['role']} | {s['candidates']} | {s['addresses']} | {code} | {sc['reported']} | "
                f"{sc['precision']:.2f} | {sc['recall']:.2f} |"
            )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-root", help="a checkout whose core/pii.py is scored beside this one")
    ap.add_argument("--baseline-name", default="c12309d", help="what to call the baseline in the table")
    ap.add_argument("--render", action="store_true")
    args = ap.parse_args()
    if args.render:
        with open(OUT) as fh:
            result = json.load(fh)
    else:
        with open(DATA) as fh:
            data = json.load(fh)
        codes = {"this change": detector(REPO, "pii_now")}
        if args.baseline_root:
            codes[args.baseline_name] = detector(args.baseline_root, "pii_baseline")
        result = {"baseline": args.baseline_name if args.baseline_root else None, "sets": {}}
        for name, s in data["sets"].items():
            rows = s["rows"]
            result["sets"][name] = {
                "role": s["role"],
                "candidates": len(rows),
                "addresses": sum(r["label"] == "address" for r in rows),
                "scores": {code: score(find, rows) for code, find in reversed(codes.items())},
            }
        with open(OUT + ".tmp", "w") as fh:
            json.dump(result, fh, indent=1)
        os.replace(OUT + ".tmp", OUT)
    text = "## PII: IPv4 precision on real text (`bench_pii_real.py`)\n\n" + render(result)
    print(text)
    replace_block(RESULTS, "bench_pii_real", text, after="bench_langid_pii")
    return 0


if __name__ == "__main__":
    sys.exit(main())
