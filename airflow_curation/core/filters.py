"""Keep/drop rules as configuration over signal columns; never a rewrite of the shard.

A rule names a signal and bounds: a document fails it when the value is below ``min`` or above
``max`` (the published thresholds read "fewer than 50 words" -> ``min=50``, "more than 10%" ->
``max=0.1``), or, for a label signal such as ``lang``, when the value is not ``in`` a list (a null
label fails: ``{"name": "lang", "signal": "lang", "in": ["en", "de"]}``). Rules run in their listed
order; ``drop_reason`` is the name of the first failing rule, so a decision never depends on set or
dict iteration order.

Presets (thresholds as published; see docs/preprocess.md for how each maps to its source):

- ``gopher``: Rae et al. 2021 (MassiveText) quality + repetition filters.
- ``c4``: Raffel et al. 2020, the document-level parts (curly bracket, "lorem ipsum", too few
  sentences). C4's line removal is a rewrite and stays out.
- ``fineweb``: Penedo et al. 2024 FineWeb's own filters (terminal-punctuation lines, duplicated line
  characters, short lines) plus its newline-per-word rule.
- ``code``: the StarCoder / RedPajama code heuristics (line lengths, alphanumeric fraction, comments)
  and "parses" for languages with a parser.
- ``structure``: navigation and index pages (one short item per line, lines sharing one template),
  which pass Gopher's word, stop-word and symbol rules. Thresholds measured on real index pages
  against real prose (docs/preprocess.md); part of :data:`DEFAULT_PRESET`.
- ``gopher_compat``, ``c4_compat``, ``fineweb_compat``: the reference's decisions, as datatrove 0.10.1's
  ``GopherQualityFilter`` + ``GopherRepetitionFilter``, ``C4QualityFilter`` (line removal included) and
  ``FineWebQualityFilter`` make them at their defaults, over datatrove's own definitions
  (:mod:`airflow_curation.core.compat`); drop reasons are datatrove's. ``gopher``, ``c4`` and ``fineweb`` are
  the project's variants, which differ on purpose (:data:`COMPAT_OF`; selecting one logs how).
  ``c4_compat_fineweb`` is ``C4QualityFilter(filter_no_terminal_punct=False)``, the setting FineWeb runs.
- ``quality``: the classifier's threshold on ``quality_score`` (the ``quality`` stage's column, P(good)
  from a model trained with ``curation quality-train``; FineWeb-Edu keeps documents above its
  classifier's threshold the same way). Only the quality stage computes that column.

Every heuristic preset starts with ``empty`` (no non-space character), so empty text is a counted drop.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_curation.core.arrays import from_numpy, strings, to_numpy
from airflow_curation.core.schema import DROP_REASON, KEEP

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Rule:
    """:param name: the ``drop_reason`` written when this rule fails.
    :param signal: the column it reads.
    :param min: fail when the value is below this.
    :param max: fail when the value is above this.
    :param values: fail when the value is not one of these (``"in"`` in a rule's dict), nulls too.
    """

    name: str
    signal: str
    min: float | None = None
    max: float | None = None
    values: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        for bound in ("min", "max"):
            value = getattr(self, bound)
            # a string ("0.5" in a hand-written JSON) or a bool would fail every batch when compared
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise ValueError(f"rule {self.name!r}: {bound} must be a number, got {value!r}")
        if self.values is not None:
            if isinstance(self.values, str) or not all(isinstance(v, str) for v in self.values):
                raise ValueError(f"rule {self.name!r}: 'in' takes a list of strings, got {self.values!r}")
            object.__setattr__(self, "values", tuple(self.values))
            if self.min is not None or self.max is not None:
                raise ValueError(f"rule {self.name!r}: give 'in' or min/max, not both")
        elif self.min is None and self.max is None:
            raise ValueError(f"rule {self.name!r}: give min, max or both (or 'in' for a label signal)")
        elif self.min is not None and self.max is not None and self.min > self.max:
            # no value lies between them: every document would be dropped
            raise ValueError(f"rule {self.name!r}: min {self.min} is above max {self.max}")
        if not self.name or not isinstance(self.name, str):
            raise ValueError(f"rule needs a name, got {self.name!r}")

    def fails(self, values: np.ndarray) -> np.ndarray:
        return self.fails_float(values.astype(np.float64))

    def fails_float(self, v: np.ndarray) -> np.ndarray:
        """:meth:`fails` for float64 values (no copy made to get them)."""
        if self.min is not None and self.max is not None:
            return (v < self.min) | (v > self.max)
        return v < self.min if self.min is not None else v > self.max

    @classmethod
    def from_dict(cls, d: dict) -> Rule:
        d = dict(d)
        if "in" in d:
            d["values"] = d.pop("in")
        unknown = set(d) - {"name", "signal", "min", "max", "values"}
        if unknown:
            raise ValueError(f"rule {d.get('name')!r}: unknown keys {sorted(unknown)}")
        return cls(**d)


EMPTY = Rule("empty", "n_words", min=1)

PRESETS: dict[str, tuple[Rule, ...]] = {
    "gopher": (
        EMPTY,
        # quality
        Rule("gopher_word_count", "n_words", min=50, max=100_000),
        Rule("gopher_mean_word_len", "mean_word_len", min=3, max=10),
        Rule("gopher_hash_ratio", "hash_word_ratio", max=0.1),
        Rule("gopher_ellipsis_ratio", "ellipsis_word_ratio", max=0.1),
        Rule("gopher_bullet_lines", "bullet_line_frac", max=0.9),
        Rule("gopher_ellipsis_lines", "ellipsis_line_frac", max=0.3),
        Rule("gopher_alpha_words", "alpha_word_frac", min=0.8),
        Rule("gopher_stop_words", "n_stop_words", min=2),
        # repetition
        Rule("gopher_dup_para_frac", "dup_para_frac", max=0.3),
        Rule("gopher_dup_para_chars", "dup_para_char_frac", max=0.2),
        Rule("gopher_dup_line_frac", "dup_line_frac", max=0.3),
        Rule("gopher_dup_line_chars", "dup_line_char_frac", max=0.2),
        Rule("gopher_top_2gram", "top_2gram_char_frac", max=0.20),
        Rule("gopher_top_3gram", "top_3gram_char_frac", max=0.18),
        Rule("gopher_top_4gram", "top_4gram_char_frac", max=0.16),
        Rule("gopher_dup_5gram", "dup_5gram_char_frac", max=0.15),
        Rule("gopher_dup_6gram", "dup_6gram_char_frac", max=0.14),
        Rule("gopher_dup_7gram", "dup_7gram_char_frac", max=0.13),
        Rule("gopher_dup_8gram", "dup_8gram_char_frac", max=0.12),
        Rule("gopher_dup_9gram", "dup_9gram_char_frac", max=0.11),
        Rule("gopher_dup_10gram", "dup_10gram_char_frac", max=0.10),
    ),
    "c4": (
        EMPTY,
        Rule("c4_curly_bracket", "has_curly_bracket", max=0),
        Rule("c4_lorem_ipsum", "has_lorem_ipsum", max=0),
        Rule("c4_too_few_sentences", "n_sentences", min=5),
    ),
    "fineweb": (
        EMPTY,
        Rule("fineweb_line_punct", "terminal_punct_line_frac", min=0.12),
        Rule("fineweb_char_dup", "dup_line_char_frac", max=0.01),
        Rule("fineweb_short_lines", "short_line_frac", max=0.67),
        Rule("fineweb_newline_ratio", "newline_word_ratio", max=0.3),
    ),
    "structure": (
        EMPTY,
        Rule("structure_min_words", "n_words", min=20),
        Rule("structure_words_per_line", "words_per_line", min=3.75),
        Rule("structure_short_items", "short_item_char_frac", max=0.45),
        Rule("structure_line_templates", "template_dup_line_frac", max=0.8),
        Rule("structure_list_lines", "list_line_frac", max=0.8),
    ),
    "code": (
        EMPTY,
        Rule("code_max_line_len", "max_line_len", max=1000),
        Rule("code_mean_line_len", "mean_line_len", max=100),
        Rule("code_alnum_frac", "alnum_frac", min=0.25),
        Rule("code_comment_frac", "comment_line_frac", max=0.8),
        Rule("code_syntax_error", "syntax_ok", min=1),
    ),
    "quality": (Rule("quality_classifier", "quality_score", min=0.5),),
    # Reference-compatible presets: datatrove 0.10.1's filters at their defaults, over its definitions
    # (core/compat.py, dt_* signals); each rule is named after the reason datatrove gives.
    "gopher_compat": (
        EMPTY,
        Rule("gopher_short_doc", "dt_n_words", min=50),
        Rule("gopher_long_doc", "dt_n_words", max=100_000),
        Rule("gopher_below_avg_threshold", "dt_mean_word_len", min=3),
        Rule("gopher_above_avg_threshold", "dt_mean_word_len", max=10),
        Rule("gopher_too_many_hashes", "dt_hash_word_ratio", max=0.1),
        Rule("gopher_too_many_ellipsis", "dt_ellipsis_word_ratio", max=0.1),
        Rule("gopher_too_many_bullets", "dt_bullet_line_frac", max=0.9),
        Rule("gopher_too_many_end_ellipsis", "dt_ellipsis_line_frac", max=0.3),
        Rule("gopher_below_alpha_threshold", "dt_alpha_word_frac", min=0.8),
        Rule("gopher_enough_stop_words", "dt_n_stop_words", min=2),
        Rule("dup_para_frac", "dt_dup_para_frac", max=0.3),
        Rule("dup_para_char_frac", "dt_dup_para_char_frac", max=0.2),
        Rule("dup_line_frac", "dt_dup_line_frac", max=0.3),
        Rule("dup_line_char_frac", "dt_dup_line_char_frac", max=0.2),
        Rule("top_2_gram", "dt_top_2gram_char_frac", max=0.20),
        Rule("top_3_gram", "dt_top_3gram_char_frac", max=0.18),
        Rule("top_4_gram", "dt_top_4gram_char_frac", max=0.16),
        Rule("duplicated_5_n_grams", "dt_dup_5gram_char_frac", max=0.15),
        Rule("duplicated_6_n_grams", "dt_dup_6gram_char_frac", max=0.14),
        Rule("duplicated_7_n_grams", "dt_dup_7gram_char_frac", max=0.13),
        Rule("duplicated_8_n_grams", "dt_dup_8gram_char_frac", max=0.12),
        Rule("duplicated_9_n_grams", "dt_dup_9gram_char_frac", max=0.11),
        Rule("duplicated_10_n_grams", "dt_dup_10gram_char_frac", max=0.10),
    ),
    "c4_compat": (
        EMPTY,
        Rule("lorem_ipsum", "dt_c4_lorem_ipsum", max=0),
        Rule("curly_bracket", "dt_c4_curly_bracket", max=0),
        Rule("too_few_sentences", "dt_c4_n_sentences", min=5),
    ),
    # C4QualityFilter(filter_no_terminal_punct=False), as FineWeb's recipe runs it (datatrove's
    # examples/fineweb.py): a line without terminal punctuation is kept, so it counts sentences and a "{" in it
    # drops the page
    "c4_compat_fineweb": (
        EMPTY,
        Rule("lorem_ipsum", "dt_c4fw_lorem_ipsum", max=0),
        Rule("curly_bracket", "dt_c4fw_curly_bracket", max=0),
        Rule("too_few_sentences", "dt_c4fw_n_sentences", min=5),
    ),
    "fineweb_compat": (
        EMPTY,
        Rule("line_punct_ratio", "dt_line_punct_frac", min=0.12),
        Rule("short_line_ratio", "dt_short_line_frac", max=0.67),
        Rule("char_dup_ratio", "dt_char_dup_frac", max=0.01),
        Rule("list_ratio", "dt_newline_word_ratio", max=0.3),
    ),
}
# The presets named after a reference whose own definitions differ from it on purpose (whitespace words,
# every word under a repeat counted once, no line removal in the document rules...), and the preset that
# reproduces the reference: docs/preprocess.md, "Reference-compatible presets", has the measured agreement.
COMPAT_OF = {"gopher": "gopher_compat", "c4": "c4_compat", "fineweb": "fineweb_compat"}


# The text a preset reads when preprocess cleans lines (``line_rules``): the one its reference reads at its
# position in the reference's pipeline. datatrove's recipes run LanguageFilter -> GopherRepetitionFilter ->
# GopherQualityFilter -> C4QualityFilter (which removes lines and rewrites the text) -> FineWebQualityFilter:
# Gopher and C4 read the extracted text (C4 *is* the line cleaning, so it reads the text before it), FineWeb what
# C4 left. The project's presets read the cleaned text (the point of cleaning first). Without line rules there
# is one text. docs/preprocess.md, "Which text a preset reads".
EXTRACTED = "extracted"
CLEANED = "cleaned"
PRESET_TEXT: dict[str, str] = {
    "gopher_compat": EXTRACTED,
    "c4_compat": EXTRACTED,
    "c4_compat_fineweb": EXTRACTED,
    "fineweb_compat": CLEANED,
}
# Presets that stand for a reference's pipeline: selecting one makes language ID read the extracted text too
# (every datatrove recipe runs its LanguageFilter first, before any line is removed).
REFERENCE_PRESETS = frozenset(PRESET_TEXT)


def preset_names(preset: str | Sequence[str] | None) -> list[str]:
    """The preset names of a ``preset`` setting (``"gopher,c4"``, a list, ``None`` or ``"none"``)."""
    if isinstance(preset, str):
        return [p.strip() for p in preset.split(",") if p.strip() and p.strip() != "none"]
    return list(preset or [])


def extracted_signals(preset: str | Sequence[str] | None) -> frozenset[str]:
    """The signals the selected presets read from the extracted text (before the line rules), per
    :data:`PRESET_TEXT`; ``empty``'s ``n_words``, which every preset shares, stays on the cleaned text."""
    names = preset_names(preset)
    out = {r.signal for n in names if PRESET_TEXT.get(n) == EXTRACTED for r in PRESETS.get(n, ()) if r != EMPTY}
    cleaned = {r.signal for n in names if PRESET_TEXT.get(n, CLEANED) == CLEANED for r in PRESETS.get(n, ())}
    both = out & cleaned
    if both:  # no two presets share a signal today (a test holds this); one column cannot be on both texts
        raise ValueError(f"signals {sorted(both)} are read from the extracted text by one preset, cleaned by another")
    return frozenset(out)


def is_reference_recipe(preset: str | Sequence[str] | None) -> bool:
    """Whether the selection holds a preset that stands for a reference's pipeline (:data:`REFERENCE_PRESETS`)."""
    return not REFERENCE_PRESETS.isdisjoint(preset_names(preset))


# What the stage runs unless told otherwise: Gopher's rules, then the structure rules (which cost ~1% of
# prose and catch the index pages Gopher keeps; docs/preprocess.md).
DEFAULT_PRESET = "gopher,structure"


_TOLD_VARIANT: set[str] = set()


def resolve_rules(preset: str | Sequence[str] | None = DEFAULT_PRESET, rules: Iterable[dict | Rule] = ()) -> list[Rule]:
    """Rules of one or more presets (``"gopher,c4"`` or a list), then the custom ones, without repeats.

    :param preset: preset name(s); ``None`` or ``"none"`` for custom rules only.
    :param rules: extra rules, as :class:`Rule` or dicts ``{name, signal, min, max}``.
    """
    names = preset_names(preset)
    out: list[Rule] = []
    seen: set[str] = set()
    for name in names:
        if name not in PRESETS:
            raise ValueError(f"unknown filter preset {name!r}; known: {sorted(PRESETS)}")
        if name in COMPAT_OF and name not in _TOLD_VARIANT:  # once a process, not once a stage object
            _TOLD_VARIANT.add(name)
            log.info(
                "preset %r is the project's variant of the reference (its own word and repetition definitions, "
                "docs/preprocess.md); %r reproduces datatrove 0.10.1's decisions",
                name,
                COMPAT_OF[name],
            )
        for r in PRESETS[name]:
            if r.name not in seen:
                out.append(r)
                seen.add(r.name)
    for r in rules:
        r = r if isinstance(r, Rule) else Rule.from_dict(r)
        if r.name in seen:
            raise ValueError(f"rule name {r.name!r} used twice")
        out.append(r)
        seen.add(r.name)
    return out


def needed_signals(rules: Iterable[Rule]) -> set[str]:
    return {r.signal for r in rules}


def check_rule_signals(rules: Iterable[Rule], computed: Sequence[str], hints: dict[str, str] | None = None) -> None:
    """Refuse, before any document is read, a rule on a signal that is not ``computed``: each batch would fail
    on it. The message names the closest signals, or ``hints[signal]`` (how to turn on one that is off).

    :param rules: the rules to check.
    :param computed: the signal columns the run computes.
    :param hints: for a known signal the run does not compute, what turns it on.
    """
    have = set(computed)
    for rule in rules:
        if rule.signal in have:
            continue
        hint = (hints or {}).get(rule.signal)
        if hint is None:
            close = difflib.get_close_matches(rule.signal, sorted(have), n=3, cutoff=0.6)
            hint = f"did you mean {' or '.join(map(repr, close))}?" if close else f"it computes {', '.join(computed)}"
        raise ValueError(f"rule {rule.name!r} reads signal {rule.signal!r}, which this run does not compute: {hint}")


def apply_rules(signals: pa.Table, rules: Sequence[Rule]) -> pa.Table:
    """``keep`` (bool) and ``drop_reason`` (null when kept) for each row of ``signals``."""
    n = signals.num_rows
    reason = np.full(n, -1, dtype=np.int32)
    have = signals.column_names
    for rule in rules:
        if rule.signal not in have:
            raise ValueError(f"rule {rule.name!r} reads signal {rule.signal!r}, which was not computed (have {have})")
    # Last rule first, each writing its index where it fails: what is left is the first failing rule's, with one
    # numpy pass per rule (a batch runs ~30 rules: the per-rule calls were ~2 ms of every batch).
    for k in range(len(rules) - 1, -1, -1):
        rule = rules[k]
        col = signals.column(rule.signal)
        if rule.values is not None:  # a label rule: not in the list (or null) fails
            failed = ~np.asarray(pc.fill_null(pc.is_in(col, pa.array(rule.values, col.type)), False))
        else:
            failed = _fails(rule, col, n)
        reason[failed] = k
    keep = reason < 0
    names = strings([r.name for r in rules])
    indices = from_numpy(reason, pa.int32(), mask=keep)
    drop_reason = names.take(indices) if len(rules) else pa.nulls(n, pa.string())
    return pa.table({KEEP: from_numpy(keep), DROP_REASON: drop_reason})


def _fails(rule: Rule, col: pa.ChunkedArray, n: int) -> np.ndarray:
    """Where a min/max rule fails on ``col`` (a null never fails)."""
    # numbers without nulls read from their buffers (to_numpy would import pandas in the worker)
    kind = pa.types.is_integer(col.type) or pa.types.is_floating(col.type) or pa.types.is_boolean(col.type)
    if col.null_count == 0 and kind:
        values = to_numpy(col)
        if values.dtype != np.float64:
            values = values.astype(np.float64)
        return rule.fails_float(values)
    values = col.to_numpy(zero_copy_only=False)
    if values.dtype == object:  # nulls in an optional signal (e.g. syntax_ok for prose): never fail
        mask = np.array([v is not None for v in values])
        failed = np.zeros(n, dtype=bool)
        failed[mask] = rule.fails(values[mask].astype(np.float64))
        return failed
    failed = rule.fails(values)
    if col.null_count:
        failed &= ~np.asarray(col.is_null().to_numpy(zero_copy_only=False))
    return failed


def rules_to_config(rules: Iterable[Rule]) -> list[dict]:
    return [{k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(r).items()} for r in rules]
