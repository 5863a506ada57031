"""The toy stage's operator: which arguments are settings; the stage's settings check and type them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_curation.operators.base import CurationStageOperator


class TextLengthOperator(CurationStageOperator):
    """:param input_manifest: the upstream manifest. :param min_chars: shortest text kept."""

    stage = "text_length"
    settings_params = ("input_manifest", "min_chars")
    template_fields: Sequence[str] = (*CurationStageOperator.template_fields, *settings_params)

    def __init__(self, *, input_manifest: str, min_chars: int | str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.input_manifest = input_manifest
        self.min_chars = min_chars
