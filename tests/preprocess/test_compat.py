"""The reference-compatible presets against datatrove 0.10.1 itself (its own venv, scripts/setup_oracles.sh).

Every rule of ``gopher_compat``, ``c4_compat`` and ``fineweb_compat`` is tripped by a document built from real
prose, and datatrove must drop that document for the same reason; on the prose itself (and those documents)
the decisions agree on >= 99% of documents per filter. The word splitter is held to spaCy's words (the ones
datatrove counts) on the same prose.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from airflow_curation.core.compat import COMPAT_SIGNALS, GOPHER_REPETITION_SIGNALS, compat_signals
from airflow_curation.core.compat_words import count_sentences, words
from airflow_curation.core.filters import EMPTY, PRESETS, apply_rules
from airflow_curation.core.signals import compute_signals

from . import corpus
from .conftest import run_oracle

COMPAT = {
    "gopher_compat": ("gopher_quality", "gopher_repetition"),
    "c4_compat": ("c4",),
    "c4_compat_fineweb": ("c4_fineweb",),
    "fineweb_compat": ("fineweb",),
}


def _decide(texts: list[str], preset: str) -> list[tuple[bool, str | None]]:
    signals = compute_signals(texts)
    dt = compat_signals(texts)
    for name in dt.column_names:
        signals = signals.append_column(name, dt.column(name))
    out = apply_rules(signals, PRESETS[preset])
    return list(zip(out.column("keep").to_pylist(), out.column("drop_reason").to_pylist(), strict=True))


def _theirs(row: dict, filters: tuple[str, ...]) -> tuple[bool, str | None]:
    for f in filters:
        if not row[f]["keep"]:
            return False, row[f]["reason"]
    return True, None


@pytest.fixture(scope="module")
def rule_docs(prose) -> dict[str, str]:
    """Per rule: the first candidate whose first failing rule (ours) is that rule."""
    chosen = {}
    for rule, candidates in corpus.rule_candidates(prose).items():
        preset = next(p for p, rules in PRESETS.items() if p in COMPAT and any(r.name == rule for r in rules))
        for text, (_, reason) in zip(candidates, _decide(candidates, preset)):
            if reason == rule:
                chosen[rule] = text
                break
    return chosen


@pytest.fixture(scope="module")
def rule_oracle(rule_docs, tmp_path_factory) -> dict[str, dict]:
    names = list(rule_docs)
    got = run_oracle("datatrove", [{"text": rule_docs[n]} for n in names], tmp_path_factory)
    return dict(zip(names, got))


def test_every_rule_is_tripped_by_a_document(rule_docs):
    every = {r.name for p in COMPAT for r in PRESETS[p]}
    missing = every - set(rule_docs)
    assert not missing, f"no built document trips {sorted(missing)}"


@pytest.mark.parametrize("preset", sorted(COMPAT))
def test_datatrove_drops_each_document_for_the_same_rule(preset, rule_docs, rule_oracle):
    for rule in (r for r in PRESETS[preset] if r.name in rule_docs):
        keep, reason = _theirs(rule_oracle[rule.name], COMPAT[preset])
        assert not keep, f"{preset}: datatrove keeps the document built to trip {rule.name}"
        if rule is not EMPTY:  # datatrove names an empty text by the rule it fails first
            assert reason == rule.name, f"{preset}: built for {rule.name}, datatrove says {reason}"


@pytest.mark.parametrize("preset", sorted(COMPAT))
def test_decisions_agree_with_datatrove_on_prose(preset, prose, datatrove_results):
    ours = _decide(prose, preset)
    theirs = [_theirs(r, COMPAT[preset]) for r in datatrove_results]
    same = sum(a[0] == b[0] for a, b in zip(ours, theirs))
    assert same / len(prose) >= 0.99, f"{preset}: {same}/{len(prose)}"
    both = [(a[1], b[1]) for a, b in zip(ours, theirs) if not a[0] and not b[0] and a[1] != "empty"]
    assert all(a == b for a, b in both), [p for p in both if p[0] != p[1]][:5]
    # the comparison is not vacuous: datatrove keeps some and drops some, and so do we
    assert 0 < sum(k for k, _ in theirs) < len(theirs) and 0 < sum(k for k, _ in ours) < len(ours)


def test_c4_fineweb_setting_is_datatrove_without_the_terminal_punctuation_rule(prose, tmp_path_factory):
    """``c4_compat_fineweb`` is ``C4QualityFilter(filter_no_terminal_punct=False)``: on pages where that
    setting changes datatrove's decision (lines without terminal punctuation count sentences; a "{" in one
    drops the page), ours changes the same way."""
    sents = corpus._sentences(prose)
    unterminated = "\n".join(s.rstrip(".!?") for s in sents[:12])
    docs = [
        unterminated,  # default: no line kept, too few sentences; FineWeb's setting: kept
        "\n".join(sents[:8]) + "\nconfig = {debug: true} for every host in the list\n",  # FineWeb's: curly_bracket
        "Lorem ipsum dolor sit amet consectetur\n" + "\n".join(sents[:8]),  # FineWeb's: lorem_ipsum
    ]
    got = run_oracle("datatrove", [{"text": t} for t in docs], tmp_path_factory)
    theirs = [_theirs(r, ("c4_fineweb",)) for r in got]
    assert _decide(docs, "c4_compat_fineweb") == theirs
    assert theirs == [(True, None), (False, "curly_bracket"), (False, "lorem_ipsum")]
    # the documents are ones the setting decides: at its default datatrove (and c4_compat) decide otherwise
    default = [_theirs(r, ("c4",)) for r in got]
    assert _decide(docs, "c4_compat") == default
    assert all(a != b for a, b in zip(default, theirs))


EDGE_TEXTS = [
    "",
    " \n\n ",
    "One line.\r\nTwo lines, with a carriage return.\rThree?\x0bFour\x1cFive\u2028six.\n",
    "Cited line one has a mark.[1] And more words here.\nA cited line[edit]\nNo [citation needed] here, ok.\n"
    "Empty mark [] and [12] inside a kept line ends here.\nx[0] = y[1] + z[2] is code.\n",
    "Privacy Policy and our use of cookies apply to every visitor here.\nThis \u212aelvin line uses cookies.\n",
    # C4's patterns at a line's ends and across a removed citation mark, lines kept otherwise
    "Turn on Java[1]Script to see every part of this page.\nWe say lorem ipsum\nuse cookies, we say here.\n",
    "\u0130stanbul lorem \u0130psum line has words.\nLorem ipsum dolor sit amet again.\n",
    "- a\n- b\n\u2022 c\n  - d...\n e\u2026\n.....\n#tag #tag ... \u2026\n",
    "word " * 30 + "\n\n\n" + "word " * 30 + "\n\n" + ("same line\n" * 5) + "\n",
    "a b c d e f g h i j k " * 6 + "ab c d e f g h i j k",  # joined n-grams: 'ab c' and 'a bc' are one key
    "Don't stop. It's 5km away... Really?! (Yes.) \u00bbQuoted.\u00ab Done\u3002 Next\uff01 \ud800 end",
]


def test_compiled_pass_equals_the_python_definitions(prose, rule_docs):
    """The compiled pass (core/compat_kernel.py) and the per-document Python definitions (compat_doc) give
    the same value for every signal, on prose, the rule documents and edge cases of its line and word rules."""
    from airflow_curation.core.compat import compat_doc

    texts = list(prose) + list(rule_docs.values()) + EDGE_TEXTS
    table = compat_signals(texts)
    for name in COMPAT_SIGNALS:
        got = table.column(name).to_pylist()
        want = [compat_doc(t)[name] for t in texts]
        bad = [(i, a, b) for i, (a, b) in enumerate(zip(got, want)) if a != pytest.approx(b, rel=1e-12, abs=0)]
        assert not bad, f"{name}: {bad[:3]}"


# words that are prefixes of one another, so the same characters split two ways meet ("ab c" and "a bc"), and
# few enough that n-grams repeat often
_PARTS = ["a", "ab", "abc", "b", "bc", "c", "ca", "cab", "abcabc", "the", "then", "n", "abcabcabcabc", "."]


@settings(max_examples=250, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_PARTS), max_size=80), min_size=1, max_size=4))
# 2-grams repeat at 1 and 2 but no 3-gram repeats: the top 3-gram is the first, outside the counted positions
@example([["then", "a", "b", "c", "ab", "b", "c", "a", "b"]])
def test_repeated_ngrams_of_generated_words_equal_the_python_definitions(docs):
    """The compiled n-gram signals look up only where an n-gram can repeat (the top n-grams where the shorter
    ones at i and i + 1 repeat; the duplicated ones where a byte counter of the joined words' hash says twice):
    on batches of documents made of words that prefix one another, the values of the Python definitions."""
    from airflow_curation.core.compat import compat_doc

    texts = [" ".join(ws) for ws in docs]
    table = compat_signals(texts, GOPHER_REPETITION_SIGNALS)
    for name in GOPHER_REPETITION_SIGNALS:
        want = [compat_doc(t, {name})[name] for t in texts]
        assert table.column(name).to_pylist() == pytest.approx(want, rel=1e-12, abs=0), name


def test_tables_kept_across_batches_give_the_values_of_empty_ones(prose):
    """The piece and word tables a process keeps (core/compat_vocab.py) grow across batches: a batch whose
    pieces are half known, in another order, gives the values that empty tables give."""
    from airflow_curation.core import compat_batch, compat_vocab

    texts = list(prose[:80]) + EDGE_TEXTS
    compat_batch._VOCAB = None
    fresh = compat_signals(texts).to_pylist()
    counts = compat_batch.vocab().counts
    # the tables started small (1,024 items, 4,096 slots, rehashed past half full): these texts made them grow
    assert counts[compat_vocab.N_PIECES] > 2048 and counts[compat_vocab.N_WORDS] > 2048
    compat_batch._VOCAB = None
    compat_signals(texts[::2])
    assert compat_signals(texts[::-1]).to_pylist()[::-1] == fresh


def test_character_classes_are_spacys(tmp_path_factory):
    """The letters the suffix and infix rules read are spaCy's (its listed scripts, lower and upper case), and so
    are the symbols and currency signs the prefix and suffix rules split off, every code point compared: a wider
    letter class split the Russian "т.д" (lower, '.', a Cyrillic letter then taken as upper) where spaCy keeps it
    whole, and Unicode's currency class split "¢5" and symbols such as U+1F971 where spaCy splits nothing."""
    import re

    from airflow_curation.core import compat_words as cw

    want = run_oracle("spacy_classes", [], tmp_path_factory)
    mine = (
        ("alpha", cw._ALPHA),
        ("lower", cw._LOWER),
        ("upper", cw._UPPER),
        ("icons", cw._SO_CLS),
        ("currency", cw._SC_CLS),
    )
    for name, cls in mine:
        pattern = re.compile(f"[{cls}]")
        got = [c for c in range(0x110000) if pattern.match(chr(c))]
        assert got == [c for a, b in want[name] for c in range(a, b + 1)], name


def test_words_past_latin_are_spacys(tmp_path_factory):
    """Pieces whose words turn on the letter classes, and spaCy's emoticons and exceptions for every language:
    spaCy's words, from datatrove's own tokenizer."""
    texts = [
        "и т.д. и т.п., см.Рис и т.е.",
        "Ελλάδα.Αθήνα σοφός,σοφή λέξη-λέξη a:β",
        "ქართ,ული ქართ-ული ქართ.ული",
        "ǅemal.Ǆ ʔa.B ɐ.Ɐ ａ.Ｂ",
        "数据.库 数据,库 中-文",
        "[::1] [: x:1 (-: :-)) C++ ü. (ü.) ¯\\(ツ)/¯ (ಠ_ಠ) — <space> x(-: f(:) hi:) x8) print(x):",
        # a host's labels hold any character from U+00A1 (CJK, full-width marks, a zero-width non-joiner) up to 64;
        # private and reserved IPv4 addresses are no host; two ellipses at a piece's end are one mark
        "場合、machine-192-168-0-131.internal.falcot.com 政策（Debian Policy）。changelog.Debian.gz می\u200cکند.این",
        "用意し、" + "あ" * 70 + "ftp-master.debian.org 192.168.0.0/24-Netzwerk 8.8.8.8/24-Netz 10.1.2.3-x 威胁…… a……b",
        # spaCy's own currency and symbol lists, not Unicode's classes: ¢ and U+07FE stay in their word, U+1F971
        # and U+1FA70 (symbols newer than its list) too, ₿ and U+1F970 split off
        "¢5 5¢ x\u07feI ₿5 5₿ a\U0001f971b \U0001f971x x\U0001fa70 a\U0001f970b \U0001f970x x\U0001f970 ©2024 \u2122x",
    ]
    oracle = run_oracle("datatrove", [{"text": t} for t in texts], tmp_path_factory)
    assert [words(t) for t in texts] == [r["words"] for r in oracle]


def test_special_cases_are_spacys(tmp_path_factory):
    """Every special case of spaCy's English tokenizer (contractions and their chains, times of day, abbreviations,
    dropped letters, emoticons, ``°C.``: its 1,343 strings without whitespace) gives spaCy's words, and every
    string the splitter answers as a special case that spaCy's table lacks splits as spaCy splits it ("DON'T" and
    "whore" are one word)."""
    from airflow_curation.core import compat_words as cw

    ours = sorted(w for w in cw.special_strings() if cw._special(w) is not None)
    got = run_oracle("spacy_specials", ours, tmp_path_factory)
    table = got["table"]
    assert len(table) > 1300 and sum(len(v) == 3 for v in table.values()) > 300
    assert {k: v for k, v in table.items() if words(k) != v} == {}
    assert {w: t for w, t in zip(ours, got["tokens"]) if w not in table and words(w) != t} == {}


def test_words_are_datatrove_words(prose, datatrove_results):
    same = sum(words(t) == r["words"] for t, r in zip(prose, datatrove_results))
    assert same / len(prose) >= 0.97, f"{same}/{len(prose)} texts split into datatrove's exact words"


@pytest.mark.parametrize(
    "text,expected",
    [
        (
            "Don't stop (e.g. now), it's 5km away... Really?",
            ["Do", "n't", "stop", "(", "e.g.", "now", ")", ",", "it", "'s", "5", "km", "away", "...", "Really", "?"],
        ),
        ("see http://x.org/a?b=1, or foo@bar.com.", ["see", "http://x.org/a?b=1", ",", "or", "foo@bar.com", "."]),
        ("32-bit re.VERBOSE and/or :) dont", ["32", "-", "bit", "re", ".", "VERBOSE", "and/or", ":)", "do", "nt"]),
    ],
)
def test_word_rules(text, expected):
    assert words(text) == expected


def test_sentences_are_cut_after_terminals_before_a_word():
    assert count_sentences('One. Two! Three? (Four.) "Five." six') == 6
    assert count_sentences("No cut in e.g. this or 3.14 here.") == 1
    assert count_sentences("") == 1


def test_compat_signals_only_asked_columns_and_unknown_refused():
    t = compat_signals(["A short text. It has two sentences."], ["dt_c4_n_sentences", "dt_n_words"])
    assert t.column_names == ["dt_n_words", "dt_c4_n_sentences"]
    assert t.column("dt_c4_n_sentences").to_pylist() == [2]  # one kept line (7 words, ends in a period), 2 sentences
    with pytest.raises(ValueError, match="unknown compat signals"):
        compat_signals(["x"], ["dt_nope"])
    assert set(COMPAT_SIGNALS) >= {r.signal for p in COMPAT for r in PRESETS[p] if r is not EMPTY}


def test_preprocessor_computes_the_compat_columns_its_rules_read(rule_docs):
    import pyarrow as pa

    from airflow_curation.stages.preprocess.stage import Preprocessor

    names = [n for n in rule_docs if n != "empty"]
    table = pa.table({"id": names, "text": [rule_docs[n] for n in names]})
    out = Preprocessor(preset="fineweb_compat").process(table)
    assert {c for c in out.column_names if c.startswith("dt_")} == {r.signal for r in PRESETS["fineweb_compat"][1:]}
    for name, reason in zip(names, out.column("drop_reason").to_pylist()):
        if name in {r.name for r in PRESETS["fineweb_compat"]}:
            assert reason == name
    # the project's own presets compute no dt_ column
    assert not [c for c in Preprocessor(preset="gopher").process(table).column_names if c.startswith("dt_")]


RECIPE = "gopher_compat,c4_compat_fineweb,fineweb_compat"


def _web_page(i: int, text: str) -> str:
    """A prose document framed as extracted web pages are: whitespace-only lines and bare bullets (what
    trafilatura leaves of a menu), short navigation lines, a script or cookie line, a short code line."""
    frames = [
        ["\t\t", "- "] * (3 + i % 6),
        ["Home", "Index", "Modules", "Next", "Previous", "Home"],
        ["Enable JavaScript to use the search on this page.", "This site uses cookies to work well.", ":: >> ::"],
        ["x = {", "}"] if i % 8 == 3 else ["-> see also: 1.2.3", "(c) 2024", "| | |"],
    ]
    menu = frames[i % len(frames)]
    return "\n".join([*menu, *text.split("\n"), *menu])


def _recipe_reason(reason: str) -> str:
    name, why = reason.split(":")
    return "Gopher" if name.startswith("Gopher") else why


def test_recipe_with_line_rules_reads_each_text_where_datatrove_does(prose, tmp_path_factory):
    """With ``--line-rules fineweb``, ``gopher_compat`` and ``c4_compat_fineweb`` read the extracted text and
    ``fineweb_compat`` what the line rules left, as in datatrove's FineWeb recipe (Gopher -> C4, which removes lines
    -> FineWeb): same decision and first reason on every page, and the same cleaned text on the kept ones."""
    import pyarrow as pa

    from airflow_curation.stages.preprocess.stage import Preprocessor

    pages = [_web_page(i, t) for i, t in enumerate(prose[:96])]
    theirs = run_oracle("datatrove_fineweb", [{"text": t} for t in pages], tmp_path_factory)
    out = Preprocessor(preset=RECIPE, line_rules="fineweb").process(
        pa.table({"id": list(map(str, range(len(pages)))), "text": pages})
    )
    # the recipe runs Gopher's repetition filter before its quality filter, the preset the other way round: a
    # page both drop is Gopher's on both sides, under either rule's name
    gopher = {r.name for r in PRESETS["gopher_compat"]}
    ours = [
        (k, "Gopher" if r in gopher else r) for k, r in zip(out["keep"].to_pylist(), out["drop_reason"].to_pylist())
    ]
    expected = [(r["keep"], r["reason"] and _recipe_reason(r["reason"])) for r in theirs]
    assert ours == expected, [(i, a, b) for i, (a, b) in enumerate(zip(ours, expected)) if a != b][:5]
    cleaned = out.column("clean_text").to_pylist()
    assert all(cleaned[i] == r["text"] for i, r in enumerate(theirs) if r["keep"])
    # not vacuous: some pages are kept and some dropped by each filter, and Gopher on the cleaned text (what every
    # rule read before) keeps pages datatrove's Gopher drops on the extracted text
    firsts = {r["reason"].split(":")[0] for r in theirs if not r["keep"]}
    assert any(r["keep"] for r in theirs) and {"GopherRepetitionFilter", "C4QualityFilter"} <= firsts
    on_cleaned = _decide(cleaned, "gopher_compat")
    assert any(kept and r["reason"].startswith("Gopher") for (kept, _), r in zip(on_cleaned, theirs) if not r["keep"])


def test_language_id_reads_the_extracted_text_in_a_reference_recipe():
    """In a reference recipe with line rules, language ID reads the text before them (datatrove's LanguageFilter
    runs first); the project's presets keep reading the cleaned text, and without line rules there is one text."""
    import pyarrow as pa

    from airflow_curation.stages.preprocess.stage import Preprocessor

    german = "Dieser Satz ist auf Deutsch geschrieben und hat keinen Punkt am Ende"
    english = "This sentence is written in plain English and it ends with a full stop."
    table = pa.table({"id": ["a"], "text": ["\n".join([german] * 6 + [english])]})
    # C4's line rules keep the one terminated English line; the German lines have no terminal punctuation
    for preset, expected in (("fineweb_compat", "de"), ("fineweb", "en")):
        out = Preprocessor(preset=preset, line_rules="c4", lang_id=True).process(table)
        assert out.column("lang").to_pylist() == [expected], preset
        assert out.column("clean_text").to_pylist() == [english]
    assert Preprocessor(preset="fineweb_compat", lang_id=True).extracted == frozenset()


def test_rules_on_the_extracted_text_decide_before_the_line_rules_drops():
    """datatrove's order: a page Gopher drops is Gopher's even when C4 would drop it too; the cleaner's own
    document drops (``lines_curly_bracket``) still decide for the project's presets."""
    import pyarrow as pa

    from airflow_curation.stages.preprocess.stage import Preprocessor

    table = pa.table({"id": ["a"], "text": ["short page with x = { y } inside it"]})
    compat = Preprocessor(preset=RECIPE, line_rules="fineweb").process(table)
    assert compat.column("drop_reason").to_pylist() == ["gopher_short_doc"]
    native = Preprocessor(preset="gopher", line_rules="fineweb").process(table)
    assert native.column("drop_reason").to_pylist() == ["lines_curly_bracket"]


def test_no_signal_is_read_from_both_texts():
    from airflow_curation.core.filters import CLEANED, PRESET_TEXT, extracted_signals

    extracted = extracted_signals(list(PRESETS))
    cleaned = {r.signal for p, rules in PRESETS.items() if PRESET_TEXT.get(p, CLEANED) == CLEANED for r in rules}
    assert extracted and not extracted & cleaned
    assert extracted_signals("gopher,fineweb_compat") == frozenset()
