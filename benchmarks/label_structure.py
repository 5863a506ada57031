"""Label real HTML pages as navigation (index, table of contents, menu) or prose, from their paths and markup,
never from the structure signals: ``benchmarks/labels/structure_pages.json``.

Rules, in order (``reason`` in the file says which one decided):

1. by name: general and module indexes (``genindex*``, ``*modindex*``, ``Index.html`` of texinfo,
   libxslt's ``API*.html`` symbol indexes, gtk-doc's ``general.html`` module list), a Sphinx ``contents``
   page: navigation; ``search.html`` (empty without JavaScript): left out;
2. by markup: the share of the page's visible text inside navigation containers (an element whose
   class names a table of contents or an index: ``toc``, ``toctree-wrapper``, ``menu``, ``mini-toc``,
   ``indextable``, ``genindextable``, ``modindextable``; or a ``<nav>``); at least 0.5: navigation
   (a book's or a chapter's table of contents, a section page that lists its pages); below 0.15:
   prose; in between (a chapter page: its table of contents, then prose): left out.

Sets: ``tuning`` (the Python 3.11 documentation and the Debian handbook in en-US), ``held-out``
(every other package's HTML under /usr/share/doc: libxslt, libffi, Node.js, Valgrind, gtk-doc...) and
``held-out-languages`` (the Debian handbook in its 25 other languages: the same pages translated) and
``held-out-rust`` (the Rust toolchain's mdBook books, :data:`RUST_BOOKS`, added later: labelled before scored;
``toc.html`` is navigation, a redirect page and ``print.html`` are left out).
``held-out-fresh`` (:data:`FRESH_DIR`, added after ``held-out-new`` was scored; labelled and committed before any
signal change and before it was scored): javadoc's pages of eight JDK modules. Rules: by name, the A-Z index, the
class and package lists and the hierarchy trees (``package-tree.html``, ``overview-tree.html``) are navigation,
the constants and serialized-form listings and the search pages left out; by markup, the share above with
javadoc's item tables (``summary-table``, ``hierarchy``, ``index``) as navigation containers and its
``<header>``/``<nav>`` (navigation bar, sidebar table of contents: chrome the extractor drops) not counted; then
the extracted-text check below. 28 of its navigation pages are hierarchy trees (27 packages' and the overview's)
whose extracted text is their headings only (the extractor drops the tree's links); the item tables and indexes
(the layout the preset misses on rustdoc) are the other 13, reported on their own beside the set.
A sample of every rule's pages was read (the file's ``checked`` list).

usage: python -P benchmarks/label_structure.py
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys
from html.parser import HTMLParser

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "labels", "structure_pages.json")
# The Rust toolchain's mdBook books (added after the other sets were scored, labelled by the rules below before
# any was scored: the fresh held-out set); their API docs (rustdoc), Rust by Example's code pages and the
# unstable book's feature stubs are not books of prose and stay out.
RUST_DOC = os.path.expanduser("~/.rustup/toolchains/stable-x86_64-unknown-linux-gnu/share/doc/rust/html")
RUST_BOOKS = (
    "book",
    "reference",
    "nomicon",
    "cargo",
    "edition-guide",
    "embedded-book",
    "rustc",
    "rustdoc",
    "style-guide",
    "clippy",
)
# ``item-table``: rustdoc's list of a module's items (name, one-line summary), added with ``held-out-new``.
NAV_CLASSES = re.compile(
    r"(^|[\s-])(toc|toctree-wrapper|menu|mini-toc|indextable|genindextable|modindextable|item-table)($|\s)"
)
# ``held-out-new`` (built after every set above was scored, frozen before the signals changed, scored once): HTML
# documentation on this machine outside /usr/share/doc and the mdBook books above: npm's command docs, uniseg's
# Sphinx docs (dolma's venv), httplib2's latex2html reference (gsutil), IDLE's help page, Jetty's licence pages,
# the Rust standard library's module pages (rustdoc: a module's summary and its item list) and every 5th page of
# the Rust error-code index (an mdBook). Rust by Example and the unstable book stay out as above; the old
# root pages of the Rust docs are moved-here notices and rustdoc's app pages (help, settings).
NEW_SOURCES = (
    "/usr/lib/node_modules/npm/docs/output/**/*.html",
    "/work/main/.venv-dolma/lib/python3.11/site-packages/uniseg/docs/html/*.html",
    "/usr/lib/google-cloud-sdk/platform/gsutil/third_party/httplib2/ref/*.html",
    "/root/.pyenv/versions/3.11.7/lib/python3.11/idlelib/help.html",
    "/usr/lib/google-cloud-sdk/platform/google_appengine/google/appengine/tools/java/jetty94/jetty-home/*.html",
    RUST_DOC + "/std/**/index.html",
)
RUST_ERROR_CODES = RUST_DOC + "/error_codes/E*.html"
# ``held-out-fresh`` (built after held-out-new was scored and the preset's miss on rustdoc's item lists was known,
# labelled and committed before any signal change and before it was scored): the javadoc of eight JDK modules,
# generated by :func:`make_fresh` (Temurin 25's javadoc over its own src.zip): package and module summaries and
# the all-classes index are item tables (a name, then a one-sentence summary: the layout the preset misses on
# rustdoc), class pages are a member summary table then the members' documentation.
FRESH_DIR = "/work/shared/structure_fresh/javadoc"
FRESH_JDK = "/usr/lib/jvm/temurin-25-jdk-amd64"
FRESH_MODULES = (
    "java.sql",
    "java.logging",
    "java.compiler",
    "java.net.http",
    "java.prefs",
    "java.scripting",
    "java.management",
    "java.naming",
)
# javadoc's item tables (summary tables, the class hierarchy trees, the A-Z index's entries)
FRESH_NAV_CLASSES = re.compile(r"(^|\s)(summary-table|hierarchy|index)($|\s)")
# javadoc's constants tables and serialized-form listings are neither navigation nor prose; its search pages are
# empty without JavaScript
FRESH_LEFT_OUT = ("constant-values.html", "serialized-form.html", "search.html", "search-tags.html")
SKIP = {"script", "style", "head", "title", "noscript"}
VOID = {"br", "hr", "img", "meta", "link", "input", "col", "area", "base", "wbr", "source", "embed", "param"}


class _NavShare(HTMLParser):
    """Visible text characters in all, and inside navigation containers."""

    def __init__(self, chrome_sidebar: bool = False, javadoc: bool = False) -> None:
        super().__init__(convert_charrefs=True)
        # rustdoc's ``<nav class="sidebar">`` is site chrome that repeats the page's item list (the extractor
        # drops it): for ``held-out-new`` it is not counted as the page's navigation
        self.chrome_sidebar = chrome_sidebar
        # ``held-out-fresh``: javadoc's ``<header>`` and ``<nav>`` (the navigation bar, the page's sidebar table of
        # contents) are chrome the extractor drops: not counted at all; its item tables are navigation
        self.javadoc = javadoc
        self.stack: list[tuple[str, bool]] = []
        self.total = self.nav = 0
        self.skip = 0
        self.nav_text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in VOID:
            return
        cls = dict(attrs).get("class") or ""
        if self.javadoc:
            self.stack.append((tag, bool(FRESH_NAV_CLASSES.search(cls))))
            self.skip += tag in SKIP or tag in ("nav", "header")
            return
        is_nav = (tag == "nav" and not (self.chrome_sidebar and "sidebar" in cls.split())) or bool(
            NAV_CLASSES.search(cls)
        )
        self.stack.append((tag, is_nav))
        self.skip += tag in SKIP

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                for t, _ in self.stack[i:]:
                    self.skip -= t in SKIP or (self.javadoc and t in ("nav", "header"))
                del self.stack[i:]
                return

    def handle_data(self, data):
        if self.skip:
            return
        n = len(data.strip())
        self.total += n
        if any(nav for _, nav in self.stack):
            self.nav += n
            if n:
                self.nav_text.append(" ".join(data.split()))


def nav_share(raw: str, chrome_sidebar: bool = False, javadoc: bool = False) -> float:
    p = _NavShare(chrome_sidebar, javadoc)
    p.feed(raw)
    return p.nav / p.total if p.total else 0.0


def kept_navigation(raw: str, text: str, chrome_sidebar: bool = False, javadoc: bool = False) -> float:
    """The share of a page's navigation text (its navigation containers' strings, by characters) that its
    extracted ``text`` still holds: an extractor that drops a table of contents leaves the page's
    introduction, which is prose to any filter."""
    p = _NavShare(chrome_sidebar, javadoc)
    p.feed(raw)
    flat = " ".join(text.split())
    strings = [s for s in p.nav_text if len(s) > 2]
    total = sum(len(s) for s in strings)
    return sum(len(s) for s in strings if s in flat) / total if total else 1.0


# Read by a person (the page and its extracted text); where the rules above get it wrong.
OVERRIDES = {
    "/usr/share/doc/python3/python-policy.html": (
        "prose",
        "a single-page policy document (an unclosed element misleads the markup count)",
    ),
    "/usr/share/doc/python3/index.html": ("prose", "the same single-page policy document"),
    "/usr/share/doc/libxslt1-dev/html/html/index.html": ("nav", "the API reference's table of contents"),
    "/usr/share/doc/python3.11/html/index.html": ("nav", "the documentation's front page: a list of its parts"),
    "/usr/share/doc/libxslt1-dev/gtk-doc/html/libxslt/index.html": (
        "left_out",
        "a table-of-contents page whose extracted text is its introduction paragraph only",
    ),
    "/usr/share/doc/libxslt1-dev/gtk-doc/html/libexslt/index.html": (
        "left_out",
        "a table-of-contents page whose extracted text is its introduction paragraph only",
    ),
    "/usr/share/gtk-doc/html/libtasn1/index.html": ("nav", "the reference manual's table of contents"),
    "/usr/share/doc/nodejs/api/index.html": ("nav", "the API's table of contents (extracts to nothing)"),
    "/usr/share/doc/valgrind/html/index.html": ("nav", "the documentation's table of contents after a licence note"),
    "/usr/share/doc/valgrind/html/QuickStart.html": ("nav", "the quick start guide's table of contents"),
    "/usr/share/doc/valgrind/html/licenses.html": ("nav", "a table of contents of two licences"),
    # Found reading the held-out pages the structure preset dropped (docs/preprocess.md says so).
    "/usr/share/doc/libxslt1-dev/html/html/book1.html": (
        "nav",
        "the API reference's table of contents: the same page as html/index.html (the same extracted text)",
    ),
    "/usr/share/doc/libxslt1-dev/html/html/libxslt-lib.html": (
        "nav",
        "the API reference's table of contents: the same page as html/index.html (the same extracted text)",
    ),
    "/usr/share/doc/nodejs/template.html": ("left_out", "the HTML template of Node.js's pages: `__CONTENT__`, no page"),
}


# Pages whose extracted text (and markup, where it disagreed) was read to check the rules, beside the
# overrides above: the rules' label held for each.
CHECKED = [
    "/usr/share/doc/debian-handbook/html/en-US/index.html",
    "/usr/share/doc/python3.11/html/genindex.html",
    "/usr/share/doc/python3.11/html/genindex-A.html",
    "/usr/share/doc/python3.11/html/contents.html",
    "/usr/share/doc/python3.11/html/py-modindex.html",
    "/usr/share/doc/python3.11/html/library/netdata.html",
    "/usr/share/doc/python3.11/html/library/allos.html",
    "/usr/share/doc/python3.11/html/c-api/index.html",
    "/usr/share/doc/valgrind/html/manual.html",
    "/usr/share/doc/valgrind/html/dist.html",
    "/usr/share/doc/valgrind/html/tech-docs.html",
    "/usr/share/doc/libxslt1-dev/html/docs.html",
    "/usr/share/doc/libxslt1-dev/html/EXSLT/index.html",
    "/usr/share/doc/libxslt1-dev/gtk-doc/html/libxslt/general.html",
    "/usr/share/doc/libffi8/html/index.html",
    "/usr/share/doc/libffi8/html/Using-libffi.html",
    "/usr/share/gtk-doc/html/libtasn1/ch01.html",
    "/usr/share/doc/adduser/examples/adduser.local.conf.examples/skel.other/index.html",
    FRESH_DIR + "/java.sql/java/sql/package-tree.html",
    FRESH_DIR + "/system-properties.html",
    FRESH_DIR + "/java.compiler/javax/lang/model/type/MirroredTypeException.html",
    FRESH_DIR + "/help-doc.html",
    FRESH_DIR + "/java.sql/java/sql/package-summary.html",
    FRESH_DIR + "/java.sql/java/sql/Connection.html",
]


_NEW: set[str] = set()
_FRESH: set[str] = set()


def by_name(path: str) -> str | None:
    name = os.path.basename(path)
    if name == "search.html":
        return "left_out"
    if path in _FRESH:
        # the A-Z index, the class and package lists and the hierarchy trees: navigation by name
        if name in FRESH_LEFT_OUT:
            return "left_out"
        if name in ("index-all.html", "allclasses-index.html", "allpackages-index.html", "overview-tree.html"):
            return "nav"
        return "nav" if name == "package-tree.html" else None
    if path.startswith(RUST_DOC) and path in _NEW:
        return None  # held-out-new: rustdoc module pages and error-code pages, by markup
    if path.startswith(RUST_DOC):
        # mdBook: toc.html is the book's table of contents, print.html the whole book again, 404.html no page
        return {"toc.html": "nav", "print.html": "left_out", "404.html": "left_out"}.get(name)
    if (
        name.startswith("genindex")
        or "modindex" in name
        or name in ("Index.html", "contents.html")
        or (path.startswith("/usr/share/doc/python3.11/") and name.endswith("-index.html"))
    ):
        return "nav"
    if "/libxslt1-dev/html/" in path and name.startswith("API"):
        return "nav"
    if "/gtk-doc/" in path and (name == "general.html" or "api-index" in name):
        return "nav"
    return None


def label(path: str) -> tuple[str, str, float]:
    with open(path, encoding="utf-8", errors="replace") as f:
        raw = f.read()
    if 'http-equiv="refresh"' in raw:  # a redirect to another page: no page of its own
        return "left_out", "markup: a redirect", 0.0
    share = nav_share(raw, path in _NEW, path in _FRESH)
    named = by_name(path)
    if named:
        return named, "name", share
    if share >= 0.5:
        return "nav", "markup", share
    if share < 0.15:
        return "prose", "markup", share
    return "left_out", "markup", share


def new_paths() -> list[str]:
    """The pages of ``held-out-new`` (:data:`NEW_SOURCES`, every 5th error-code page)."""
    paths = [p for pat in NEW_SOURCES for p in sorted(glob.glob(pat, recursive=True))]
    return paths + sorted(glob.glob(RUST_ERROR_CODES))[::5]


def fresh_paths() -> list[str]:
    """The pages of ``held-out-fresh``: every page javadoc wrote (:func:`make_fresh`)."""
    return sorted(glob.glob(os.path.join(FRESH_DIR, "**", "*.html"), recursive=True))


def make_fresh() -> None:
    """Generate ``held-out-fresh`` once (about 100 CPU-seconds): Temurin 25's javadoc over its own sources."""
    import subprocess
    import tempfile
    import zipfile

    if os.path.isdir(FRESH_DIR):
        return
    with tempfile.TemporaryDirectory() as src:
        with zipfile.ZipFile(os.path.join(FRESH_JDK, "lib", "src.zip")) as z:
            z.extractall(src, [n for n in z.namelist() if n.split("/")[0] in FRESH_MODULES])
        cmd = [os.path.join(FRESH_JDK, "bin", "javadoc"), "-quiet", "-Xdoclint:none", "--module-source-path", src]
        subprocess.run(cmd + ["-d", FRESH_DIR, "--module", ",".join(FRESH_MODULES)], check=True)


