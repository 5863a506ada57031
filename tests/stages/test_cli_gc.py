"""``curation``'s main(): the gc is unfrozen on return for in-process callers, left frozen for the program."""

from __future__ import annotations

import gc
import sys

from airflow_curation.cli import main


def _command(tmp_path) -> list[str]:
    # a command that runs through main()'s freeze and returns at once: its input does not exist (exit 1)
    return ["preprocess", str(tmp_path / "missing.parquet"), "--output", str(tmp_path / "out")]


def test_main_with_argv_unfreezes(tmp_path):
    gc.unfreeze()
    assert main(_command(tmp_path)) == 1
    assert gc.get_freeze_count() == 0


def test_main_as_the_program_stays_frozen(tmp_path, monkeypatch):
    gc.unfreeze()
    monkeypatch.setattr(sys, "argv", ["curation", *_command(tmp_path)])
    try:
        assert main() == 1
        # teardown's collection would walk these objects again: they stay out of it
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
