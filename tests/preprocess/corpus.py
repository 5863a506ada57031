"""Real text for the preprocess tests, generated from what every Python install ships (no downloads):
prose from the standard library's docstrings, code from its modules, CJK text from its codec tests."""

from __future__ import annotations

import ast
import glob
import os
import re
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


# --------------------------------------------------------------------------------------------------
# Real navigation/index pages against real prose, from the Debian documentation packages
# (scripts/install_system_deps.sh installs python3.11-doc and debian-handbook).

PYDOC_HTML = "/usr/share/doc/python3.11/html"
HANDBOOK_HTML = "/usr/share/doc/debian-handbook/html/en-US"
_BLOCK = {
    "p", "div", "li", "dt", "dd", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "br", "pre", "table", "ul", "ol",
    "dl", "section", "blockquote", "article", "header", "footer", "nav", "hr", "figure", "figcaption", "caption",
}  # fmt: skip
_PARA_END = {"p", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "ul", "ol", "dl", "table", "blockquote"}
_SKIP = {"script", "style", "head", "title", "noscript"}


def html_to_text(raw: str) -> str:
    """Text of an HTML page, one line per block element, as a plain-text extractor gives it.

    Only the element marked ``role="main"`` is kept when there is one (Sphinx's body: what a
    boilerplate-removing extractor keeps); ``<pre>`` keeps its line breaks, other whitespace folds.
    """
    from html.parser import HTMLParser

    class _Parser(HTMLParser):
        def __init__(self, main_only: bool) -> None:
            super().__init__(convert_charrefs=True)
            self.main_only, self.main_depth, self.depth = main_only, None, 0
            self.skip, self.pre, self.parts = 0, 0, []

        def handle_starttag(self, tag, attrs):
            if tag in ("br", "hr", "img", "meta", "link", "input", "wbr"):
                if tag in ("br", "hr") and self._on():
                    self.parts.append("\x00")
                return
            self.depth += 1
            if self.main_only and self.main_depth is None and ("role", "main") in attrs:
                self.main_depth = self.depth
            if tag in _SKIP:
                self.skip += 1
            if tag == "pre":
                self.pre += 1
            if tag in _BLOCK and self._on():
                self.parts.append("\x00")
            elif tag in ("td", "th") and self._on():
                self.parts.append(" ")

        def handle_endtag(self, tag):
            if tag in ("br", "hr", "img", "meta", "link", "input", "wbr"):
                return
            if tag in _BLOCK and self._on():
                self.parts.append("\n\n" if tag in _PARA_END else "\x00")
            if tag in _SKIP:
                self.skip = max(0, self.skip - 1)
            if tag == "pre":
                self.pre = max(0, self.pre - 1)
            if self.main_depth is not None and self.depth == self.main_depth:
                self.main_depth = -1  # main closed: nothing after it
            self.depth -= 1

        def _on(self) -> bool:
            if self.skip:
                return False
            if self.main_only:
                return self.main_depth is not None and self.main_depth > 0
            return True

        def handle_data(self, data):
            if self._on():
                self.parts.append(data.replace("\n", "\x00") if self.pre else re.sub(r"\s+", " ", data))

    p = _Parser(main_only='role="main"' in raw)
    p.feed(raw)
    p.close()
    # a block boundary (\x00) is a line break, a paragraph end (\n\n) a blank line; spaces at line edges fold
    text = re.sub(r"[ \t]*[\x00\n][\x00\n \t]*", lambda m: "\n\n" if "\n" in m.group() else "\n", "".join(p.parts))
    return text.strip()


def page_label(path: str, raw: str) -> bool | None:
    """True for an index/navigation page, False for prose, None for a page left out.

    Python docs: the general and module indexes (``genindex*``, ``py-modindex``), ``contents``, the API
    indexes (``*-index.html``) and every page whose main content holds a Sphinx table of contents
    (``toctree-wrapper``: the section and chapter pages) and the front page are navigation; every other
    page is prose but ``search.html`` (empty without JavaScript). Debian handbook: ``sect.*`` pages are prose; chapter
    pages open with a table of contents and then prose, so they are left out.
    """
    name = os.path.basename(path)
    if path.startswith(PYDOC_HTML):
        if name == "search.html":
            return None
        if name.startswith("genindex") or name in ("py-modindex.html", "contents.html") or name.endswith("-index.html"):
            return True
        return path == os.path.join(PYDOC_HTML, "index.html") or "toctree-wrapper" in raw
    if path.startswith(HANDBOOK_HTML):
        return False if name.startswith("sect.") else None
    return None


def labelled_pages(prose_every: int = 1, skip_larger: int | None = None) -> list[tuple[str, bool, str]]:
    """(path, is_nav, text) of every labelled page: all navigation pages and every ``prose_every``-th prose
    page (per source), leaving out pages over ``skip_larger`` bytes of HTML."""
    out = []
    for root in (PYDOC_HTML, HANDBOOK_HTML):
        n_prose = 0
        for path in sorted(glob.glob(os.path.join(root, "**", "*.html"), recursive=True)):
            if skip_larger and os.path.getsize(path) > skip_larger:
                continue
            with open(path, encoding="utf-8", errors="replace") as f:
                raw = f.read()
            label = page_label(path, raw)
            if label is None:
                continue
            if not label:
                n_prose += 1
                if (n_prose - 1) % prose_every:
                    continue
            out.append((path, label, html_to_text(raw)))
    return out


