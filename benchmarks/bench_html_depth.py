"""What the extractor's depth guard costs, and what it guards against.

    .venv/bin/python benchmarks/bench_html_depth.py [--rounds 5] [--render]

Resiliparse's main-content pass costs the square of the page's element depth; ``core.html_text`` refuses
a page that nests deeper than ``MAX_DEPTH`` (a Lexbor selector, asked only of pages with more ``<`` than
that). Two measurements, one process, one core, CPU seconds (``time.process_time``):

* cost on real pages: every HTML page of the Python 3.11 documentation and the Debian handbook (en-US),
  extracted by Resiliparse alone (A: ``HTMLTree.parse`` + ``extract_plain_text``, the peer) and by the guarded
  extractor (B), A and B alternated per round, median and spread of the rounds, every round kept; the texts
  must be equal;
* the unguarded pass on a chain of nested ``<div>``s as the depth doubles (the guarded extractor refuses the
  deeper ones at the selector's cost).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from bench_html import pages  # noqa: E402
from results import RESULTS, replace_block  # noqa: E402

from airflow_curation.core.html_text import (  # noqa: E402
    MAX_DEPTH,
    PageRefused,
    decode_html,
    extractor,
    resiliparse_main_text,
    trafilatura_text,
)

OUT = HERE / "results" / "html_depth.json"


def unguarded(html: str) -> str:
    from resiliparse.parse.html import HTMLTree

    return resiliparse_main_text(HTMLTree.parse(html))


def timed(fn, htmls: list[str]) -> tuple[float, list[str]]:
    t = time.process_time()
    out = [fn(h) for h in htmls]
    return time.process_time() - t, out


def _refused(extract, html: str) -> bool:
    try:
        extract(html)
    except PageRefused:
        return True
    return False


def chain(depth: int) -> str:
    return f"<html><body>{'<div>' * depth}<p>deep text</p>{'</div>' * depth}</body></html>"


def measure(rounds: int) -> dict:
    guarded = extractor("resiliparse")
    htmls = [decode_html(data) for _, data in pages()]
    mb = sum(len(h.encode("utf-8")) for h in htmls) / 1e6
    timed(unguarded, htmls[:50]), timed(guarded, htmls[:50])  # warm both
    runs = []
    for r in range(rounds):
        order = [("A", unguarded), ("B", guarded)] if r % 2 == 0 else [("B", guarded), ("A", unguarded)]
        got = {}
        for name, fn in order:
            got[name] = timed(fn, htmls)
        assert [t.strip() for t in got["A"][1]] == [t.strip() for t in got["B"][1]], "the guard changed a text"
        runs.append({"round": r + 1, "order": "".join(n for n, _ in order), "A_s": got["A"][0], "B_s": got["B"][0]})
    chains = []
    for depth in (1000, 2000, 4000, 8000, 16000):
        html = chain(depth)
        a = timed(unguarded, [html])[0]
        t = time.process_time()
        refused = _refused(guarded, html)
        chains.append({"depth": depth, "unguarded_s": a, "guarded_s": time.process_time() - t, "refused": refused})
    links = []  # trafilatura without its tag cap on a page of N links: superlinear; Resiliparse beside it
    for n in (12_500, 25_000, 50_000, 100_000):
        html = "<html><body>" + "".join(f'<a href="/p{i}">link {i}</a> ' for i in range(n)) + "</body></html>"
        row = {"links": n, "mb": len(html) / 1e6, "resiliparse_s": timed(guarded, [html])[0]}
        row["trafilatura_s"] = timed(trafilatura_text, [html])[0]
        row["trafilatura_refused"] = _refused(extractor("trafilatura"), html)
        links.append(row)
    return {
        "links": links,
        "pages": len(htmls),
        "mb": mb,
        "deeper_than_guard_checked": sum(h.count("<") > MAX_DEPTH for h in htmls),
        "max_depth": MAX_DEPTH,
        "load_before": os.getloadavg()[0],
        "runs": runs,
        "chains": chains,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def _earlier(e: dict) -> str:
    ratios = e.get("ratios") or [x["B_s"] / x["A_s"] for x in e["runs"]]
    code = f", {e['code']}" if e.get("code") else ""
    return (
        f"Earlier run ({e['date']}, load {e['load_before']:.1f}{code}): B / A median {statistics.median(ratios):.3f} "
        f"({', '.join(f'{x:.3f}' for x in ratios)})."
    )


def render(r: dict) -> str:
    a = [x["A_s"] for x in r["runs"]]
    b = [x["B_s"] for x in r["runs"]]
    ratios = [x["B_s"] / x["A_s"] for x in r["runs"]]
    lines = [
        "## HTML extraction: the depth guard's cost (`benchmarks/bench_html_depth.py`)",
        "",
        f"{r['date']}, load {r['load_before']:.1f} before. {r['pages']} pages ({r['mb']:.1f} MB of HTML: the Python 3.11 "
        f"docs and the Debian handbook en-US), one process, one core, A and B alternated, {len(a)} rounds; "
        f"{r['deeper_than_guard_checked']} pages have more than {r['max_depth']} `<` and are asked the selector. "
        "Texts equal in every round.",
        "",
        "| extractor | CPU s, median (min-max) | MB/s |",
        "| --- | ---: | ---: |",
        f"| A: Resiliparse alone (the peer) | {statistics.median(a):.3f} ({min(a):.3f}-{max(a):.3f}) | "
        f"{r['mb'] / statistics.median(a):.1f} |",
        f"| B: `core.html_text` (depth guard) | {statistics.median(b):.3f} ({min(b):.3f}-{max(b):.3f}) | "
        f"{r['mb'] / statistics.median(b):.1f} |",
        "",
        f"B / A per round: median {statistics.median(ratios):.3f} ({', '.join(f'{x:.3f}' for x in ratios)}).",
        *(_earlier(e) for e in r.get("earlier", [])),
        "",
        "A chain of nested `<div>`s (one page):",
        "",
        "| depth | unguarded main-content pass, CPU s | guarded, CPU s | guarded refuses |",
        "| ---: | ---: | ---: | --- |",
    ]
    for c in r["chains"]:
        lines.append(f"| {c['depth']:,} | {c['unguarded_s']:.3f} | {c['guarded_s']:.3f} | {c['refused']} |")
    if r.get("links"):
        lines += [
            "",
            "A page of N links (one run each): trafilatura, the optional extractor, grows faster than the page, so a page",
            "of more than 100,000 tags is not given to it (Common Crawl truncates payloads at 1 MiB, ~33,000 such links):",
            "",
            "| links | MB of HTML | Resiliparse, CPU s | trafilatura without its tag cap, CPU s | refused by the cap |",
            "| ---: | ---: | ---: | ---: | --- |",
        ]
        for x in r["links"]:
            lines.append(
                f"| {x['links']:,} | {x['mb']:.2f} | {x['resiliparse_s']:.3f} | {x['trafilatura_s']:.2f} | "
                f"{x.get('trafilatura_refused', '')} |"
            )
    lines += [
        "",
        "The guard's cost is the selectors' scan of the pages past the `<` gate (~1.2 ms a page here, linear in",
        "elements x depth) and a `count('<')` per page; how many pages pass the gate depends on the crawl (a quarter",
        "of these documentation pages do). Not re-measured with the guard: WARC read + extraction against datatrove",
        "(*Web crawl to curated text*, (a): 20.4x before it; the goal is 5x).",
        "",
        f"Command: `.venv/bin/python benchmarks/bench_html_depth.py --rounds {len(a)}`; JSON: "
        "`benchmarks/results/html_depth.json`.",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--render", action="store_true", help="only rewrite the RESULTS.md block from the JSON")
    args = ap.parse_args()
    if not args.render:
        got = measure(args.rounds)
        if OUT.exists():  # every run kept: the ones before go under "earlier"
            before = json.loads(OUT.read_text())
            got["earlier"] = [
                *before.pop("earlier", []),
                {k: before[k] for k in ("date", "load_before", "runs", "chains", "links") if k in before},
            ]
        OUT.write_text(json.dumps(got, indent=1) + "\n")
    r = json.loads(OUT.read_text())
    replace_block(RESULTS, "bench_html_depth", render(r), after="bench_html")
    print(render(r))


if __name__ == "__main__":
    main()
