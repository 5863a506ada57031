"""Checks the "FineWeb reads the extracted text" cause of ``bench_web_recipe.py`` page by page, in the oracle venv.

    .venv-oracles/bin/python -P benchmarks/web_recipe_fineweb_check.py [VARIANT]     # default: compat_fw

For every page where ``VARIANT`` and datatrove's recipe disagree (MinHash copies left out), runs datatrove
0.10.1's own filters on *our* extracted text (``benchmarks/data/web_recipe/decisions.json``, written by the
last ``bench_web_recipe.py`` run): ``FineWebQualityFilter`` on the text as it is, and on what
``C4QualityFilter(filter_no_terminal_punct=False)`` leaves of it (FineWeb's recipe order), and
``GopherQualityFilter``. A page of that cause is one that datatrove's FineWeb filter decides as ours on the
extracted text and as datatrove's recipe on the C4-cleaned text. Prints one JSON line per page.
"""

import json
import sys
from pathlib import Path

from datatrove.data import Document
from datatrove.pipeline.filters import C4QualityFilter, FineWebQualityFilter, GopherQualityFilter

DECISIONS = Path(__file__).resolve().parent / "data" / "web_recipe" / "decisions.json"


def main() -> None:
    variant = sys.argv[1] if len(sys.argv) > 1 else "compat_fw"
    d = json.loads(DECISIONS.read_text())
    ours, theirs = d["ours_by_variant"][variant], d["datatrove"]
    fineweb = FineWebQualityFilter()
    for url, a in sorted(ours["decisions"].items()):
        b = theirs["decisions"].get(url, "no_text_extracted")
        if (a == "kept") == (b == "kept") or a == "duplicate" or b == "MinhashDedup":
            continue
        text = ours["texts"][url]
        doc = Document(text=text, id="c4")
        c4 = C4QualityFilter(filter_no_terminal_punct=False).filter(doc)  # removes lines from doc.text
        row = {
            "url": url,
            "ours": a,
            "datatrove": b,
            "fineweb_on_our_text": str(fineweb.filter(Document(text=text, id="raw"))),
            "fineweb_on_c4_cleaned_text": str(fineweb.filter(doc)) if c4 is True else f"C4 dropped it: {c4}",
            "gopher_quality_on_our_text": str(GopherQualityFilter().filter(Document(text=text, id="g"))),
        }
        print(json.dumps(row))


if __name__ == "__main__":
    main()
