"""``curation``: run any stage without Airflow, on a lake or on plain Parquet files.

``curation <stage> ...`` exists for every registered stage (built-in, installed through the
``airflow_curation.stages`` entry points, or registered in this process); its flags come from the stage's
settings (:mod:`airflow_curation.cli.stage`). ``curation run SPEC.json`` runs a job spec as the backends do;
``curation quality-train`` trains the ``quality`` stage's classifier; ``curation trace`` names the source
documents of a written training sequence; ``curation warm`` compiles the stages' numba kernels into numba's
cache (once per install or image build).
"""

from __future__ import annotations

import argparse
import gc
import logging
import sys

from airflow_curation.cli import quality as quality_command
from airflow_curation.cli import run as run_command
from airflow_curation.cli import trace as trace_command
from airflow_curation.cli import warm as warm_command
from airflow_curation.cli.stage import add_stage_command
from airflow_curation.core.allocator import use_small_pages
from airflow_curation.stages import stage_names


def _version() -> str:
    """The installed distribution's version (the package's ``__init__`` is the provider's: it imports Airflow)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("airflow-curation")
    except PackageNotFoundError:
        return "(not installed)"


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of command ``only`` alone: a stage's process then imports that
    stage's modules, not every stage's (a fixed cost paid by every task)."""
    parser = argparse.ArgumentParser(
        prog="curation", description="Curate LLM training data: run any stage without Airflow."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging, tracebacks on failure")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in stage_names():
        if only in (None, name):
            add_stage_command(sub, name)
    if only in (None, "run"):
        run_command.register(sub)
    if only in (None, "quality-train"):
        quality_command.register(sub)
    if only in (None, "trace"):
        trace_command.register(sub)
    if only in (None, "warm"):
        warm_command.register(sub)
    return parser


def _command(argv: list[str]) -> str | None:
    """The command named in ``argv`` when it is a known one (the top-level flags take no values)."""
    words = [a for a in argv if not a.startswith("-")]
    if words and (words[0] in ("run", "quality-train", "trace", "warm") or words[0] in stage_names()):
        return words[0]
    return None


# Two-word spellings of commands: ``curation quality train`` is ``curation quality-train`` (the stage's own
# subcommand takes FILE arguments, so "train" cannot be a sub-subcommand of it).
ALIASES = {("quality", "train"): "quality-train"}


def _aliased(argv: list[str]) -> list[str]:
    words = [i for i, a in enumerate(argv) if not a.startswith("-")][:2]
    if len(words) == 2 and words[1] == words[0] + 1:
        name = ALIASES.get((argv[words[0]], argv[words[1]]))
        if name:
            return [*argv[: words[0]], name, *argv[words[1] + 1 :]]
    return argv


def main(argv: list[str] | None = None) -> int:
    program = argv is None  # the process's own command line: nothing runs after main() but teardown
    argv = _aliased(list(sys.argv[1:] if argv is None else argv))
    args = build_parser(_command(argv)).parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # The imports (numba, pyarrow, the stage's modules) leave ~10^5 long-lived objects that every full
    # collection would walk again while numba loads its kernels and the command runs: frozen, they are left
    # out (0.2-0.4 of a preprocess process's ~1.5 CPU s of fixed cost, benchmarks/RESULTS.md). Unfrozen on
    # return when argv was given (callers that run main() in a longer-lived process, tests); without argv
    # main() is the program and the process ends next: still frozen, the interpreter's teardown collection
    # skips them too (~0.3 CPU s of a preprocess process).
    gc.freeze()
    use_small_pages()  # here too: a global step's work and the clusters this process starts (core.allocator)
    try:
        code = int(args.func(args) or 0)
        jit = sys.modules.get("airflow_curation.core.jit")  # imported by a stage with kernels, not for this
        if jit is not None and args.command != "warm":  # warm reports every kernel itself
            jit.log_compiles(logging.getLogger("airflow_curation.cli"))
        return code
    finally:
        if program:
            gc.freeze()  # what the command kept is left out of the teardown collection as well
        else:
            gc.unfreeze()


if __name__ == "__main__":
    sys.exit(main())
