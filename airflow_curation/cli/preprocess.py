"""``curation preprocess`` conveniences: ``--stop-words`` and ``--tokenizer`` fill the ``signals`` setting,
and plain files run in-process unless ``--mapper`` says otherwise (a Dask cluster for a few files costs
more than it saves)."""

from __future__ import annotations

import argparse
from typing import Any


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stop-words", help="comma-separated stop list (default: Gopher's 8 English words)")
    p.add_argument("--tokenizer", help="'default' or hf:<tokenizer.json> for n_tokens")


def settings(args: argparse.Namespace, config: dict[str, Any]) -> dict[str, Any]:
    signals = dict(config.get("signals") or {})
    if args.stop_words:
        signals["stop_words"] = [w for w in args.stop_words.split(",") if w]
    if args.tokenizer and args.tokenizer != "default":
        signals["tokenizer"] = args.tokenizer
    out: dict[str, Any] = {"signals": signals} if signals else {}
    if args.files and "mapper" not in config:
        out["mapper"] = "local"
    return out
