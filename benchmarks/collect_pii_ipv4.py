"""Collect dotted-quad candidates for the IPv4 labelled set (``benchmarks/labels/pii_ipv4_labelled.json``).

A candidate is any four dot-separated decimal octets 0-255 (what a plain detector reports), with 120
characters before and 100 after it and its file. Three source groups: ``debian-docs`` (text under
/usr/share/doc, changelogs included), ``man-metadata`` (man pages under /usr/share/man and package METADATA
in site-packages) and ``site-packages`` (docs and code of installed Python packages). Identical (match,
context) rows are kept once and each set is capped by a seeded sample, so that every row can be read by a
person. The output rows carry ``label: null``; labels are written by hand (``--merge`` keeps labels already
given to the same row).

usage: python -P benchmarks/collect_pii_ipv4.py --site-packages DIR [--cap 300] [--out FILE] [--merge]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import sys

OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
QUAD = re.compile(rf"(?<!\d)({OCTET}(?:\.{OCTET}){{3}})(?!\d)")
TEXT_EXT = (".txt", ".rst", ".md", ".py", ".html", ".cfg", ".ini", ".toml", ".yaml", ".yml", ".json", "")


def read_text(path: str) -> str | None:
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as fh:
                raw = fh.read(2_000_000)
        else:
            with open(path, "rb") as fh:
                raw = fh.read(2_000_000)
    except OSError:
        return None
    if b"\0" in raw[:4096]:
        return None
    return raw.decode("utf-8", "replace")


def walk(root: str, keep) -> list[str]:
    out = []
    for dirpath, dirnames, files in os.walk(root):
        dirnames.sort()
        out += [os.path.join(dirpath, f) for f in sorted(files) if keep(os.path.join(dirpath, f))]
    return out


def sources(site: str) -> dict[str, list[str]]:
    def doc(p: str) -> bool:
        base = p[:-3] if p.endswith(".gz") else p
        return os.path.splitext(base)[1] in TEXT_EXT and os.path.isfile(p)

    def pkg(p: str) -> bool:
        return p.endswith((".py", ".rst", ".md", ".txt")) and ".dist-info" not in p

    return {
        "debian-docs": walk("/usr/share/doc", doc),
        "man-metadata": walk("/usr/share/man/man1", lambda p: p.endswith(".gz"))
        + walk("/usr/share/man/man5", lambda p: p.endswith(".gz"))
        + walk("/usr/share/man/man8", lambda p: p.endswith(".gz"))
        + walk(site, lambda p: p.endswith(".dist-info/METADATA")),
        "site-packages": walk(site, pkg),
    }


def candidates(paths: list[str]) -> list[dict]:
    rows, seen = [], set()
    for path in paths:
        text = read_text(path)
        if not text or "." not in text:
            continue
        for m in QUAD.finditer(text):
            before, after = text[max(0, m.start() - 120) : m.start()], text[m.end() : m.end() + 100]
            key = (m.group(1), before[-40:], after[:40])
            if key in seen:
                continue
            seen.add(key)
            rows.append({"file": path, "before": before, "match": m.group(1), "after": after, "label": None})
    return rows


def sample(rows: list[dict], cap: int, seed: str) -> list[dict]:
    def rank(r: dict) -> str:
        return hashlib.sha1(f"{seed}|{r['file']}|{r['before']}|{r['match']}".encode()).hexdigest()

    return sorted(sorted(rows, key=rank)[:cap], key=lambda r: (r["file"], r["before"]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--site-packages", required=True)
    ap.add_argument("--cap", type=int, default=300)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "labels", "pii_ipv4_labelled.json"))
    ap.add_argument("--merge", action="store_true", help="keep labels of rows already in --out")
    args = ap.parse_args()
    old = {}
    if args.merge and os.path.exists(args.out):
        with open(args.out) as fh:
            for s in json.load(fh)["sets"].values():
                old.update({(r["file"], r["before"], r["match"]): r["label"] for r in s["rows"]})
    roles = {"debian-docs": "tuning", "man-metadata": "tuning", "site-packages": "held out"}
    out = {
        "relabelled": "2026-12-03: the first labelled file was lost; candidates recollected and relabelled",
        "sets": {},
    }
    for name, paths in sources(args.site_packages).items():
        rows = sample(candidates(paths), args.cap, name)
        for r in rows:
            r["label"] = old.get((r["file"], r["before"], r["match"]))
        out["sets"][name] = {"role": roles[name], "files_scanned": len(paths), "rows": rows}
        print(name, len(paths), "files", len(rows), "rows", file=sys.stderr)
    with open(args.out + ".tmp", "w") as fh:
        json.dump(out, fh, indent=1, ensure_ascii=False)
    os.replace(args.out + ".tmp", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
