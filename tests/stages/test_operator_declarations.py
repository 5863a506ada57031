"""A stage is declared once: its settings in the stage, its operator's arguments as typed, documented
keywords of ``__init__`` (settings params and template fields follow from them), its operator found through
the stage's entry point, its CLI extras by module name."""

from __future__ import annotations

import importlib
import inspect
import re
from importlib.metadata import entry_points

import pytest

import airflow_curation
from airflow_curation.operators.base import CurationStageOperator
from airflow_curation.stages import ENTRY_POINT_GROUP, stage_class

OPERATOR_MODULES = airflow_curation.get_provider_info()["operators"][0]["python-modules"]
# The installed stages (other tests register stages of their own in this process: not the provider's).
INSTALLED = sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))


def _operator_of(stage: str) -> type[CurationStageOperator]:
    module = importlib.import_module(f"airflow_curation.operators.{stage}")
    found = [
        c
        for c in vars(module).values()
        if isinstance(c, type) and issubclass(c, CurationStageOperator) and c.__module__ == module.__name__
    ]
    assert len(found) == 1, (stage, found)
    return found[0]


def test_every_stage_has_its_operator_in_the_provider_info():
    assert OPERATOR_MODULES[0] == "airflow_curation.operators.base"
    assert sorted(OPERATOR_MODULES[1:]) == sorted(f"airflow_curation.operators.{s}" for s in INSTALLED)
    for name in INSTALLED:
        assert _operator_of(name).stage == name


@pytest.mark.parametrize("name", INSTALLED)
def test_operator_arguments_are_the_stages_settings_documented_and_templated(name):
    op_cls, settings = _operator_of(name), stage_class(name).SETTINGS
    names = {s.name for s in settings}
    known = names | {"input_manifest"}
    assert op_cls.settings_params, name
    assert set(op_cls.settings_params) <= known, set(op_cls.settings_params) - known
    # (validate resolves input_manifest itself, from input_task_id when empty)
    assert not set(op_cls.airflow_params) & (names - {"input_manifest"}), "a setting declared as an Airflow argument"
    doc = inspect.getdoc(op_cls) or ""
    for param in (*op_cls.settings_params, *op_cls.airflow_params):
        assert re.search(rf":param {param}:", doc), f"{op_cls.__name__} does not document {param}"
    for param in op_cls.settings_params:
        assert param in op_cls.template_fields, param
    # every argument is kept on the operator under its own name (what templating and build_config read)
    sig = inspect.signature(op_cls.__init__).parameters
    values = {p: f"v-{p}" for p in op_cls.settings_params}
    required = {"task_id": f"t-{name}", "dataset": "d", "lake": "/l"}
    required |= {p: f"v-{p}" for p, v in sig.items() if v.kind is v.KEYWORD_ONLY and v.default is v.empty}
    op = op_cls(**{**required, **values})
    assert {p: getattr(op, p) for p in values} == values


def test_a_new_operator_is_its_keywords_and_nothing_else():
    class TextLengthOperator(CurationStageOperator):
        stage = "text_length"
        airflow_params = ("note_url",)

        def __init__(
            self,
            *,
            input_manifest: str,
            min_chars: int | str | None = None,
            note_url: str = "",
            strict: bool = False,
            **kwargs,
        ):
            super().__init__(**kwargs)
            self.input_manifest, self.min_chars, self.note_url, self.strict = (
                input_manifest,
                min_chars,
                note_url,
                strict,
            )

    assert TextLengthOperator.settings_params == ("input_manifest", "min_chars", "strict")
    assert set(TextLengthOperator.template_fields) >= {"lake", "config", "input_manifest", "min_chars", "note_url"}
    assert "strict" not in TextLengthOperator.template_fields  # a bool is not templated


def test_cli_extras_are_found_by_module_name():
    from airflow_curation.cli.stage import stage_extras

    assert stage_extras("preprocess").__name__ == "airflow_curation.cli.preprocess"
    assert stage_extras("quality") is None  # cli/quality.py is `curation quality-train`, not extras
    assert stage_extras("dedup") is None and stage_extras("no-such") is None


OPTIONAL = [n for n in INSTALLED if stage_class(n).OPTIONAL_WITHOUT]


def test_the_optional_stages_are_declared_by_their_stage():
    assert {n: stage_class(n).OPTIONAL_WITHOUT for n in OPTIONAL} == {
        "boilerplate": "min_documents",
        "decontaminate": "eval_sets",
        "enrich": "model",
        "export": "formats",
        "mix": "targets",
        "quality": "model",
        "tokenize": "tokenizer",
    }
    for name in OPTIONAL:  # the setting named is one of the stage's, and an argument of its operator
        assert stage_class(name).OPTIONAL_WITHOUT in stage_class(name).SETTINGS
        assert stage_class(name).OPTIONAL_WITHOUT in _operator_of(name).settings_params


@pytest.mark.parametrize("name", OPTIONAL)
def test_one_skip_rule_in_the_base_operator(name):
    """``optional=True`` skips an operator whose stage's declared setting renders empty, or whose input does;
    without it an empty setting is the stage's business (no skip); the old per-operator switches are refused."""
    from airflow.sdk.exceptions import AirflowSkipException

    op_cls, setting = _operator_of(name), stage_class(name).OPTIONAL_WITHOUT
    sig = inspect.signature(op_cls.__init__).parameters
    base = {"task_id": f"o-{name}", "dataset": "d", "lake": "/l"}
    base |= {p: f"/v-{p}" for p, v in sig.items() if v.kind is v.KEYWORD_ONLY and v.default is v.empty}
    for empty in ("", " ", "None", None):
        op = op_cls(**{**base, setting: empty}, optional=True)
        with pytest.raises(AirflowSkipException, match=f"{name} skipped: no {setting} configured"):
            op.execute({})
        assert op_cls(**{**base, setting: empty}).skip_reason() is None
    configured = op_cls(**{**base, setting: "/x"}, optional=True)
    assert configured.skip_reason() is None
    no_input = op_cls(**{**base, setting: "/x", "input_manifest": "None"}, optional=True)
    assert no_input.skip_reason() == f"{name} skipped: no upstream stage ran (no input manifest)"
    with pytest.raises(TypeError, match="'skip_without_model' was renamed to 'optional'"):
        op_cls(**base, skip_without_model=True)
