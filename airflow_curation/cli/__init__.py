"""``curation``: run any stage without Airflow, on a lake or on plain Parquet files.

``curation <stage> ...`` exists for every registered stage (built-in, installed through the
``airflow_curation.stages`` entry points, or registered in this process); its flags come from the stage's
settings (:mod:`airflow_curation.cli.stage`). ``curation run SPEC.json`` runs a job spec as the backends do;
``curation quality-train`` trains the ``quality`` stage's classifier.
"""

from __future__ import annotations

import argparse
import logging
import sys

from airflow_curation.cli import quality as quality_command
from airflow_curation.cli import run as run_command
from airflow_curation.cli.stage import add_stage_command
from airflow_curation.stages import stage_names


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="curation", description="Curate LLM training data: run any stage without Airflow."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging, tracebacks on failure")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in stage_names():
        add_stage_command(sub, name)
    run_command.register(sub)
    quality_command.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
