"""Labelled documents for the quality tests, generated from what every Python install ships (no downloads).

For each standard-library module, two documents about the same names:

- ``prose`` (label 1): the module's docstrings, paragraphs of English;
- ``nav`` (label 0): the kind of page a curator drops and heuristic filters let through: an index or
  navigation page of that module, one short item per line (qualified names, "class X", "index", "next",
  "previous", breadcrumbs, a table of contents), the shape of Sphinx's genindex and module pages.

Both kinds share their vocabulary (the module's own names), so a model must learn the shape of the text,
not which words it uses. Modules are split, not documents: held-out rows come from modules the model never
saw.
"""

from __future__ import annotations

import ast
import glob
import os
import random
import sysconfig

STDLIB = sysconfig.get_paths()["stdlib"]


def _module_docs(path: str) -> tuple[str, str] | None:
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (SyntaxError, UnicodeDecodeError):
        return None
    name = os.path.basename(path)[:-3]
    strings, names = [], []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                strings.append(doc)
            if not isinstance(node, ast.Module):
                kind = "class" if isinstance(node, ast.ClassDef) else "function"
                names.append((kind, node.name))
    prose = "\n\n".join(s for s in strings if len(s.split()) >= 8)
    if len(prose.split()) < 60 or len(names) < 6:
        return None
    rng = random.Random(name)
    # Headers and footers vary (and are often absent): the model must not key on one fixed string.
    headers = [f"{name} — Python documentation", f"Module index: {name}", f"{name}", "Contents", "API reference"]
    footers = ["« previous | next »", f"Python » Library » {name}", "Back to top", "Page source", "Home"]
    lines = rng.sample(headers, rng.randint(0, 2)) + [f"{name} module"]
    for kind, n in names[:80]:
        lines.append(rng.choice([f"{name}.{n}", f"{n}()", f"{kind} {name}.{n}", f"{n} ({name} module)", f"• {n}"]))
        if rng.random() < 0.1:
            lines.append(rng.choice(["Previous topic", "Next topic", "This Page", "Show Source", "Quick search"]))
    lines += rng.sample(footers, rng.randint(0, 2))
    return prose, "\n".join(lines)


def labelled(limit: int = 400) -> list[tuple[str, str, int, str]]:
    """``(id, text, label, module)`` rows: 1 for prose, 0 for navigation, two per module."""
    rows = []
    for path in sorted(glob.glob(os.path.join(STDLIB, "*.py"))):
        docs = _module_docs(path)
        if docs is None:
            continue
        module = os.path.basename(path)[:-3]
        rows.append((f"{module}-prose", docs[0], 1, module))
        rows.append((f"{module}-nav", docs[1], 0, module))
        if len(rows) >= limit:
            break
    return rows


def split(rows, test_fraction: float = 0.3):
    """Train and held-out rows, by module (every ``1/test_fraction``-th module is held out)."""
    modules = sorted({r[3] for r in rows})
    step = round(1 / test_fraction)
    held = set(modules[::step])
    return [r for r in rows if r[3] not in held], [r for r in rows if r[3] in held]
