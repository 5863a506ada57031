"""Real text for the preprocess tests, generated from what every Python install ships (no downloads):
prose from the standard library's docstrings, code from its modules, CJK text from its codec tests."""

from __future__ import annotations

import ast
import glob
import os
import sysconfig

STDLIB = sysconfig.get_paths()["stdlib"]


def stdlib_modules(limit: int | None = None) -> list[str]:
    files = sorted(glob.glob(os.path.join(STDLIB, "*.py")))
    return files[:limit] if limit else files


def code_docs(limit: int = 120) -> list[tuple[str, str]]:
    """(source path, text) of standard-library modules."""
    out = []
    for path in stdlib_modules():
        with open(path, encoding="utf-8", errors="replace") as f:
            out.append((os.path.relpath(path, STDLIB), f.read()))
        if len(out) >= limit:
            break
    return out


def prose_docs(limit: int = 400) -> list[str]:
    """English prose: each stdlib module's docstrings, one document per module, plus long single docstrings."""
    docs: list[str] = []
    for path in stdlib_modules():
        try:
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read())
        except (SyntaxError, UnicodeDecodeError):
            continue
        strings = []
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    strings.append(doc)
        if strings:
            docs.append("\n\n".join(strings))
            docs.extend(s for s in strings if len(s) > 600)
        if len(docs) >= limit:
            break
    return docs[:limit]


def cjk_docs() -> list[str]:
    folder = os.path.join(STDLIB, "test", "cjkencodings")
    out = []
    for path in sorted(glob.glob(os.path.join(folder, "*-utf8.txt"))):
        with open(path, encoding="utf-8") as f:
            out.append(f.read())
    return out
