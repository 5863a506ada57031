"""The evaluation set of the reference-compatible presets (``gopher_compat``, ``c4_compat``, ``fineweb_compat``):
real documents from this machine in three classes, split once into a tuning part and a held-out part.

* ``docs_en``: every HTML page of the Python 3.11 documentation and of the Debian Administrator's Handbook
  (en-US), turned into text by the default extractor (Resiliparse, ``core/html_text.py``);
* ``multilang``: the handbook in its 25 other languages, each page cut into pieces of 4 paragraphs,
  a third of them (by a hash of the name);
* ``broad_en``: READMEs, changelogs and NEWS files under ``/usr/share/doc`` (``.gz`` read as text, first
  8,000 characters cut at a line end) and man pages rendered by ``man`` (section 1, 8 and 5).

The split is by a hash of each document's name (``sha1(name) % 2``): 0 is ``tune``, 1 is ``heldout``. The
set is built once into ``benchmarks/data/compat/docs.json`` (ignored by git; rebuild with ``--rebuild``).
"""

from __future__ import annotations

import glob
import gzip
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

DOCS = HERE / "data" / "compat" / "docs.json"
PYDOC = "/usr/share/doc/python3.11/html"
HANDBOOK = "/usr/share/doc/debian-handbook/html"
CLASSES = ("docs_en", "multilang", "broad_en")


def split_of(name: str) -> str:
    return "tune" if hashlib.sha1(name.encode()).digest()[0] % 2 == 0 else "heldout"


def _html_pages(root: str) -> list[tuple[str, str]]:
    from airflow_curation.core.html_text import html_to_text

    out = []
    for path in sorted(glob.glob(os.path.join(root, "**", "*.html"), recursive=True)):
        with open(path, "rb") as f:
            text = html_to_text(f.read())
        if text.strip():
            out.append((path, text))
    return out


def _read_doc_file(path: str, limit: int = 8_000) -> str | None:
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as f:
            raw = f.read(240_000)  # a bounded read; a .gz may be large
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError):
        return None
    if "\x00" in text:
        return None
    return text if len(text) <= limit else text[: text.rfind("\n", 0, limit) + 1 or limit]


def _man_pages(limit: int) -> list[tuple[str, str]]:
    out = []
    env = {**os.environ, "MANWIDTH": "80", "MAN_KEEP_FORMATTING": "0", "LC_ALL": "C.UTF-8"}
    for section in ("1", "8", "5"):
        for path in sorted(glob.glob(f"/usr/share/man/man{section}/*.gz"))[::7]:
            proc = subprocess.run(["man", "-l", path], capture_output=True, env=env, timeout=30, check=False)
            text = re.sub(r".\x08", "", proc.stdout.decode("utf-8", "replace"))  # overstrike bold/underline
            if proc.returncode == 0 and len(text.split()) > 20:
                out.append((path, text))
            if len(out) >= limit:
                return out
    return out


def build() -> list[dict]:
    docs: list[dict] = []
    for path, text in _html_pages(PYDOC) + _html_pages(os.path.join(HANDBOOK, "en-US")):
        docs.append({"name": path, "cls": "docs_en", "text": text})
    for lang in sorted(os.listdir(HANDBOOK)):
        if lang in ("en-US", "Common_Content") or not os.path.isdir(os.path.join(HANDBOOK, lang)):
            continue
        for path, text in _html_pages(os.path.join(HANDBOOK, lang)):
            paras = [p for p in re.split(r"\n\s*\n", text) if p.strip()]
            for k in range(0, len(paras), 4):
                if int(hashlib.sha1(f"{path}#{k}".encode()).hexdigest(), 16) % 3:
                    continue  # a third of the pieces: the set stays small enough for datatrove
                docs.append({"name": f"{path}#{k}", "cls": "multilang", "text": "\n\n".join(paras[k : k + 4])})
    files = sorted(
        set(
            glob.glob("/usr/share/doc/*/README*")
            + glob.glob("/usr/share/doc/*/changelog*")
            + glob.glob("/usr/share/doc/*/NEWS*")
        )
    )
    for path in files:
        text = _read_doc_file(path)
        if text and text.strip():
            docs.append({"name": path, "cls": "broad_en", "text": text})
    for path, text in _man_pages(400):
        docs.append({"name": path, "cls": "broad_en", "text": text})
    for d in docs:
        d["split"] = split_of(d["name"])
    return docs


def load(rebuild: bool = False) -> list[dict]:
    if DOCS.exists() and not rebuild:
        return json.loads(DOCS.read_text())
    docs = build()
    DOCS.parent.mkdir(parents=True, exist_ok=True)
    tmp = DOCS.with_suffix(".tmp")
    tmp.write_text(json.dumps(docs))
    tmp.replace(DOCS)
    return docs


if __name__ == "__main__":
    d = load(rebuild="--rebuild" in sys.argv)
    from collections import Counter

    print(Counter((x["cls"], x["split"]) for x in d), sum(len(x["text"]) for x in d) / 1e6, "M chars")
