"""benchmarks/results.py: a benchmark rewrites its own block of RESULTS.md and nothing else."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "results.py"


def _results():
    spec = importlib.util.spec_from_file_location("bench_results", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_block_is_replaced_in_place_and_a_new_one_appended(tmp_path):
    results = _results()
    path = tmp_path / "RESULTS.md"
    path.write_text(
        "# Benchmark results\n\n<!-- a:start -->\nold a\n<!-- a:end -->\n\n<!-- b:start -->\nb\n<!-- b:end -->\n"
    )
    results.replace_block(path, "a", "new a\nsecond line\n\n")
    results.replace_block(path, "c", "c")
    assert path.read_text() == (
        "# Benchmark results\n\n<!-- a:start -->\nnew a\nsecond line\n<!-- a:end -->\n\n"
        "<!-- b:start -->\nb\n<!-- b:end -->\n\n<!-- c:start -->\nc\n<!-- c:end -->\n"
    )
    assert not list(tmp_path.glob("*.tmp"))  # written through a temporary file, renamed


def test_a_new_block_goes_right_after_the_block_it_follows(tmp_path):
    results = _results()
    path = tmp_path / "RESULTS.md"
    path.write_text("<!-- a:start -->\na\n<!-- a:end -->\n\n<!-- b:start -->\nb\n<!-- b:end -->\n")
    results.replace_block(path, "a2", "a2", after="a")
    results.replace_block(path, "a2", "a2 again", after="a")  # in place now
    results.replace_block(path, "c", "c", after="missing")  # no such block: appended
    assert path.read_text() == (
        "<!-- a:start -->\na\n<!-- a:end -->\n\n<!-- a2:start -->\na2 again\n<!-- a2:end -->\n\n"
        "<!-- b:start -->\nb\n<!-- b:end -->\n\n<!-- c:start -->\nc\n<!-- c:end -->\n"
    )
