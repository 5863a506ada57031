"""IPv4 precision and recall on real text, from hand-labelled candidates (``benchmarks/labels/pii_ipv4_labelled.json``).

Each row is one dotted quad (four decimal octets 0-255, what a plain detector reports; collected by
``benchmarks/collect_pii_ipv4.py``), with 120 characters before and 100 after it, its file, and a label
read by a person: ``address`` (an IPv4 address naming a host or network, documentation examples, loopback
and CIDR prefixes included), ``multicast`` or ``no_host`` (``0.0.0.0``, netmasks, ``255.255.255.255``: an
address that names no host; reporting it counts as a false positive, missing it costs nothing) or
``not_address`` (a version, section number, OID, anchor id...). Three sets of 200 rows (seeded sample):
Debian docs and man pages/package METADATA are the sets the rules were tuned on, site-packages docs and
code the held-out one. The first labelled file was lost; this one was recollected and relabelled on
2026-12-03, after the rules were written, so every set is labelled independently of the rules. Recall is
against the addresses among the candidates, so it measures what the detector loses of what a plain
dotted-quad match finds.

usage: .venv/bin/python benchmarks/bench_pii_real.py [--baseline-root DIR] [--render]
   --baseline-root: also score another checkout's core/pii.py (e.g. a clone of the commit before the change)
   --render: rebuild the RESULTS.md table from the committed JSON
"""

from __future__ import annotations

import argparse
import importlib.util
import ipaddress
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "benchmarks"))  # (python -P leaves the script's folder out)

from results import RESULTS, replace_block  # noqa: E402  (benchmarks/ is this script's folder)

DATA = os.path.join(REPO, "benchmarks", "labels", "pii_ipv4_labelled.json")
OUT = os.path.join(REPO, "benchmarks", "results", "pii_real.json")


def detector(root: str, name: str):
    spec = importlib.util.spec_from_file_location(name, os.path.join(root, "airflow_curation", "core", "pii.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module.find_pii


def is_target(row: dict, public_only: bool) -> bool:
    """Whether the detector should report ``row``: an address, and a global one in public-only mode."""
    return row["label"] == "address" and (not public_only or ipaddress.ip_address(row["match"]).is_global)


def score(find_pii, rows: list[dict], public_only: bool) -> dict:
    """Precision and recall of ``find_pii`` on ``rows``.

    :param public_only: the detector's ``ip_public_only``; then private, loopback and documentation
        addresses are not to be reported either.
    """
    tp = fp = fn = short = 0
    for r in rows:
        text, start = r["before"] + r["match"] + r["after"], len(r["before"])
        spans = find_pii(text, ["ipv4"], ip_public_only=public_only)
        found = any(s.start == start and s.end == start + len(r["match"]) for s in spans)
        if is_target(r, public_only):
            tp, fn = tp + found, fn + (not found)
            short += not found and len(r["match"]) == 7  # one-digit octets (1.2.3.4): skipped by design
        else:
            fp += found
    return {
        "reported": tp + fp,
        "true_positives": tp,
        "false_positives": fp,
        "missed": fn,
        "missed_one_digit_octets": short,
        "precision": tp / (tp + fp) if tp + fp else None,
        "recall": tp / (tp + fn) if tp + fn else None,
    }


def render(result: dict) -> str:
    lines = [
        "Hand-labelled dotted quads from text on the machine (`benchmarks/labels/pii_ipv4_labelled.json`, relabelled",
        "2026-12-03 after the first file was lost: 200 seeded candidates a set, collected by `benchmarks/collect_pii_ipv4.py`);",
        "recall is among the addresses a plain dotted-quad match finds. Command: `.venv/bin/python benchmarks/bench_pii_real.py --baseline-root <clone of "
        f"{result.get('baseline', 'the previous commit')}>` (`--render` rebuilds this table from `benchmarks/results/pii_real.json`).",
        "",
        "Two modes: every address (`ip_public_only=False`; `0.0.0.0`, netmasks and OIDs count as false positives) and",
        "the default public-only mode (only global addresses are to be reported). `missed 1-digit`: missed addresses whose",
        "octets are all one digit (`1.2.3.4`, `9.8.7.6`), which the detector skips by design (mostly versions).",
        "",
        "| set | role | candidates | mode | to report | code | reported | precision | recall | missed | missed 1-digit |",
        "| --- | --- | ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    for name, s in result["sets"].items():
        for mode, m in s["modes"].items():
            for code, sc in m["scores"].items():
                lines.append(
                    f"| {name} | {s['role']} | {s['candidates']} | {mode} | {m['targets']} | {code} | "
                    f"{sc['reported']} | {fmt(sc['precision'])} | {fmt(sc['recall'])} | {sc['missed']} | "
                    f"{sc['missed_one_digit_octets']} |"
                )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-root", help="a checkout whose core/pii.py is scored beside this one")
    ap.add_argument("--baseline-name", default="fee103c", help="what to call the baseline in the table")
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
                "labels": {k: sum(r["label"] == k for r in rows) for k in sorted({r["label"] for r in rows})},
                "modes": {
                    mode: {
                        "targets": sum(is_target(r, public) for r in rows),
                        "scores": {code: score(find, rows, public) for code, find in reversed(codes.items())},
                    }
                    for mode, public in (("all addresses", False), ("public only", True))
                },
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
