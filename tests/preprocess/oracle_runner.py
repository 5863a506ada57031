"""Runs the oracles in their own venv (see scripts/setup_oracles.sh): reads a JSON list of documents,
prints a JSON list of results. Not imported by the tests: executed by the oracle venv's Python.

usage: python oracle_runner.py datatrove|datatrove_fineweb|pygount|dolma|spacy_classes|spacy_specials DOCS.json
"""

import json
import sys


def datatrove(docs):
    from datatrove.data import Document
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )

    filters = {
        "gopher_quality": GopherQualityFilter(),
        # without the alpha-word rule, whose value depends on the word tokenizer (spaCy here)
        "gopher_quality_no_alpha": GopherQualityFilter(max_non_alpha_words_ratio=None),
        "gopher_repetition": GopherRepetitionFilter(),
        "fineweb": FineWebQualityFilter(),
        "c4": C4QualityFilter(),  # its defaults: line removal, then at least five sentences
        "c4_fineweb": C4QualityFilter(filter_no_terminal_punct=False),  # as FineWeb's recipe runs it
    }
    from datatrove.utils.word_tokenizers import load_word_tokenizer

    tokenizer = load_word_tokenizer("eng")
    out = []
    for i, d in enumerate(docs):
        row = {}
        for name, f in filters.items():
            r = f.filter(Document(text=d["text"], id=str(i)))
            keep, reason = (r, None) if isinstance(r, bool) else (r[0], r[1])
            row[name] = {"keep": bool(keep), "reason": reason}
        # datatrove's own English word tokens (spaCy), so the tests can separate tokenizer from definition
        row["words"] = tokenizer.word_tokenize(d["text"])
        out.append(row)
    return out


def datatrove_fineweb(docs):
    """datatrove's FineWeb recipe filters in its order (examples/fineweb.py, without the language filter): each
    reads the text the filter before it left; C4 rewrites it. Per document: kept, the first ``Filter:reason``
    and the text after the chain."""
    from datatrove.data import Document
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )

    chain = [
        GopherRepetitionFilter(),
        GopherQualityFilter(),
        C4QualityFilter(filter_no_terminal_punct=False),
        FineWebQualityFilter(),
    ]
    out = []
    for i, d in enumerate(docs):
        doc = Document(text=d["text"], id=str(i))
        row = {"keep": True, "reason": None}
        for f in chain:
            r = f.filter(doc)
            keep, reason = (r, None) if isinstance(r, bool) else (r[0], r[1])
            if not keep:
                row = {"keep": False, "reason": f"{type(f).__name__}:{reason}"}
                break
        row["text"] = doc.text
        out.append(row)
    return out


def pygount(docs):
    import os
    import tempfile

    from pygount import SourceAnalysis

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, d in enumerate(docs):
            path = os.path.join(tmp, f"doc{i}{d.get('ext', '.py')}")
            with open(path, "w", encoding="utf-8") as f:
                f.write(d["text"])
            a = SourceAnalysis.from_file(path, "oracle", encoding="utf-8")
            out.append(
                {
                    "code": a.code_count,
                    "documentation": a.documentation_count,
                    "empty": a.empty_count,
                    "string": a.string_count,
                    "state": str(a.state),
                }
            )
    return out


def dolma(docs):
    from dolma.core.data_types import Document
    from dolma.taggers.code.code_taggers import CodeRedPajamaTaggers

    tagger = CodeRedPajamaTaggers()
    out = []
    for i, d in enumerate(docs):
        result = tagger.predict(Document(source="oracle", version="0", id=str(i), text=d["text"]))
        out.append({s.type: s.score for s in result.spans})
    return out


def spacy_classes(docs):
    """spaCy's character classes as code point ranges: its letters (ALPHA, ALPHA_LOWER, ALPHA_UPPER), its other
    symbols (ICONS) and its one-character currency signs (LIST_CURRENCY); ``docs`` is not read."""
    import re

    from spacy.lang.char_classes import ALPHA, ALPHA_LOWER, ALPHA_UPPER, ICONS, LIST_CURRENCY

    currency = "".join(re.escape(c.replace("\\", "")) for c in LIST_CURRENCY if len(c.replace("\\", "")) == 1)
    out = {}
    classes = (
        ("alpha", ALPHA),
        ("lower", ALPHA_LOWER),
        ("upper", ALPHA_UPPER),
        ("icons", ICONS),
        ("currency", currency),
    )
    for name, cls in classes:
        pattern = re.compile(f"[{cls}]")
        ranges, start = [], None
        for c in range(0x110001):
            inside = c < 0x110000 and pattern.match(chr(c)) is not None
            if inside and start is None:
                start = c
            elif not inside and start is not None:
                ranges.append([start, c - 1])
                start = None
        out[name] = ranges
    return out


def spacy_specials(docs):
    """The special cases of spaCy's English tokenizer (datatrove's), each string with its tokens, and the tokens
    spaCy gives each of ``docs`` (strings, one piece each); strings with whitespace left out."""
    import spacy
    from spacy.attrs import ORTH

    nlp = spacy.blank("en")
    table = {k: [t[ORTH] for t in v] for k, v in nlp.tokenizer.rules.items() if not any(c.isspace() for c in k)}
    return {"table": table, "tokens": [[t.text for t in nlp(d)] for d in docs]}


if __name__ == "__main__":
    which, path = sys.argv[1], sys.argv[2]
    with open(path, encoding="utf-8") as f:
        documents = json.load(f)
    runners = {
        "datatrove": datatrove,
        "datatrove_fineweb": datatrove_fineweb,
        "pygount": pygount,
        "dolma": dolma,
        "spacy_classes": spacy_classes,
        "spacy_specials": spacy_specials,
    }
    json.dump(runners[which](documents), sys.stdout)
