"""benchmarks/RESULTS.md: each benchmark owns one block between ``<!-- name:start -->`` and ``<!-- name:end -->``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def replace_block(path: Path, name: str, text: str, after: str | None = None) -> None:
    """Put ``text`` between ``<!-- name:start -->`` and ``<!-- name:end -->`` in ``path`` (when absent: right after
    the block ``after`` if there is one, else appended), written to a temporary file and renamed, so a crash
    never leaves half a file."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    block = f"{start}\n{text.rstrip()}\n{end}"
    anchor = f"<!-- {after}:end -->" if after else None
    if start in old and end in old:
        new = old[: old.index(start)] + block + old[old.index(end) + len(end) :]
    elif anchor and anchor in old:
        cut = old.index(anchor) + len(anchor)
        new = old[:cut] + "\n\n" + block + old[cut:]
    else:
        new = old.rstrip() + "\n\n" + block + "\n"
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(new, encoding="utf-8")
    tmp.replace(path)


def measure_or_render(
    out: Path,
    name: str,
    measure: Callable[[], dict],
    render: Callable[[dict], str],
    again: bool,
    after: str | None = None,
) -> None:
    """A benchmark's ending: its figures measured (``measure()``) and their JSON written to ``out``, or, with
    ``again`` (its ``--render``), read back from ``out``; then its block ``name`` in RESULTS.md rebuilt from them
    (and printed; a new block goes right after the block ``after``), so the committed JSON always regenerates the
    table."""
    results = json.loads(out.read_text()) if again else measure()
    if not again:
        out.write_text(json.dumps(results, indent=1) + "\n")
    text = render(results)
    print(text)
    replace_block(RESULTS, name, text, after)
