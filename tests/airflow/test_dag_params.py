"""The shipped DAG's trigger form: a field that stands for a stage setting is built from it
(``airflow_curation.params.setting_param``) and refuses what the stage refuses."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import pytest

from airflow_curation.params import SETTING_KEY, setting_param
from airflow_curation.stages import stage_class

pytestmark = pytest.mark.airflow
REPO = Path(__file__).resolve().parents[2]


def _dag():
    spec = importlib.util.spec_from_file_location("curation_pipeline_params", REPO / "dags" / "curation_pipeline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def _accepts(param, value) -> bool:
    from airflow.sdk.definitions.param import ParamValidationError

    try:
        copy.deepcopy(param).resolve(value)  # (resolve keeps the value it checked)
        return True
    except ParamValidationError:
        return False


def _probes(setting, param) -> list:
    out = [param.value, "not-a-value", -1, 0, 1, 0.5, 1.5, 10**6]
    out += [b + d for b in (setting.minimum, setting.maximum) if b is not None for d in (-1, -0.01, 0, 0.01, 1)]
    return out + list(setting.choices or ())


def test_every_settings_field_of_the_form_allows_only_what_its_stage_allows():
    params = _dag().params
    fields = {k: params.get_param(k) for k in params if SETTING_KEY in params.get_param(k).schema}
    assert len(fields) >= 15, sorted(fields)  # the form's numbers, choices and switches of the stages
    for key, param in fields.items():
        stage, name = param.schema[SETTING_KEY].split(".")
        setting = stage_class(stage).SETTINGS[name]
        if param.value is not None:
            setting.coerce(param.value, key)  # the form's default is one the stage takes
        for value in _probes(setting, param):
            if _accepts(param, value):  # what the form lets through, the stage takes as it is
                assert setting.coerce(value, key) == value, (key, value)


def test_a_field_takes_the_settings_bounds_choices_and_words():
    threshold = setting_param("dedup", "threshold")
    assert _accepts(threshold, 0.7) and not _accepts(threshold, 1.5) and not _accepts(threshold, -0.1)
    assert threshold.description == f"Dedup: {stage_class('dedup').SETTINGS['threshold'].help}."
    task = setting_param("enrich", "task", default="embed")
    assert _accepts(task, "generate") and not _accepts(task, "summarize") and task.value == "embed"
    optional = setting_param("boilerplate", "min_documents", default=None)
    assert _accepts(optional, None) and _accepts(optional, 2) and not _accepts(optional, 1)
    with pytest.raises(TypeError, match="preprocess.preset"):
        setting_param("preprocess", "preset")  # a coercer of its own: the DAG declares that field
