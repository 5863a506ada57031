"""Line cleaning throughput per core beside datatrove's C4 line filter, on the text of real pages.

    .venv/bin/python benchmarks/bench_clean.py [--rounds 5] [--no-results]

Texts: every HTML page of the Python 3.11 documentation and of the Debian Administrator's Handbook (en-US)
that Debian ships (the pages of ``bench_html.py``), turned into text once by the default extractor
(Resiliparse). One process per contender, one core, CPU seconds (``time.process_time``) of the cleaning
loop only; the contenders alternate within each round; median and spread of ``--rounds`` rounds.

* ``datatrove C4QualityFilter``: datatrove 0.10.1's filter (in ``.venv-oracles``, scripts/setup_oracles.sh),
  ``min_num_sentences=-1`` (the sentence count is the ``c4`` preset's rule here, not a line rule), called as
  its ``filter(doc)`` per document;
* ``ours c4``: :class:`airflow_curation.core.line_clean.LineCleaner` with the same rules;
* ``ours c4+symbols+NFC``: plus the symbol-line rule and Unicode NFC;
* ``ours ftfy``: plus ftfy's mojibake repair (``fix_text``).

Agreement: the share of documents on which ours (``c4``) and datatrove give the same decision and, when both
keep the document, the same text.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from bench_html import pages  # noqa: E402
from results import RESULTS, replace_block  # noqa: E402

OUT = HERE / "results" / "bench_clean.json"
TEXTS = HERE / "data" / "clean" / "texts.json"
ORACLE = HERE.parent / ".venv-oracles" / "bin" / "python"
OURS = {
    "ours c4": {"rules": "c4"},
    "ours c4+symbols+NFC": {"rules": "c4,symbols", "normalization": "NFC"},
    "ours c4+symbols+NFC+ftfy": {"rules": "c4,symbols", "normalization": "NFC", "fix_text": True},
}
DATATROVE = """
import json, sys, time
from datatrove.data import Document
from datatrove.pipeline.filters import C4QualityFilter
texts = json.load(open(sys.argv[1]))
f = C4QualityFilter(min_num_sentences=-1)
docs = [Document(text=t, id=str(i)) for i, t in enumerate(texts)]
t = time.process_time()
out = []
for d in docs:
    r = f.filter(d)
    out.append(d.text if r is True else None)
print(json.dumps({"seconds": time.process_time() - t, "texts": out}))
"""
OURS_RUN = """
import json, sys, time
sys.path.insert(0, sys.argv[3])
from airflow_curation.core.line_clean import LineCleaner
texts = json.load(open(sys.argv[1]))
c = LineCleaner(**json.loads(sys.argv[2]))
c.clean("warm up ftfy and the regexes. \u00c3\u00a9")
t = time.process_time()
out = []
for x in texts:
    text, _, reason = c.clean(x)
    out.append(None if reason else text)
print(json.dumps({"seconds": time.process_time() - t, "texts": out}))
"""


def texts() -> list[str]:
    if TEXTS.exists():
        return json.loads(TEXTS.read_text())
    from airflow_curation.core.html_text import html_to_text

    out = [t for _, body in pages() if (t := html_to_text(body))]
    TEXTS.parent.mkdir(parents=True, exist_ok=True)
    TEXTS.write_text(json.dumps(out))
    return out


def run(name: str) -> dict:
    if name == "datatrove C4QualityFilter":
        cmd = [str(ORACLE), "-c", DATATROVE, str(TEXTS)]
    else:
        cmd = [sys.executable, "-c", OURS_RUN, str(TEXTS), json.dumps(OURS[name]), str(HERE.parent)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-results", action="store_true")
    args = ap.parse_args()
    docs = texts()
    mb = sum(len(t.encode()) for t in docs) / 1e6
    names = ["datatrove C4QualityFilter", *OURS]
    seconds: dict[str, list[float]] = {n: [] for n in names}
    outputs: dict[str, list] = {}
    load = []
    for r in range(args.rounds):
        order = names if r % 2 == 0 else names[::-1]  # alternated
        for name in order:
            got = run(name)
            seconds[name].append(round(got["seconds"], 4))
            outputs[name] = got["texts"]
        load.append(os.getloadavg())
    theirs, ours = outputs["datatrove C4QualityFilter"], outputs["ours c4"]
    # datatrove keeps a document whose every line is removed (as empty text); ours drops it (lines_all_removed)
    same = sum((a or None) == (b or None) for a, b in zip(theirs, ours))
    result = {
        "documents": len(docs),
        "mb": round(mb, 2),
        "rounds": args.rounds,
        "load_avg_1_5_15": load,
        "agreement_c4": round(same / len(docs), 4),
        "seconds": {n: _stats(s) for n, s in seconds.items()},
        "mb_per_s": {n: round(mb / statistics.median(s), 2) for n, s in seconds.items()},
        "command": ".venv/bin/python benchmarks/bench_clean.py --rounds %d" % args.rounds,
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "seconds"}, indent=1))
    if not args.no_results:
        replace_block(RESULTS, "bench_clean", report(result))


def _stats(xs: list[float]) -> dict:
    return {"median": round(statistics.median(xs), 4), "min": min(xs), "max": max(xs), "runs": xs}


def report(r: dict) -> str:
    ref = r["seconds"]["datatrove C4QualityFilter"]["median"]
    rows = [
        f"| {n} | {s['median']} ({s['min']}-{s['max']}) | {r['mb_per_s'][n]} | {ref / s['median']:.2f}x |"
        for n, s in r["seconds"].items()
    ]
    lo = min(x[0] for x in r["load_avg_1_5_15"])
    hi = max(x[0] for x in r["load_avg_1_5_15"])
    return "\n".join(
        [
            "## Line cleaning (C4/FineWeb line rules, symbols, NFC, ftfy)",
            "",
            f"`{r['command']}` ({r['when']}): {r['documents']} texts, {r['mb']} MB, extracted by Resiliparse from the",
            "Python 3.11 docs and Debian handbook pages Debian ships; one core per contender, CPU seconds of the",
            f"cleaning loop, median (min-max) of {r['rounds']} alternated rounds; 1-minute load {lo:.2f}-{hi:.2f}"
            " (2 cores shared with other jobs).",
            "",
            "| contender | CPU s | MB/s per core | vs datatrove |",
            "| --- | ---: | ---: | ---: |",
            *rows,
            "",
            f"Same decision and, where both keep it, the same text as datatrove's filter on {r['agreement_c4']:.1%} of",
            "documents (`ours c4` against `C4QualityFilter(min_num_sentences=-1)`; ours drops a text whose every",
            "line is removed, datatrove keeps it empty: counted as agreeing). JSON: `benchmarks/results/bench_clean.json`.",
        ]
    )


if __name__ == "__main__":
    main()