def source_set(path: str) -> str:
    if path in _FRESH:
        return "held-out-fresh"
    if path in _NEW:
        return "held-out-new"
    if path.startswith(RUST_DOC):
        return "held-out-rust"
    if path.startswith("/usr/share/doc/python3.11/") or path.startswith("/usr/share/doc/debian-handbook/html/en-US/"):
        return "tuning"
    if path.startswith("/usr/share/doc/debian-handbook/"):
        return "held-out-languages"
    return "held-out"


def extracted_check(path: str, lab: str, reason: str) -> tuple[str, str]:
    """A navigation page whose extracted text kept under half of its navigation and still has 20 words or more
    (its introduction: prose to any filter) is left out; one where only a title remains stays navigation."""
    if lab != "nav" or reason.startswith("read"):
        return lab, reason
    from airflow_curation.core.html_text import html_to_text

    with open(path, "rb") as f:
        data = f.read()
    text = html_to_text(data)
    kept = kept_navigation(data.decode("utf-8", "replace"), text, path in _NEW, path in _FRESH)
    if kept < 0.5 and len(text.split()) >= 20:
        return "left_out", f"{reason}; the extractor kept {kept:.0%} of its navigation (its introduction remains)"
    if kept < 0.5:
        return lab, f"{reason}; the extractor kept {kept:.0%} of its navigation (a title remains)"
    return lab, f"{reason}; the extractor kept {kept:.0%} of its navigation"