# --------------------------------------------------------------------------------------------------
# Documents that trip each rule of the reference-compatible presets (tests/preprocess/test_compat.py), built
# from real prose. Each generator yields candidates from mild to strong; the test keeps, per rule, the first
# candidate whose first failing rule (ours) is that rule, and asks datatrove whether it agrees.


def _sentences(prose: list[str]) -> list[str]:
    out = []
    for doc in prose:
        for s in re.split(r"(?<=[.!?])\s+", " ".join(doc.split())):
            # plain sentences (letters and spaces, a comma at most): a base that trips no word rule
            if 8 <= len(s.split()) <= 30 and re.fullmatch(r"[A-Za-z ]+,?[A-Za-z ]+\.", s):
                out.append(s)
    return list(dict.fromkeys(out))


def rule_candidates(prose: list[str]) -> dict[str, list[str]]:
    """Candidate texts per rule name of ``gopher_compat``, ``c4_compat`` and ``fineweb_compat``."""
    sents = _sentences(prose)
    words = " ".join(sents).split()
    body = " ".join(sents[:40])  # ~600 words of ordinary prose
    lines = "\n".join(sents[40:80])
    short_words = [w for w in words if len(w) <= 2 and w.isalpha()]
    long_words = list(dict.fromkeys(w for w in words if len(w) >= 13 and w.isalpha()))
    no_stop = " ".join(
        w
        for w in body.split()
        if w.lower().strip(".,;:") not in {"the", "be", "to", "of", "and", "that", "have", "with"}
    )
    c: dict[str, list[str]] = {"empty": ["", "   \n  "]}
    c["gopher_short_doc"] = [sents[0], " ".join(sents[:2])]
    c["gopher_long_doc"] = [" ".join(sents[k % len(sents)] + f" Item {k}." for k in range(8000))]
    c["gopher_below_avg_threshold"] = [" ".join(short_words[:400])]
    c["gopher_above_avg_threshold"] = [" ".join(w for w in words if len(w) >= 12 and w.isalpha())]
    c["gopher_too_many_hashes"] = [
        " ".join(("#" + w if i % k == 0 else w) for i, w in enumerate(body.split())) for k in (9, 6, 4)
    ]
    c["gopher_too_many_ellipsis"] = [
        " ".join((w + " ..." if i % k == 0 else w) for i, w in enumerate(body.split())) for k in (9, 6, 4)
    ]
    c["gopher_too_many_bullets"] = ["\n".join("- " + s for s in sents[:60]), "\n".join("• " + s for s in sents[:60])]
    c["gopher_too_many_end_ellipsis"] = [
        "\n".join(s[:-1] + ("..." if i % 2 else ".") for i, s in enumerate(sents[:60]))
    ]
    c["gopher_below_alpha_threshold"] = [
        " ".join(f"{w} {i}" if i % k == 0 else w for i, w in enumerate(body.split())) for k in (3, 2, 1)
    ]
    c["gopher_enough_stop_words"] = [no_stop]
    paras = sents[:12]
    c["dup_para_frac"] = ["\n\n".join(paras[:6] + paras[:4])]
    c["dup_para_char_frac"] = [
        "\n\n".join([" ".join(sents[100:108])] + [f"Part {k}." for k in range(8)] + [" ".join(sents[100:108])])
    ]
    c["dup_line_frac"] = ["\n".join(paras[:6] + paras[:4])]
    c["dup_line_char_frac"] = [
        "\n".join([" ".join(sents[100:108])] + [f"Part {k}." for k in range(8)] + [" ".join(sents[100:108])])
    ]
    filler = body.split()
    for n, name in ((2, "top_2_gram"), (3, "top_3_gram"), (4, "top_4_gram")):
        gram = ["over", "the", "horizontal", "counterbalances"][:n]
        if n == 3:
            gram = ["in", "a", "counterbalancing"]
        if n == 4:
            gram = ["a", "b", "c", "counterbalancing"]
        c[name] = []
        for every in (12, 10, 8, 7, 6, 5, 4):
            out = []
            for i, w in enumerate(filler):
                out.append(w)
                if i % every == 0:
                    out.extend(gram)
            c[name].append(" ".join(out))
    phrase = "alpha bravo charlie delta echo foxtrot golf hotel india juliett kilo lima".split()
    for n in range(5, 11):
        c[f"duplicated_{n}_n_grams"] = []
        for reps in range(2, 40):
            out = list(filler)
            step = max(1, len(out) // reps)
            for r in range(reps):
                out[r * step : r * step] = phrase[:n] + [f"x{r}"]
            c[f"duplicated_{n}_n_grams"].append(" ".join(out))
    c["lorem_ipsum"] = [lines + "\nLorem ipsum dolor sit amet, consectetur adipiscing elit.\n" + lines]
    c["curly_bracket"] = [lines + "\nThe template replaces {name} with the value given.\n" + lines]
    c["too_few_sentences"] = [" ".join(sents[:3]), "\n".join(sents[:4])]
    c["line_punct_ratio"] = ["\n".join(s.rstrip(".") for s in sents[:60])]
    c["short_line_ratio"] = [
        "\n".join((s[:25].rstrip() + ".") if i % k else s for i, s in enumerate(sents[:60])) for k in (4, 8)
    ]
    c["char_dup_ratio"] = [lines + "\n" + sents[40]]
    c["list_ratio"] = ["\n".join(f"{a} {b}." for a, b in zip(long_words[0::2], long_words[1::2]))]
    return c
