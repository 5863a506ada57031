"""``curation run SPEC.json``: run a job spec, exactly as the backends do."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a stage from a job spec JSON (what every backend executes)")
    p.add_argument("spec")
    p.add_argument("--result", help="write the result JSON here")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from airflow_curation.jobs import main

    argv = ["run", args.spec] + (["--result", args.result] if args.result else [])
    return main(argv)
