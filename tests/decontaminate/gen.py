"""Generated documents and evaluation sets for decontamination (tests, benchmarks/bench_decontaminate.py).

Words are consonant-vowel syllables (a few with accents, capitals, punctuation around them, numbers among
them), so that datatrove's spaCy tokenizer and a whitespace split see the same words after normalisation.
Some documents copy a passage of an evaluation row, restyled (case, punctuation, other numbers, accents
dropped): those are contaminated when the passage has at least ``n`` words; others copy ``n - 1`` words
(near misses, not contaminated).
"""

from __future__ import annotations

import random

CONSONANTS = "bdfgklmprstvz"
VOWELS = "aeiou"
ACCENTED = {"e": "é", "u": "ü", "a": "à", "o": "ô"}


def _word(rng: random.Random) -> str:
    w = "".join(rng.choice(CONSONANTS) + rng.choice(VOWELS) for _ in range(rng.randint(2, 4)))
    if rng.random() < 0.05:
        w = "".join(ACCENTED.get(c, c) if rng.random() < 0.5 else c for c in w)
    if rng.random() < 0.1:
        w = w.capitalize()
    return w


def _token(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.04:
        return str(rng.randint(0, 9999)) + (f".{rng.randint(0, 99)}" if rng.random() < 0.3 else "")
    w = _word(rng)
    if r < 0.12:
        w += rng.choice([",", ".", ";", ":", "!", "?"])
    elif r < 0.14:
        w = f'"{w}"'
    elif r < 0.16:
        w = f"({w})"
    return w


def words(rng: random.Random, k: int) -> list[str]:
    return [_token(rng) for _ in range(k)]


def restyle(rng: random.Random, passage: list[str]) -> str:
    """The same words to datatrove's normalisation: other case, punctuation, numbers and accents."""
    out = []
    for w in passage:
        if any(c.isdigit() for c in w):
            w = str(rng.randint(0, 99))  # every number normalises to 0
        else:
            w = w.upper() if rng.random() < 0.2 else w
            w = w.replace("é", "e") if rng.random() < 0.5 else w
            w = w + rng.choice(["", "", ",", " -", "..."])
        out.append(w)
    return " ".join(out)


def make(seed: int, docs: int, eval_rows: dict[str, int], n: int, doc_words: tuple[int, int] = (40, 300)):
    """(eval sets {benchmark: [text]}, documents [text], expected {doc index: benchmark} of those contaminated
    on purpose). Rows of different benchmarks never share ``n`` words by chance (random syllables)."""
    rng = random.Random(seed)
    evals = {b: [" ".join(words(rng, rng.randint(n + 2, 3 * n))) for _ in range(k)] for b, k in eval_rows.items()}
    texts, expected = [], {}
    for i in range(docs):
        body = words(rng, rng.randint(*doc_words))
        r = rng.random()
        if r < 0.2:
            bench = rng.choice(sorted(evals))
            row = rng.choice(evals[bench]).split()
            k = n if r < 0.15 else n - 1  # a whole n-gram, or a near miss one word short
            start = rng.randint(0, len(row) - k)
            at = rng.randint(0, len(body))
            body = body[:at] + [restyle(rng, row[start : start + k])] + body[at:]
            if k == n:
                expected[i] = bench
        texts.append(" ".join(body))
    return evals, texts, expected
