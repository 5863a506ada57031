"""The toy stage's operator: its keywords are its settings (derived by the base); the stage's settings check and
type them."""

from __future__ import annotations

from typing import Any

from airflow_curation.operators.base import CurationStageOperator


class TextLengthOperator(CurationStageOperator):
    """:param input_manifest: the upstream manifest. :param min_chars: shortest text kept."""

    stage = "text_length"

    def __init__(self, *, input_manifest: str, min_chars: int | str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.input_manifest = input_manifest
        self.min_chars = min_chars
