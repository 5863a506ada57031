"""Signals with datatrove 0.10.1's definitions, for the reference-compatible presets.

``gopher_compat``, ``c4_compat`` and ``fineweb_compat`` (:mod:`airflow_curation.core.filters`) read these
columns (all prefixed ``dt_``) with the reference's thresholds, so that their decisions are datatrove's
``GopherQualityFilter`` + ``GopherRepetitionFilter``, ``C4QualityFilter`` and ``FineWebQualityFilter``
(defaults) on >= 99% of documents of every class of the held-out set (docs/preprocess.md). Where the
definitions differ from the project's own signals (:mod:`airflow_curation.core.signals`):

- words are English words as datatrove splits them (:mod:`airflow_curation.core.compat_words`: punctuation
  marks are words of their own), not whitespace-delimited ones;
- Gopher quality: word count and mean word length over words that are not all punctuation; ``#`` and
  ellipses per word and the share of words with a letter over all words; stop words are the *distinct*
  stop words present, matched exactly (case-sensitive); bullet and ellipsis lines over ``splitlines()``
  (blank lines count), bullets being ``•`` and ``-`` only;
- Gopher repetition: paragraphs split at runs of 2+ newlines of the stripped text, lines at runs of
  newlines (an empty first/last piece counts); the top n-gram is the most frequent, ties to the one seen
  first, its characters counted with the joining spaces; duplicated n-grams are counted greedily (a repeat
  skips its n words) with the words joined without spaces;
- C4: the line rules (``core/line_clean.py``'s ``c4``; ``dt_c4fw_*``: without the terminal-punctuation rule, as
  FineWeb runs the filter) run first, a ``{`` or "lorem ipsum" in a line they keep
  drops the document, and sentences are counted in each kept line (spaCy's sentencizer, restated);
- FineWeb: lines end in one of Unicode's sentence terminals (no quotes, no ``…``), unstripped; duplicated line
  characters over the characters that are not newlines; newlines per word.

:func:`compat_signals` runs the compiled pass (:mod:`airflow_curation.core.compat_kernel`, fed by
:mod:`airflow_curation.core.compat_batch`: each distinct whitespace piece is split into words once per process);
the per-document functions here (:func:`compat_doc`) are the definitions it is tested against. The speed is in
``benchmarks/RESULTS.md`` (*Reference-compatible presets*).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable
from itertools import compress
from operator import itemgetter

import numpy as np
import pyarrow as pa

from airflow_curation.core.compat_names import (  # noqa: F401  (the names are this module's API too)
    C4_FINEWEB_SIGNALS,
    C4_SIGNALS,
    COMPAT_SIGNALS,
    DUP_NGRAMS,
    FINEWEB_SIGNALS,
    GOPHER_QUALITY_SIGNALS,
    GOPHER_REPETITION_SIGNALS,
    TOP_NGRAMS,
)
from airflow_curation.core.compat_words import SENTENCE_TERMINALS, count_sentences, words
from airflow_curation.core.line_clean import CITATION, ELLIPSIS, END_PUNCTUATION, POLICY_SUBSTRINGS

STOP_WORDS = frozenset(("the", "be", "to", "of", "and", "that", "have", "with"))
# What datatrove takes for punctuation when it leaves "symbol words" out of the word count: ASCII punctuation,
# common CJK/typographic marks, C0/C1 controls but tab and newline, and the sentence terminals.
PUNCTUATION = (
    frozenset(
        string.punctuation
        + "—”％１〈、━【「」，】；“《„’∶´．（–？！：～«〉》）。…►»"
        + "".join(chr(c) for c in (*range(0, 9), *range(11, 32), *range(127, 160)))
    )
    | SENTENCE_TERMINALS
)
_PARAGRAPHS = re.compile(r"\n{2,}")
_LINES = re.compile(r"\n+")
_TERMINALS = tuple(SENTENCE_TERMINALS)

_INT = {"dt_n_words", "dt_n_stop_words", "dt_c4_n_sentences", "dt_c4fw_n_sentences"}
_BOOL = {"dt_c4_lorem_ipsum", "dt_c4_curly_bracket", "dt_c4fw_lorem_ipsum", "dt_c4fw_curly_bracket"}


def _frac(a: float, b: float) -> float:
    return a / b if b else 0.0


def _duplicates(items: Iterable[str]) -> tuple[int, int]:
    """(items equal to an earlier one, their characters)."""
    seen: set[str] = set()
    n = chars = 0
    for it in items:
        if it in seen:
            n += 1
            chars += len(it)
        else:
            seen.add(it)
    return n, chars


def gopher_quality(text: str, ws: list[str]) -> dict:
    n = len(ws)
    # per distinct word (a text repeats its words): is it all punctuation, has it a letter
    tally = Counter(ws)
    n_content = content_chars = n_alpha = 0
    for w, k in tally.items():
        if not PUNCTUATION.issuperset(w):
            n_content += k
            content_chars += k * len(w)
        if not w.isalpha() and not any(c.isalpha() for c in w):
            continue
        n_alpha += k
    lines = text.splitlines()
    return {
        "dt_n_words": n_content,
        "dt_mean_word_len": _frac(content_chars, n_content),
        "dt_hash_word_ratio": _frac(text.count("#"), n),
        "dt_ellipsis_word_ratio": _frac(text.count("...") + text.count("…"), n),
        "dt_bullet_line_frac": _frac(sum(ln.lstrip().startswith(("•", "-")) for ln in lines), len(lines)),
        "dt_ellipsis_line_frac": _frac(sum(ln.rstrip().endswith(("...", "…")) for ln in lines), len(lines)),
        "dt_alpha_word_frac": _frac(n_alpha, n),
        "dt_n_stop_words": len(STOP_WORDS.intersection(tally)),
    }


def _ngrams(ws: list[str], n: int) -> list[tuple[str, ...]]:
    return list(zip(*(ws[k:] for k in range(n))))


def _top_ngram_chars(grams: list[tuple[str, ...]], n: int) -> int:
    if not grams:
        return 0
    # Counter keeps first-seen order and max() returns the first maximum: ties go to the n-gram seen first
    best, count = max(Counter(grams).items(), key=itemgetter(1))
    return (sum(map(len, best)) + n - 1) * count


def _greedy_dup_chars(grams: list[tuple[str, ...]], n: int) -> int:
    """Characters of repeated n-grams met left to right, a repeat skipping its n words; an n-gram is its words
    joined without spaces (so two splits of the same characters match, as in datatrove). Only keys seen twice
    or more can repeat, so the walk visits those positions only (the others would only be remembered)."""
    keys = list(map("".join, grams))
    counts = Counter(keys)
    if len(counts) == len(keys):
        return 0
    seen: set[str] = set()
    chars = 0
    resume = 0
    for i in compress(range(len(keys)), map((1).__lt__, map(counts.__getitem__, keys))):
        if i < resume:
            continue
        g = keys[i]
        if g in seen:
            chars += len(g)
            resume = i + n
        else:
            seen.add(g)
    return chars


def gopher_repetition(text: str, ws: list[str]) -> dict:
    size = len(text)
    paras = _PARAGRAPHS.split(text.strip())
    dp, dpc = _duplicates(paras)
    lines = _LINES.split(text)
    dl, dlc = _duplicates(lines)
    out = {
        "dt_dup_para_frac": _frac(dp, len(paras)),
        "dt_dup_para_char_frac": _frac(dpc, size),
        "dt_dup_line_frac": _frac(dl, len(lines)),
        "dt_dup_line_char_frac": _frac(dlc, size),
    }
    for n in TOP_NGRAMS:
        out[f"dt_top_{n}gram_char_frac"] = _frac(_top_ngram_chars(_ngrams(ws, n), n), size)
    for n in DUP_NGRAMS:
        out[f"dt_dup_{n}gram_char_frac"] = _frac(_greedy_dup_chars(_ngrams(ws, n), n), size)
    return out


def c4(text: str, min_words: int = 3, max_word_length: int = 1000, terminal_punct: bool = True) -> dict:
    """The C4 filter's document outcome: which line, if any, drops the page, and the kept lines' sentences.

    :param terminal_punct: datatrove's ``filter_no_terminal_punct``: remove a line that does not end in
        terminal punctuation (its default); ``False`` is FineWeb's setting (the ``dt_c4fw_*`` columns).
    """
    sentences = 0
    lorem = curly = False
    for line in text.splitlines():
        line = line.strip()
        parts = line.split()
        if any(len(w) > max_word_length for w in parts):
            continue
        if "[" in line:
            line = CITATION.sub("", line)
        if terminal_punct and (not line.endswith(END_PUNCTUATION) or line.endswith(ELLIPSIS)):
            continue
        if len(parts) < min_words:
            continue
        low = line.lower()
        if "lorem ipsum" in low:
            lorem = True
            break
        if "javascript" in low:
            continue
        if "{" in line:
            curly = True
            break
        if any(p in low for p in POLICY_SUBSTRINGS):
            continue
        sentences += count_sentences(line)
    names = C4_SIGNALS if terminal_punct else C4_FINEWEB_SIGNALS
    return dict(zip(names, (lorem, curly, sentences)))


def fineweb(text: str, ws: list[str]) -> dict:
    lines = [ln for ln in text.split("\n") if ln.strip()]
    _, dup_chars = _duplicates(lines)
    return {
        "dt_line_punct_frac": _frac(sum(ln.endswith(_TERMINALS) for ln in lines), len(lines)),
        "dt_short_line_frac": _frac(sum(len(ln) <= 30 for ln in lines), len(lines)),
        "dt_char_dup_frac": _frac(dup_chars, len(text) - text.count("\n")),
        "dt_newline_word_ratio": _frac(text.count("\n"), len(ws)),
    }


def compat_doc(text: str, names: frozenset[str] | set[str] = frozenset(COMPAT_SIGNALS)) -> dict:
    """The ``dt_*`` signals of one text: only the groups that ``names`` asks for are computed."""
    out: dict = {}
    need_words = not names.isdisjoint(GOPHER_QUALITY_SIGNALS + GOPHER_REPETITION_SIGNALS + FINEWEB_SIGNALS)
    ws = words(text) if need_words else []
    if not names.isdisjoint(GOPHER_QUALITY_SIGNALS):
        out.update(gopher_quality(text, ws))
    if not names.isdisjoint(GOPHER_REPETITION_SIGNALS):
        out.update(gopher_repetition(text, ws))
    if not names.isdisjoint(C4_SIGNALS):
        out.update(c4(text))
    if not names.isdisjoint(C4_FINEWEB_SIGNALS):
        out.update(c4(text, terminal_punct=False))
    if not names.isdisjoint(FINEWEB_SIGNALS):
        out.update(fineweb(text, ws))
    return out


def _type(name: str) -> pa.DataType:
    return pa.int64() if name in _INT else pa.bool_() if name in _BOOL else pa.float64()


def compat_signals(
    texts: pa.Array | pa.ChunkedArray | Iterable[str], names: Iterable[str] = COMPAT_SIGNALS
) -> pa.Table:
    """The asked ``dt_*`` columns (every group a name belongs to is computed; only the asked ones returned).

    :param texts: the documents (nulls read as empty text).
    :param names: signal names from :data:`COMPAT_SIGNALS`.
    """
    wanted = [n for n in COMPAT_SIGNALS if n in set(names)]
    unknown = set(names) - set(COMPAT_SIGNALS)
    if unknown:
        raise ValueError(f"unknown compat signals {sorted(unknown)}; known: {', '.join(COMPAT_SIGNALS)}")
    values = texts.to_pylist() if isinstance(texts, (pa.Array, pa.ChunkedArray)) else list(texts)
    values = [t or "" for t in values]
    got = _kernel_signals(values, frozenset(wanted))
    return pa.table({n: pa.array(got[n], _type(n)) for n in wanted})


def _ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a / b per row, 0 where b is 0 (:func:`_frac`)."""
    return np.divide(a, b, out=np.zeros(len(a)), where=b != 0)