def main() -> int:
    old = {}
    if os.path.exists(OUT):
        with open(OUT) as fh:
            old = json.load(fh)
    known = {r["path"]: r for r in old.get("pages", [])}  # a page's label is a function of its file
    rows, seen = [], set()
    rust = [p for b in RUST_BOOKS for p in glob.glob(os.path.join(RUST_DOC, b, "**", "*.html"), recursive=True)]
    new = new_paths()
    _NEW.update(os.path.realpath(p) for p in new)
    make_fresh()
    fresh = fresh_paths()
    _FRESH.update(os.path.realpath(p) for p in fresh)
    for path in sorted(glob.glob("/usr/share/doc/**/*.html", recursive=True)) + sorted(rust) + new + fresh:
        real = os.path.realpath(path)
        # Packages that link another's documentation (python3.11-doc -> python3.11) hold no page of their own.
        if not os.path.isfile(path) or real in seen:
            continue
        seen.add(real)
        path = real
        if path in OVERRIDES:
            lab, reason, share = OVERRIDES[path][0], "read: " + OVERRIDES[path][1], 0.0
        elif by_name(path):
            k = known.get(path, {})
            lab, reason, share = (
                (k["label"], k["reason"], k["nav_share"])
                if k.get("reason", "").startswith("name")
                else (by_name(path), "name", 0.0)
            )
        elif path in known and known[path]["reason"].startswith("markup") and known[path]["label"] != "left_out":
            lab, reason, share = known[path]["label"], known[path]["reason"], known[path]["nav_share"]
        else:
            lab, reason, share = label(path)
        if "extractor kept" in reason:
            lab, reason = extracted_check(path, "nav", reason.split(";")[0])
        elif lab == "nav":
            lab, reason = extracted_check(path, lab, reason)
        rows.append(
            {"path": path, "set": source_set(path), "label": lab, "reason": reason, "nav_share": round(share, 3)}
        )
    # a labelled page whose file is gone from this machine (a removed venv) keeps its row: the sets stay frozen
    done = {r["path"] for r in rows}
    rows += [r for p, r in known.items() if p not in done and not os.path.exists(p)]
    counts: dict[str, dict[str, int]] = {}
    for r in rows:
        c = counts.setdefault(r["set"], {})
        c[r["label"]] = c.get(r["label"], 0) + 1
    checked = [{"path": p, "note": "read; the rule's label held"} for p in CHECKED]
    checked += [{"path": p, "note": "read; overridden: " + note} for p, (_, note) in OVERRIDES.items()]
    doc = {"counts": counts, "checked": checked, "pages": rows}
    with open(OUT + ".tmp", "w") as fh:
        json.dump(doc, fh, indent=0)
    os.replace(OUT + ".tmp", OUT)
    print(json.dumps(counts, indent=1), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
