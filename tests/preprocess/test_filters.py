"""Filter rules: order, reasons, presets, configuration errors."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from airflow_curation.core.filters import PRESETS, Rule, apply_rules, resolve_rules
from airflow_curation.core.signals import compute_signals
from airflow_curation.stages.preprocess.stage import Preprocessor


def test_first_failing_rule_names_the_drop():
    signals = pa.table({"a": [1.0, 5.0, 50.0, 0.5], "b": [0.0, 0.0, 9.0, 9.0]})
    rules = [Rule("too_big", "a", max=10), Rule("b_high", "b", max=1), Rule("a_small", "a", min=1)]
    out = apply_rules(signals, rules).to_pylist()
    assert out == [
        {"keep": True, "drop_reason": None},
        {"keep": True, "drop_reason": None},
        {"keep": False, "drop_reason": "too_big"},
        {"keep": False, "drop_reason": "b_high"},
    ]


def test_rules_match_a_per_row_reading_of_them():
    # ints, floats with NaN, nulls and a label rule: each row's reason is its first failing rule, read row by row
    rng = np.random.default_rng(7)
    n = 500
    ints = rng.integers(0, 100, n)
    floats = rng.random(n)
    floats[rng.random(n) < 0.1] = np.nan
    nullable = [None if v < 0.2 else float(v) for v in rng.random(n)]
    labels = [["en", "de", "fr", None][i] for i in rng.integers(0, 4, n)]
    signals = pa.table({"i": ints, "f": floats, "o": pa.array(nullable, pa.float64()), "lang": labels})
    rules = [
        Rule("i_low", "i", min=10),
        Rule("f_band", "f", min=0.1, max=0.8),
        Rule("o_high", "o", max=0.7),
        Rule("lang", "lang", values=("en", "de")),
        Rule("i_high", "i", max=90),
    ]

    def fails(rule, v):
        if rule.values is not None:
            return v not in rule.values
        return v is not None and ((rule.min is not None and v < rule.min) or (rule.max is not None and v > rule.max))

    rows = signals.to_pylist()
    want = [next((r.name for r in rules if fails(r, row[r.signal])), None) for row in rows]
    out = apply_rules(signals, rules)
    assert out.column("drop_reason").to_pylist() == want
    assert out.column("keep").to_pylist() == [w is None for w in want]
    assert len(set(want)) == 6  # every rule, and keeping, happened


def test_null_signal_never_fails_a_rule():
    signals = pa.table({"syntax_ok": pa.array([True, False, None])})
    out = apply_rules(signals, [Rule("syntax", "syntax_ok", min=1)]).column("drop_reason").to_pylist()
    assert out == [None, "syntax", None]


def test_presets_and_custom_rules_resolve_in_order():
    rules = resolve_rules("gopher,c4", [{"name": "mine", "signal": "n_words", "max": 10}])
    names = [r.name for r in rules]
    assert names[0] == "empty" and names.count("empty") == 1
    assert names.index("gopher_word_count") < names.index("c4_curly_bracket") < names.index("mine")
    wc = next(r for r in rules if r.name == "gopher_word_count")
    assert (wc.min, wc.max) == (50, 100_000)
    assert next(r for r in PRESETS["fineweb"] if r.name == "fineweb_line_punct").min == 0.12
    assert resolve_rules("none") == []


@pytest.mark.parametrize(
    "bad,match",
    [
        (("nope", []), "unknown filter preset"),
        (("gopher", [{"name": "empty", "signal": "n_words", "min": 1}]), "used twice"),
        (("none", [{"name": "x", "signal": "n_words"}]), "give min, max or both"),
        (("none", [{"name": "x", "signal": "n_words", "max": 1, "mx": 2}]), "unknown keys"),
        # no value between them: every document would be dropped
        (("none", [{"name": "x", "signal": "n_words", "min": 50, "max": 10}]), "min 50 is above max 10"),
        # a string or a bool would fail every batch when compared
        (("none", [{"name": "x", "signal": "n_words", "min": "50"}]), "min must be a number, got '50'"),
        (("none", [{"name": "x", "signal": "n_words", "max": True}]), "max must be a number, got True"),
    ],
)
def test_bad_configuration_is_a_clear_error(bad, match):
    with pytest.raises(ValueError, match=match):
        resolve_rules(*bad)


@pytest.mark.parametrize(
    "settings,rule,match",
    [
        ({}, "n_word", "did you mean 'n_words'"),
        ({}, "word_count", "it computes n_chars, n_words"),
        ({"code": False}, "syntax_ok", r"code signals are off \(--code false\)"),
        ({"lang_id": False}, "lang_score", r"language ID is off \(--lang-id false\)"),
    ],
)
def test_a_rule_on_a_signal_the_run_does_not_compute_is_refused_before_any_document(settings, rule, match):
    """Found by running ``curation preprocess f.parquet --rules '[{..."signal": "word_count"...}]'``: every unit
    failed on it, each attempt retried, and the message listed the signals cut short; a run of 50,000 shards
    would have failed 100,000 times. The stage now refuses at setup, naming the nearest signals."""
    with pytest.raises(
        ValueError, match=f"rule 'mine' reads signal '{rule}', which this run does not compute: {match}"
    ):
        Preprocessor(rules=[{"name": "mine", "signal": rule, "min": 0.1}], **settings)
    # what the run does compute is accepted: code and language signals when on (auto: a rule reads one)
    Preprocessor(rules=[{"name": s, "signal": s, "min": 0.1} for s in ("n_words", "syntax_ok", "lang_score")])


def test_rule_on_missing_signal_is_a_clear_error():
    with pytest.raises(ValueError, match="was not computed"):
        apply_rules(pa.table({"a": [1]}), [Rule("r", "comment_line_frac", max=0.5)])


def test_empty_and_tiny_documents_are_counted_drops(warm_signals):
    sig = compute_signals(["", "   \n", "word", "lorem ipsum dolor { sit"])
    out = apply_rules(sig, resolve_rules("gopher")).column("drop_reason").to_pylist()
    assert out == ["empty", "empty", "gopher_word_count", "gopher_word_count"]
    c4 = apply_rules(sig, resolve_rules("c4")).column("drop_reason").to_pylist()
    assert c4 == ["empty", "empty", "c4_too_few_sentences", "c4_curly_bracket"]


def test_decisions_are_deterministic(warm_signals, prose):
    sig = compute_signals(prose)
    rules = resolve_rules("gopher,fineweb,c4")
    first = apply_rules(sig, rules)
    assert all(apply_rules(compute_signals(prose), rules).equals(first) for _ in range(3))
    kept = first.column("keep").to_pylist()
    assert 0 < sum(kept) < len(kept)
