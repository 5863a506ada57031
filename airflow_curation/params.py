"""A DAG's trigger-form fields from the stages' declared settings: declared once, in the stage.

A field built here takes the setting's default, type, choices, bounds and help, so the Airflow form refuses
what the stage would refuse (a threshold past 1, an unknown task) with the stage's own words, and a change to
the setting reaches the form without a second edit. The schema names its setting (``x-curation-setting``),
which is how ``tests/airflow`` holds every such field of a DAG to the setting it stands for.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Param

from airflow_curation.stages import stage_class

SETTING_KEY = "x-curation-setting"
_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string"}


def setting_param(stage: str, name: str, **overrides: Any) -> Param:
    """The form field for setting ``name`` of ``stage``.

    :param overrides: JSON-schema keys or ``default`` / ``description`` this DAG sets otherwise (a default of
        its own, a stricter bound such as ``exclusiveMinimum``); they may narrow what the setting allows, and a
        test holds them to it.
    """
    setting = stage_class(stage).SETTINGS[name]
    json_type = _JSON_TYPES.get(setting.type)
    if json_type is None:
        raise TypeError(f"{stage}.{name}: a {setting.type!r} setting has no form field here; declare a Param")
    default = overrides.pop("default", setting.default)
    schema: dict[str, Any] = {"type": json_type if default is not None else ["null", json_type]}
    if setting.choices is not None:
        schema["enum"] = [*setting.choices, *([None] if default is None else [])]
    if setting.minimum is not None:
        schema["minimum"] = setting.minimum
    if setting.maximum is not None:
        schema["maximum"] = setting.maximum
    description = overrides.pop("description", f"{stage.capitalize()}: {setting.help}.")
    schema.update(overrides)
    schema[SETTING_KEY] = f"{stage}.{name}"
    return Param(default, description=description, **schema)
