"""A real near-duplicate corpus and an independent exact-Jaccard ground truth.

Debian's ``debian-handbook`` package ships one book in 26 locales, many only partly translated, so a
page and its translations overlap anywhere from nothing to almost everything: real near duplicates
with a spread of similarities. Mutated copies of English pages (words replaced at a few rates) add
pairs around the 0.8 threshold. Ground truth uses plain Python (``re``, ``unicodedata``, sets): none
of the code under test.
"""

from __future__ import annotations

import html
import random
import re
import unicodedata
from pathlib import Path

import numpy as np

HANDBOOK = Path("/usr/share/doc/debian-handbook/html")
INSTALL_HINT = "run scripts/install_system_deps.sh (it installs debian-handbook and python3.11-doc)"
PAGES = [
    "apt.html",
    "packaging-system.html",
    "basic-configuration.html",
    "unix-services.html",
    "network-infrastructure.html",
    "sect.apt-get.html",
    "sect.package-meta-information.html",
    "sect.manipulating-packages-with-dpkg.html",
    "sect.config-misc.html",
    "sect.syslog.html",
]
_TAG = re.compile(r"<[^>]+>")
_DROP = re.compile(r"<(script|style|head)\b.*?</\1>", re.S | re.I)
_WORD = re.compile(r"\w+")


def html_text(path: Path) -> str:
    raw = path.read_text(encoding="utf-8", errors="replace")
    return html.unescape(_TAG.sub(" ", _DROP.sub(" ", raw)))


def handbook_docs(pages: list[str] = PAGES) -> list[tuple[str, str]]:
    """``(id, text)`` for every locale's copy of ``pages``."""
    if not HANDBOOK.is_dir():
        raise RuntimeError(f"{HANDBOOK} missing: {INSTALL_HINT}")
    docs = []
    for locale in sorted(p.name for p in HANDBOOK.iterdir() if p.is_dir()):
        for page in pages:
            f = HANDBOOK / locale / page
            if f.exists():
                docs.append((f"{locale}/{page}", html_text(f)))
    return docs


def mutate(text: str, rate: float, rng: random.Random, vocabulary: list[str]) -> str:
    """Replace a ``rate`` fraction of the words by random words of the vocabulary."""
    words = text.split()
    for i in range(len(words)):
        if rng.random() < rate:
            words[i] = rng.choice(vocabulary)
    return " ".join(words)


def near_duplicate_corpus(seed: int = 7) -> list[tuple[str, str]]:
    docs = handbook_docs()
    rng = random.Random(seed)
    english = [(i, t) for i, t in docs if i.startswith("en-US/")]
    vocabulary = sorted({w for _, t in english for w in t.split()})
    for doc_id, text in english:
        for rate in (0.005, 0.01, 0.02, 0.03, 0.05):
            docs.append((f"{doc_id}~{rate}", mutate(text, rate, rng, vocabulary)))
    return docs


def shingle_set(text: str, ngram: int = 5) -> set[tuple[str, ...]]:
    """Word n-grams of NFKC + lowercase text, ``\\w+`` tokens; short texts give one shingle."""
    tokens = _WORD.findall(unicodedata.normalize("NFKC", text).lower())
    if not tokens:
        return set()
    if len(tokens) < ngram:
        return {tuple(tokens)}
    return {tuple(tokens[i : i + ngram]) for i in range(len(tokens) - ngram + 1)}


def exact_jaccard_matrix(texts: list[str], ngram: int = 5) -> np.ndarray:
    """All-pairs exact Jaccard: shingles numbered by a dict, intersections as one sparse product."""
    from scipy import sparse

    ids: dict[tuple[str, ...], int] = {}
    rows, cols = [], []
    for i, t in enumerate(texts):
        for s in shingle_set(t, ngram):
            rows.append(i)
            cols.append(ids.setdefault(s, len(ids)))
    x = sparse.csr_matrix((np.ones(len(rows), np.float64), (rows, cols)), shape=(len(texts), max(1, len(ids))))
    inter = (x @ x.T).toarray()
    size = np.asarray(x.sum(axis=1)).ravel()
    union = size[:, None] + size[None, :] - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        jac = np.where(union > 0, inter / union, 0.0)
    np.fill_diagonal(jac, 0.0)
    return jac
