"""datatrove 0.10.1's four filters on a JSON list of texts, run by the oracle venv's Python
(``.venv-oracles``, scripts/setup_oracles.sh); not imported by the project.

usage: .venv-oracles/bin/python benchmarks/compat_oracle.py TEXTS.json OUT.json [--words]

Writes per text ``{filter: [keep, reason]}`` for ``gopher_quality``, ``gopher_repetition``, ``c4`` (its
defaults: line removal, five sentences), ``c4_fineweb`` (``filter_no_terminal_punct=False``) and ``fineweb``; with ``--words`` also datatrove's English words
(spaCy) per text, for tuning the word splitter. Prints the CPU seconds of the filter loop.
"""

import json
import sys
import time

from datatrove.data import Document
from datatrove.pipeline.filters import (
    C4QualityFilter,
    FineWebQualityFilter,
    GopherQualityFilter,
    GopherRepetitionFilter,
)

FILTERS = {
    "gopher_quality": GopherQualityFilter,
    "gopher_repetition": GopherRepetitionFilter,
    "c4": C4QualityFilter,
    "c4_fineweb": lambda: C4QualityFilter(filter_no_terminal_punct=False),  # FineWeb's setting
    "fineweb": FineWebQualityFilter,
}


def main() -> None:
    texts = json.load(open(sys.argv[1], encoding="utf-8"))
    filters = {name: cls() for name, cls in FILTERS.items()}
    out = []
    t = time.process_time()
    for i, text in enumerate(texts):
        row = {}
        for name, f in filters.items():
            r = f.filter(Document(text=text, id=str(i)))
            keep, reason = (r, None) if isinstance(r, bool) else r
            row[name] = [bool(keep), reason]
        out.append(row)
    seconds = time.process_time() - t
    if "--words" in sys.argv:
        from datatrove.utils.word_tokenizers import load_word_tokenizer

        tok = load_word_tokenizer("eng")
        for row, text in zip(out, texts):
            row["words"] = tok.word_tokenize(text)
    json.dump({"seconds": seconds, "results": out}, open(sys.argv[2], "w", encoding="utf-8"))
    print(json.dumps({"seconds": seconds, "documents": len(texts)}))


if __name__ == "__main__":
    main()
