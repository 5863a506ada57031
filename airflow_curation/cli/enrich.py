"""``curation enrich`` conveniences: ``--prompt-template @FILE`` reads the template from a file."""

from __future__ import annotations

import argparse
from typing import Any


def settings(args: argparse.Namespace, config: dict[str, Any]) -> dict[str, Any]:
    template = config.get("prompt_template")
    if template and template.startswith("@"):
        with open(template[1:]) as f:
            return {"prompt_template": f.read()}
    return {}
