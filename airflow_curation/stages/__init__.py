"""Stages: one engine each, all run by :class:`airflow_curation.stages.base.StageRunner`.

Stages are found by name, in this order:

1. :func:`register_stage` (or ``STAGES[name] = "module:Class"``) in this process: tests, notebooks,
   plugins that are not installed;
2. ``CURATION_STAGES="name=module:Class,..."`` in the environment: the same for job processes that a
   backend starts (they inherit the environment, not the registrations of the process that built them);
3. the entry-point group ``airflow_curation.stages`` of installed distributions (``pyproject.toml``):
   how the built-in stages and installed plugins declare theirs. It is the one registry of stages: the
   CLI, the job entry point, the operators and the provider info all read it.

So a new stage is its module and its operator plus one entry point (see ``docs/adding-a-stage.md``). A
checkout whose installed metadata predates an entry point needs ``pip install -e .`` again.
"""

from __future__ import annotations

import importlib
import os
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_curation.stages.base import Stage

ENTRY_POINT_GROUP = "airflow_curation.stages"
ENV_VAR = "CURATION_STAGES"

# Stages registered in this process: name -> class or "module:Class".
STAGES: dict[str, object] = {}


def register_stage(name: str, target: "type[Stage] | str") -> None:
    """Make a stage known by ``name`` in this process (before any entry point of that name).

    :param target: the stage class, or ``"module:Class"``.
    """
    if not isinstance(target, str) and getattr(target, "name", name) != name:
        raise ValueError(f"stage class {target.__name__} is named {target.name!r}, not {name!r}")
    STAGES[name] = target


def _from_env() -> dict[str, str]:
    found = {}
    for item in os.environ.get(ENV_VAR, "").split(","):
        name, sep, target = item.strip().partition("=")
        if sep and name.strip() and target.strip():
            found[name.strip()] = target.strip()
    return found


@lru_cache(maxsize=1)
def _entry_points() -> dict[str, str]:
    from importlib.metadata import entry_points

    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def _targets() -> dict[str, object]:
    return {**_entry_points(), **_from_env(), **STAGES}


def stage_names() -> list[str]:
    """Every stage known here: built-in, installed, named in the environment or registered."""
    return sorted(_targets())


def stage_class(name: str) -> "type[Stage]":
    target = _targets().get(name)
    if target is None:
        raise ValueError(f"unknown stage {name!r}; known: {stage_names()}")
    if not isinstance(target, str):
        return target
    module, _, attr = target.partition(":")
    cls = importlib.import_module(module)
    for part in attr.split("."):
        cls = getattr(cls, part)
    return cls
