"""The kill-and-resume modules' shared fixture: each module defines ``pipeline`` and ``reference``."""

from __future__ import annotations

import pytest

from reliability.scenarios import outcomes_of


@pytest.fixture(scope="module")
def outcomes(pipeline, reference):
    """Each scenario of the requesting module runs once; its two tests read the outcome."""
    yield from outcomes_of(pipeline, reference)