def _kernel_signals(values: list[str], names: frozenset[str]) -> dict[str, np.ndarray]:
    """The ``dt_*`` columns of the groups ``names`` touches, from the compiled pass (what it leaves to
    Python, the C4 group of a text with a citation mark, is recomputed here by :func:`c4`)."""
    from airflow_curation.core.compat_batch import kernel_rows
    from airflow_curation.core.compat_kernel import COL

    groups = (
        not names.isdisjoint(GOPHER_QUALITY_SIGNALS),
        not names.isdisjoint(GOPHER_REPETITION_SIGNALS),
        not names.isdisjoint(C4_SIGNALS + C4_FINEWEB_SIGNALS),
        not names.isdisjoint(FINEWEB_SIGNALS),
    )
    rows = kernel_rows(values, groups)

    def col(name: str) -> np.ndarray:
        return rows[:, COL[name]]

    out: dict[str, np.ndarray] = {}
    n = col("n_tokens")
    if groups[0]:
        out["dt_n_words"] = col("dt_n_words")
        out["dt_mean_word_len"] = _ratio(col("content_chars"), col("dt_n_words"))
        out["dt_hash_word_ratio"] = _ratio(col("hashes"), n)
        out["dt_ellipsis_word_ratio"] = _ratio(col("ellipses"), n)
        out["dt_bullet_line_frac"] = _ratio(col("bullet_lines"), col("n_lines"))
        out["dt_ellipsis_line_frac"] = _ratio(col("ellipsis_lines"), col("n_lines"))
        out["dt_alpha_word_frac"] = _ratio(col("n_alpha"), n)
        out["dt_n_stop_words"] = col("dt_n_stop_words")
    if groups[1]:
        for name in GOPHER_REPETITION_SIGNALS:
            out[name] = col(name)
    if groups[2]:
        for names_, prefix in ((C4_SIGNALS, "c4"), (C4_FINEWEB_SIGNALS, "c4nt")):
            for name, kcol in zip(names_, ("lorem", "curly", "sentences")):
                out[name] = col(f"{prefix}_{kcol}").copy()
        for i in np.flatnonzero(col("c4_fallback")):
            for value in (c4(values[i]), c4(values[i], terminal_punct=False)):
                for name, v in value.items():
                    out[name][i] = v
    if groups[3]:
        out["dt_line_punct_frac"] = _ratio(col("fw_punct"), col("fw_lines"))
        out["dt_short_line_frac"] = _ratio(col("fw_short"), col("fw_lines"))
        out["dt_char_dup_frac"] = _ratio(col("fw_dup_chars"), col("n_chars") - col("newlines"))
        out["dt_newline_word_ratio"] = _ratio(col("newlines"), n)
    return out
