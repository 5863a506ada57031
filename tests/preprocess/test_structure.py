"""Structure signals: hand-computed values on written documents, and the ``structure`` preset on real
navigation/index pages against real prose (Debian's python3.11-doc and debian-handbook)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from airflow_curation.core.filters import DEFAULT_PRESET, apply_rules, resolve_rules
from airflow_curation.core.signals import STRUCTURE_SIGNALS, compute_signals, reference_signals

from . import corpus

MIXED = (
    "Index\n"
    "abs()\n"
    "\n"
    "  os.path  \n"
    "https://example.org/a\n"
    "- item one\n"
    "2.1. Section title here\n"
    "The cat sat on the mat today.\n"
)
# non-blank lines (chars, words): Index (5, 1), abs() (5, 1), "  os.path  " (11, 1), the URL (21, 1),
# "- item one" (10, 3), "2.1. Section title here" (23, 4), the sentence (29, 7)
MIXED_EXPECTED = {
    "words_per_line": 18 / 7,
    "short_item_line_frac": 5 / 7,  # the first five: <= 3 words, no terminal punctuation
    "short_item_char_frac": (5 + 5 + 11 + 21 + 10) / (5 + 5 + 11 + 21 + 10 + 23 + 29),
    "ident_line_frac": 4 / 7,  # Index, abs(), os.path, the URL
    "url_line_frac": 1 / 7,
    "list_line_frac": 2 / 7,  # "- item one" (bullet), "2.1. ..." (number)
    "template_dup_line_frac": 0.0,  # seven different shapes
}
INDEX = "abs() (in module os)\nlen()   (built-in function)\nmax() (in module builtins)\n\tmin() (in module os)  \nA sentence here.\n"


def _row(text: str) -> dict:
    fast = compute_signals([text]).to_pylist()[0]
    ref = reference_signals([text]).to_pylist()[0]
    for name in STRUCTURE_SIGNALS:
        assert fast[name] == pytest.approx(ref[name], abs=1e-12), name
    return fast


def test_each_structure_signal_on_a_written_document(warm_signals):
    row = _row(MIXED)
    for name, value in MIXED_EXPECTED.items():
        assert row[name] == pytest.approx(value, abs=1e-12), name


def test_line_templates_mask_words_and_fold_spaces(warm_signals):
    row = _row(INDEX)
    # "W() (W W W)" three times (spaces folded, edges stripped), "W() (W-W W)" once, the sentence once
    assert row["template_dup_line_frac"] == pytest.approx(2 / 5)
    assert row["words_per_line"] == pytest.approx((4 + 3 + 4 + 4 + 3) / 5)
    assert row["short_item_line_frac"] == pytest.approx(1 / 5)  # "len()   (built-in function)": 3 words
    assert _row("abs()\nlen()\nmax()\n")["template_dup_line_frac"] == pytest.approx(2 / 3)


# A reference page: its signature and example lines are code, left out of the structure counts.
API = (
    "Synopsis\n"
    "void\tfoo\t(int a,\n"  # ends with ','
    "\t\tint b);\n"  # ';'
    "int x = 1\n"  # '='
    "#define MAX 4\n"  # a leading '#'
    "char *name\n"  # a '*' after the first character
    "* a bullet item\n"  # a leading '*' is a bullet: not code
    "https://example.org/?a=b\n"  # one word: an item, '=' or not
    "Returns the sum of the two numbers given.\n"
)


def test_code_lines_are_left_out_of_the_structure_counts(warm_signals):
    row = _row(API)
    # Synopsis (1 word), "* a bullet item" (4), the URL (1), the sentence (8): 4 lines, 14 words
    assert row["words_per_line"] == pytest.approx(14 / 4)
    assert row["url_line_frac"] == pytest.approx(1 / 4)
    assert row["list_line_frac"] == pytest.approx(1 / 4)
    assert row["template_dup_line_frac"] == 0.0
    # code only: words_per_line over all its lines, the fractions 0
    code = _row("int x = 1;\nint y = 2;\n")
    assert code["words_per_line"] == pytest.approx(4.0)
    assert code["template_dup_line_frac"] == code["short_item_line_frac"] == 0.0


@pytest.mark.parametrize(
    ("line", "url", "ident", "listed"),
    [
        ("HTTPS://Example.org", 1, 1, 0),
        ("www.example.org/x?y=1", 1, 0, 0),  # ? and = are not identifier characters
        ("httpx://a", 0, 1, 0),
        ("see https://a.b", 0, 0, 0),  # two words: neither a URL line nor an identifier line
        ("1) first", 0, 0, 1),
        ("10. tenth", 0, 0, 1),
        ("1.5 kg", 0, 0, 0),
        ("x1. no", 0, 0, 0),
        ("• dot", 0, 0, 1),
        ("snake_case[0]", 0, 1, 0),
        ("naïve", 0, 1, 0),  # letters of any script
        ("a,b", 0, 0, 0),
    ],
)
def test_url_identifier_and_list_lines(warm_signals, line, url, ident, listed):
    row = _row(line + "\n\n   \n")  # blank and whitespace-only lines are not lines here
    assert (row["url_line_frac"], row["ident_line_frac"], row["list_line_frac"]) == (url, ident, listed)


def test_empty_and_blank_documents_give_zeros(warm_signals):
    for text in ("", "\n\n", "  \t \n"):
        row = _row(text)
        assert all(row[name] == 0.0 for name in STRUCTURE_SIGNALS)


def test_structure_preset_rules_and_default():
    names = [r.name for r in resolve_rules("structure")]
    assert names == [
        "empty",
        "structure_min_words",
        "structure_words_per_line",
        "structure_short_items",
        "structure_line_templates",
        "structure_list_lines",
    ]
    assert [r.name for r in resolve_rules()] == [r.name for r in resolve_rules(DEFAULT_PRESET)]
    assert "structure_words_per_line" in [r.name for r in resolve_rules()]


# --------------------------------------------------------------------------------------------------
# Real pages: label by path and markup (corpus.page_label), never by the signals.


@pytest.fixture(scope="module")
def real_pages():
    if not (os.path.isdir(corpus.PYDOC_HTML) and os.path.isdir(corpus.HANDBOOK_HTML)):
        pytest.skip("Debian documentation packages absent (scripts/install_system_deps.sh installs them)")
    rows = corpus.labelled_pages(prose_every=4, skip_larger=400_000)
    nav = np.array([r[1] for r in rows])
    assert nav.sum() >= 40 and (~nav).sum() >= 100, "fewer pages than the package ships: labels broke"
    return rows, nav, compute_signals([r[2] for r in rows])


def _drop(signals, preset: str) -> np.ndarray:
    keep = apply_rules(signals, resolve_rules(preset)).column("keep").to_numpy(zero_copy_only=False)
    return ~np.asarray(keep)


def test_structure_preset_drops_index_pages_and_keeps_prose(real_pages):
    rows, nav, signals = real_pages
    drop = _drop(signals, "structure")
    recall = (drop & nav).sum() / nav.sum()
    precision = (drop & nav).sum() / drop.sum()
    prose_kept = 1 - drop[~nav].mean()
    assert recall >= 0.85, f"recall {recall:.3f}"
    assert precision >= 0.8, f"precision {precision:.3f}"
    assert prose_kept >= 0.95, f"prose kept {prose_kept:.3f}"


def test_default_preset_adds_index_pages_to_what_gopher_drops(real_pages):
    rows, nav, signals = real_pages
    gopher, default = _drop(signals, "gopher"), _drop(signals, DEFAULT_PRESET)
    assert default[nav].mean() >= 0.85 > gopher[nav].mean()
    # the structure rules cost little prose on top of Gopher's own drops
    assert default[~nav].mean() - gopher[~nav].mean() <= 0.03
