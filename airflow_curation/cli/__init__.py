"""``curation``: run any stage without Airflow, on a lake or on plain Parquet files.

Each subcommand lives in its own module here and exposes ``register(subparsers)``, which adds a parser
whose ``func(args) -> int`` runs it.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

# One module per subcommand; each adds itself in register().
SUBCOMMANDS = [
    "airflow_curation.cli.dedup",
    "airflow_curation.cli.validate",
    "airflow_curation.cli.run",
    "airflow_curation.cli.ingest",
    "airflow_curation.cli.preprocess",
    "airflow_curation.cli.enrich",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="curation", description="Curate LLM training data: run any stage without Airflow.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
