"""Web crawl input side by side: WARC parsers (FastWARC, warcio) and HTML extractors (Resiliparse,
trafilatura) on the same real pages.

    .venv/bin/python benchmarks/bench_html.py [--rounds 3] [--no-results]

Pages: every HTML page of the Python 3.11 documentation and of the Debian Administrator's Handbook (en-US) that
Debian ships (python3.11-doc, debian-handbook; installed by scripts/install_system_deps.sh), written once
into one gzipped WARC by warcio (request + response per page, as a crawler writes them). One process, one
core; every round runs each contender once, alternated; CPU seconds (``time.process_time``), median and
spread; load average stated.

* parse: iterate the WARC and read every response payload;
* extract: HTML bytes -> main text (``core.html_text``), per page;
* agreement: per page, bag-of-words F1 between Resiliparse's text and trafilatura's (the reference, FineWeb's
  extractor);
* structure kept: of each page's headings (h1-h3), list items, table cells and code blocks, the share whose
  text (first 60 characters, whitespace normalised, permalink marks removed) appears in the extracted text.
  Every such element counts, navigation menus included, so neither extractor can reach 100%: compare them.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import re
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from results import RESULTS, replace_block  # noqa: E402

from airflow_curation.core.html_text import EXTRACTORS, decode_html, extractor  # noqa: E402
from airflow_curation.stages.ingest.warc import fastwarc_records, warcio_records  # noqa: E402

SOURCES = [Path("/usr/share/doc/python3.11/html"), Path("/usr/share/doc/debian-handbook/html/en-US")]
OUT = HERE / "results" / "bench_html.json"
WARC = HERE / "data" / "html" / "pages.warc.gz"
STRUCTURE = {"headings": "//h1|//h2|//h3", "list items": "//li", "table cells": "//td|//th", "code blocks": "//pre"}


def pages() -> list[tuple[str, bytes]]:
    found = []
    for root in SOURCES:
        for p in sorted(root.rglob("*.html")):
            if p.stat().st_size > 512:
                found.append((f"https://{root.parts[4]}/{p.relative_to(root)}", p.read_bytes()))
    return found


def write_warc(docs: list[tuple[str, bytes]]) -> Path:
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    if WARC.exists():
        return WARC
    WARC.parent.mkdir(parents=True, exist_ok=True)
    tmp = WARC.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        w = WARCWriter(f, gzip=True)
        for url, body in docs:
            req = StatusAndHeaders("GET / HTTP/1.1", [("Host", "h")], is_http_request=True)
            w.write_record(w.create_warc_record(url, "request", http_headers=req))
            http = StatusAndHeaders("200 OK", [("Content-Type", "text/html; charset=utf-8")], protocol="HTTP/1.1")
            w.write_record(w.create_warc_record(url, "response", payload=io.BytesIO(body), http_headers=http))
    tmp.replace(WARC)
    return WARC


def _cpu(fn) -> tuple[float, object]:
    t = time.process_time()
    out = fn()
    return time.process_time() - t, out


def _parse(reader) -> int:
    with gzip.open(WARC, "rb") as f:
        return sum(len(r.payload or b"") for r in reader(f, 1 << 30) if r.record_type == "response")


def _words(text: str) -> Counter:
    return Counter(re.findall(r"\w+", text.lower()))


def _f1(a: str, b: str) -> float:
    wa, wb = _words(a), _words(b)
    if not wa and not wb:
        return 1.0
    common = sum((wa & wb).values())
    if not common:
        return 0.0
    p, r = common / sum(wa.values()), common / sum(wb.values())
    return 2 * p * r / (p + r)


def _norm(s: str) -> str:
    # "¶" is Sphinx's permalink anchor beside each heading: a link, which extractors rightly drop
    return re.sub(r"\s+", " ", s.replace("\u00b6", "")).strip()


def structure_kept(docs, texts: list[str]) -> dict[str, float]:
    import lxml.html

    found, total = Counter(), Counter()
    for (_, body), text in zip(docs, texts):
        flat = _norm(text)
        tree = lxml.html.fromstring(body)
        for kind, xpath in STRUCTURE.items():
            for el in tree.xpath(xpath):
                want = _norm(el.text_content())[:60]
                if len(want) >= 8:
                    total[kind] += 1
                    found[kind] += want in flat
    return {k: round(found[k] / total[k], 3) for k in STRUCTURE if total[k]}


def _stats(xs: list[float]) -> dict:
    return {"median": round(statistics.median(xs), 3), "min": round(min(xs), 3), "max": round(max(xs), 3), "runs": xs}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-results", action="store_true")
    ap.add_argument("--render", action="store_true", help="only rewrite the RESULTS.md block from the JSON")
    args = ap.parse_args()
    if args.render:
        replace_block(RESULTS, "bench_html", render(json.loads(OUT.read_text())))
        return
    docs = pages()
    html_mb = sum(len(b) for _, b in docs) / 1e6
    write_warc(docs)
    load = [os.getloadavg()]
    parse = {"fastwarc": [], "warcio": []}
    extract = {name: [] for name in EXTRACTORS}
    texts: dict[str, list[str]] = {}
    for _ in range(args.rounds):
        for name, reader in (("fastwarc", fastwarc_records), ("warcio", warcio_records)):
            secs, payload = _cpu(lambda reader=reader: _parse(reader))
            parse[name].append(round(secs, 3))
        for name in EXTRACTORS:
            fn = extractor(name)
            secs, out = _cpu(lambda fn=fn: [fn(decode_html(body, "utf-8")) for _, body in docs])
            extract[name].append(round(secs, 3))
            texts[name] = out
        load.append(os.getloadavg())
    f1 = [_f1(a, b) for a, b in zip(texts["resiliparse"], texts["trafilatura"])]
    result = {
        "pages": len(docs),
        "html_mb": round(html_mb, 1),
        "warc_mb": round(WARC.stat().st_size / 1e6, 1),
        "cpu": os.cpu_count(),
        "load_avg_1_5_15": [[round(x, 2) for x in la] for la in load],
        "parse_cpu_s": {k: _stats(v) for k, v in parse.items()},
        "extract_cpu_s": {k: _stats(v) for k, v in extract.items()},
        "agreement_with_trafilatura": {
            "median_f1": round(statistics.median(f1), 3),
            "share_f1_ge_0.8": round(sum(x >= 0.8 for x in f1) / len(f1), 3),
            "empty": {k: sum(not t.strip() for t in v) for k, v in texts.items()},
        },
        "structure_kept": {name: structure_kept(docs, texts[name]) for name in EXTRACTORS},
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "load_avg_1_5_15"}, indent=1))
    if not args.no_results:
        replace_block(RESULTS, "bench_html", render(result))


def render(r: dict) -> str:
    p, e = r["parse_cpu_s"], r["extract_cpu_s"]
    mb = r["html_mb"]
    lines = [
        "## Web crawl input: WARC parsers and HTML extractors (`bench_html.py`)",
        "",
        f"{r['pages']} real pages ({mb} MB of HTML: Python 3.11 docs + Debian Administrator's Handbook), one "
        f"gzipped WARC of {r['warc_mb']} MB; one core, {len(p['fastwarc']['runs'])} alternated rounds, CPU s "
        f"median (min-max); 1-minute load average during the run {min(x[0] for x in r['load_avg_1_5_15'])}-"
        f"{max(x[0] for x in r['load_avg_1_5_15'])} on {r['cpu']} cores (the test suite was installing beside it).",
        "",
        "| step | contender | CPU s | MB/s of HTML per core | ratio |",
        "| --- | --- | --- | --- | --- |",
    ]
    for step, d, ref in (("parse WARC", p, "warcio"), ("extract text", e, "trafilatura")):
        for name, s in d.items():
            ratio = d[ref]["median"] / s["median"] if s["median"] else float("nan")
            lines.append(
                f"| {step} | {name} | {s['median']} ({s['min']}-{s['max']}) | {mb / s['median']:.1f} | "
                f"{ratio:.1f}x vs {ref} |"
            )
    a = r["agreement_with_trafilatura"]
    lines += [
        "",
        f"Agreement of Resiliparse's text with trafilatura's, bag-of-words F1 per page: median {a['median_f1']}, "
        f"{a['share_f1_ge_0.8']:.0%} of pages at 0.8 or more; pages with no text: {a['empty']}.",
        "",
        "| kept of the page's ... | " + " | ".join(r["structure_kept"]) + " |",
        "| --- | " + " | ".join("---" for _ in r["structure_kept"]) + " |",
    ]
    for kind in STRUCTURE:
        lines.append(f"| {kind} | " + " | ".join(f"{v.get(kind, 0):.0%}" for v in r["structure_kept"].values()) + " |")
    lines += [
        "",
        "Command: `.venv/bin/python benchmarks/bench_html.py --rounds 3`; JSON: `benchmarks/results/bench_html.json`.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
