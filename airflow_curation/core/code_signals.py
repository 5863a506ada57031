"""Code signals: comment lines and syntax-tree shape, per document.

Python parses with the standard library's ``ast`` (parses or not, node count, depth). Other languages
use ``tree-sitter`` with the per-language grammar wheels (``tree-sitter-c``, ``-cpp``, ``-java``,
``-go``, ``-rust``, ``-javascript``, ``-typescript``, ``-bash``), which ship their parsers and work
offline; a language whose grammar is not installed gets null syntax signals, never a guess.

Comment lines are found with the syntax tree where there is one (tree-sitter ``comment`` nodes; for
Python the ``tokenize`` module), so ``#`` inside a string is not a comment; text that does not tokenize
falls back to line prefixes. A comment line is a non-blank line whose every non-space character is in
a comment. ``comment_line_frac`` = comment lines / non-blank lines, ``comment_code_ratio`` = comment
lines / other non-blank lines.
"""

from __future__ import annotations

import ast
import importlib
import io
import posixpath
import tokenize
from collections.abc import Iterable, Sequence
from functools import cache

import pyarrow as pa

CODE_SIGNALS = ("comment_line_frac", "comment_code_ratio", "syntax_ok", "syntax_nodes", "syntax_depth")

EXTENSIONS = {
    ".py": "python",
    ".pyi": "python",
    ".c": "c",
    ".h": "c",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".cxx": "cpp",
    ".hpp": "cpp",
    ".hh": "cpp",
    ".java": "java",
    ".go": "go",
    ".rs": "rust",
    ".js": "javascript",
    ".mjs": "javascript",
    ".ts": "typescript",
    ".sh": "bash",
    ".bash": "bash",
}
_LINE_COMMENT = {
    "python": ("#",),
    "bash": ("#",),
    "c": ("//", "/*", "*"),
    "cpp": ("//", "/*", "*"),
    "java": ("//", "/*", "*"),
    "go": ("//", "/*", "*"),
    "rust": ("//", "/*", "*"),
    "javascript": ("//", "/*", "*"),
    "typescript": ("//", "/*", "*"),
}
_MAX_DEPTH_WALK = 10_000


def code_signals_schema() -> pa.Schema:
    return pa.schema(
        [
            pa.field("comment_line_frac", pa.float64()),
            pa.field("comment_code_ratio", pa.float64()),
            pa.field("syntax_ok", pa.bool_()),
            pa.field("syntax_nodes", pa.int64()),
            pa.field("syntax_depth", pa.int64()),
        ]
    )


def language_of(source: str | None, default: str | None = None) -> str | None:
    if source:
        ext = posixpath.splitext(source.lower())[1]
        if ext in EXTENSIONS:
            return EXTENSIONS[ext]
    return default


@cache
def _ts_parser(language: str):
    """A tree-sitter parser for ``language``, or None when tree-sitter or its grammar wheel is absent."""
    try:
        from tree_sitter import Language, Parser

        mod = importlib.import_module(f"tree_sitter_{language}")
    except ImportError:
        return None
    fn = getattr(mod, "language", None) or getattr(mod, f"language_{language}", None)
    if fn is None:
        return None
    return Parser(Language(fn()))


def _python_tree(text: str) -> tuple[bool, int | None, int | None]:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False, None, None
    nodes = 0
    depth = 0
    stack = [(tree, 1)]
    while stack:
        node, d = stack.pop()
        nodes += 1
        depth = max(depth, d)
        stack.extend((child, d + 1) for child in ast.iter_child_nodes(node))
    return True, nodes, depth


def _python_comment_spans(text: str) -> list[tuple[int, int, int, int]] | None:
    """(start_row, start_col, end_row, end_col) of each comment, rows 0-based; None if it does not tokenize."""
    spans = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                spans.append((tok.start[0] - 1, tok.start[1], tok.end[0] - 1, tok.end[1]))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return spans


def _ts_tree(parser, text: str):
    tree = parser.parse(text.encode("utf-8"))
    root = tree.root_node
    nodes = 0
    depth = 0
    comments = []
    cursor = root.walk()
    d = 1
    # iterative pre-order walk with the cursor: no recursion limit on deep trees
    while True:
        node = cursor.node
        nodes += 1
        depth = max(depth, d)
        if "comment" in node.type:
            comments.append((node.start_point[0], node.start_point[1], node.end_point[0], node.end_point[1]))
        if cursor.goto_first_child():
            d += 1
            continue
        while not cursor.goto_next_sibling():
            if not cursor.goto_parent():
                return (not root.has_error), nodes, depth, comments
            d -= 1


def _comment_lines(lines: list[str], spans, language: str | None, byte_cols: bool) -> tuple[int, int]:
    """(comment lines, other non-blank lines)."""
    nonblank = [i for i, ln in enumerate(lines) if ln.strip()]
    if spans is None:
        prefixes = _LINE_COMMENT.get(language or "", ("#", "//"))
        n_comment = sum(1 for i in nonblank if lines[i].lstrip().startswith(prefixes))
        return n_comment, len(nonblank) - n_comment
    covered: dict[int, list[tuple[int, int]]] = {}
    for r0, c0, r1, c1 in spans:
        for r in range(r0, r1 + 1):
            covered.setdefault(r, []).append((c0 if r == r0 else 0, c1 if r == r1 else 1 << 30))
    n_comment = 0
    for i in nonblank:
        if i not in covered:
            continue
        line = lines[i].encode("utf-8") if byte_cols else lines[i]
        ok = True
        for col, ch in enumerate(line):
            is_space = (ch in b" \t\r\f\v") if byte_cols else ch.isspace()
            if is_space:
                continue
            if not any(a <= col < b for a, b in covered[i]):
                ok = False
                break
        n_comment += ok
    return n_comment, len(nonblank) - n_comment


def code_signals_one(text: str, language: str | None) -> dict:
    lines = text.split("\n")
    ok = nodes = depth = None
    spans = None
    byte_cols = False
    if language == "python":
        ok, nodes, depth = _python_tree(text)
        spans = _python_comment_spans(text)
    elif language:
        parser = _ts_parser(language)
        if parser is not None:
            ok, nodes, depth, spans = _ts_tree(parser, text)
            byte_cols = True  # tree-sitter columns are byte offsets
    n_comment, n_code = _comment_lines(lines, spans, language, byte_cols)
    total = n_comment + n_code
    return {
        "comment_line_frac": n_comment / total if total else 0.0,
        "comment_code_ratio": n_comment / n_code if n_code else 0.0,
        "syntax_ok": ok,
        "syntax_nodes": nodes,
        "syntax_depth": depth,
    }


def compute_code_signals(texts: Iterable[str], languages: Sequence[str | None] | str | None) -> pa.Table:
    """Code signals for each text; ``languages`` is one language for all, or one per text (None: unknown)."""
    texts = list(texts)
    if languages is None or isinstance(languages, str):
        languages = [languages] * len(texts)
    rows = [code_signals_one(t or "", lang) for t, lang in zip(texts, languages)]
    schema = code_signals_schema()
    return pa.table({f.name: pa.array([r[f.name] for r in rows], type=f.type) for f in schema}, schema=schema)
