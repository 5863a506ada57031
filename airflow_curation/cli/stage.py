"""``curation <stage>``: one subcommand per registered stage, its flags generated from the stage's settings.

What the command reads follows the stage's ``INPUTS``: raw input files (``curation ingest INPUT...``), an
upstream manifest (``--lake --dataset [--input-manifest]``, default: the newest complete manifest of the
stage's ``UPSTREAM``), or, for attrs stages, either that or plain Parquet files
(``curation <stage> FILE... --output DIR``). Every setting with ``cli=True`` is a flag
(``--name-with-dashes``; booleans get ``--x/--no-x``). A built-in stage may add a few convenience flags
and a richer summary through a module of its own, ``airflow_curation.cli.<stage>`` (``add_arguments``,
``settings``, ``summary``: each optional); a new stage needs none.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import logging
import sys
import traceback
from functools import partial
from types import ModuleType
from typing import Any

from airflow_curation.cli.common import (
    add_lake_args,
    files_or_lake,
    lake_from_args,
    local_absolute,
    manifest_from_args,
    print_summary,
    run_id_from_args,
)
from airflow_curation.cli.submit import add_backend_args, submit_and_follow
from airflow_curation.stages import stage_class, stage_names
from airflow_curation.stages.settings import Setting, Settings

log = logging.getLogger(__name__)

# A module of the CLI named after a stage holds its convenience flags and summary (by name, no table).
EXTRAS_PACKAGE = "airflow_curation.cli"
EXTRAS_HOOKS = ("add_arguments", "settings", "summary")


def stage_extras(name: str) -> ModuleType | None:
    """``airflow_curation.cli.<name>`` when it exists and defines one of :data:`EXTRAS_HOOKS`."""
    module = f"{EXTRAS_PACKAGE}.{name}"
    if not name.isidentifier() or importlib.util.find_spec(module) is None:
        return None
    extras = importlib.import_module(module)
    return extras if any(hasattr(extras, hook) for hook in EXTRAS_HOOKS) else None


def add_stage_command(sub: argparse._SubParsersAction, name: str) -> None:
    try:
        cls = stage_class(name)
    except Exception as e:  # noqa: BLE001 - one broken plugin must not take the whole CLI down
        p = sub.add_parser(name, help=f"(cannot load this stage: {e})")
        p.set_defaults(func=partial(_broken, name, e))
        return
    extras = stage_extras(name)
    doc = inspect.cleandoc(cls.__doc__ or f"Run the {name} stage.").replace("``", "")
    p = sub.add_parser(name, help=doc.split("\n\n")[0].split(". ")[0].rstrip("."), description=doc)
    _add_input_args(p, cls.INPUTS)
    add_setting_args(p, cls.SETTINGS)
    if extras is not None and hasattr(extras, "add_arguments"):
        extras.add_arguments(p)
    add_backend_args(p)
    p.set_defaults(func=partial(run_stage_command, name, cls, extras))


def _broken(name: str, error: Exception, args: argparse.Namespace) -> int:
    print(f"curation {name}: the stage cannot be loaded: {error}", file=sys.stderr)
    return 2


def _add_input_args(p: argparse.ArgumentParser, inputs: str) -> None:
    if inputs == "raw":
        p.add_argument("inputs", nargs="+", metavar="INPUT", help="files, folders or globs (local or fsspec URLs)")
        add_lake_args(p)
        return
    if inputs == "manifest_or_files":
        p.add_argument(
            "files",
            nargs="*",
            metavar="FILE",
            help="plain Parquet with id and text columns: files, folders (their .parquet files) or globs, local or "
            "fsspec URLs",
        )
        p.add_argument("--output", help="plain files: folder for the results")
        add_lake_args(p, required=False)
    else:
        add_lake_args(p)
    p.add_argument(
        "--input-manifest", help="the upstream stage's manifest URI (default: the newest complete upstream manifest)"
    )


def _metavar(s: Setting) -> str | None:
    if s.choices is None:
        return None
    return "{" + ",".join(str(c).lower() if isinstance(c, bool) else str(c) for c in s.choices) + "}"


def _cli_type(s: Setting, value: str) -> Any:
    try:
        return s.coerce(value, s.cli_flag)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_setting_args(p: argparse.ArgumentParser, settings: Settings) -> None:
    """One flag per setting with ``cli=True``; a flag not given leaves the setting to its default (one place:
    the stage). Renamed settings keep their old flag as a hidden alias."""
    for s in sorted(settings, key=lambda s: s.runtime):  # what changes the output first, then how it runs
        if not s.cli:
            continue
        text = s.help + (f" ({s.bounds})" if s.bounds else "")
        text += f" (default: {s.default})" if s.default not in (None, "", [], {}) else ""
        if s.type is bool:
            p.add_argument(
                s.cli_flag, dest=s.name, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS, help=text
            )
            if s.off_flag:
                p.add_argument(
                    s.off_flag,
                    dest=s.name,
                    action="store_false",
                    default=argparse.SUPPRESS,
                    help=f"the same as --no-{s.cli_flag[2:]}",
                )
            continue
        p.add_argument(
            s.cli_flag,
            dest=s.name,
            type=partial(_cli_type, s),
            default=argparse.SUPPRESS,
            metavar=_metavar(s),
            required=s.required,
            help=text,
        )
    for old, new in settings.renamed.items():
        if new in settings and settings[new].cli and settings[new].type is not bool:
            p.add_argument(
                "--" + old.replace("_", "-"),
                dest=new,
                type=partial(_cli_type, settings[new]),
                default=argparse.SUPPRESS,
                help=argparse.SUPPRESS,
            )


def settings_from_args(args: argparse.Namespace, settings: Settings) -> dict[str, Any]:
    return {s.name: getattr(args, s.name) for s in settings if s.cli and hasattr(args, s.name)}


def _source(args: argparse.Namespace, name: str, cls: type) -> tuple[Any, dict[str, Any]]:
    upstream = list(cls.UPSTREAM) if cls.UPSTREAM is not None else [n for n in stage_names() if n != name]
    if cls.INPUTS == "raw":
        return lake_from_args(args), {"inputs": args.inputs}
    if cls.INPUTS == "manifest_or_files":
        return files_or_lake(args, name, upstream)
    lake = lake_from_args(args)
    return lake, {"input_manifest": manifest_from_args(args, name, lake, upstream)}


def run_stage_command(name: str, cls: type, extras: ModuleType | None, args: argparse.Namespace) -> int:
    from airflow_curation.jobs import run_spec
    from airflow_curation.jobs.spec import JobSpec

    config = settings_from_args(args, cls.SETTINGS)
    if extras is not None and hasattr(extras, "settings"):
        config.update(extras.settings(args, config))
    lake, source = _source(args, name, cls)
    config.update(source)
    if isinstance(config.get("output_dir"), str):  # --output or --output-dir: kept in manifests, read elsewhere
        config["output_dir"] = local_absolute(config["output_dir"])
    spec = JobSpec(stage=name, lake=lake.to_dict(), run_id=run_id_from_args(args), config=config)
    try:
        if getattr(args, "backend", None):
            result = submit_and_follow(spec, args.backend, args.backend_options)
        else:
            result = run_spec(spec)
    except Exception as e:  # noqa: BLE001 - the user gets the reason, and the traceback with -v
        if getattr(args, "verbose", False):
            traceback.print_exc()
        print(f"curation {name}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if extras is not None and hasattr(extras, "summary"):
        result = extras.summary(args, result)
    print_summary(result)
    return 0
