"""HTML to text, with a choice of extractor (ingest of web crawls and ``.html`` files).

- ``resiliparse`` (default): Resiliparse's ``extract_plain_text`` with ``main_content=True`` (its
  boilerplate removal), on its own HTML5 parser (Lexbor); what DCLM and dolma-style pipelines use. Fast
  enough for a crawl on CPUs.
- ``trafilatura``: FineWeb's choice; slower, and more selective about what is main content.

``benchmarks/bench_html.py`` measures both on the same pages (throughput per core, agreement with
trafilatura's text, and what each keeps of headings, lists, tables and code blocks).
"""

from __future__ import annotations

from collections.abc import Callable

EXTRACTORS = ("resiliparse", "trafilatura")


def decode_html(data: bytes, charset: str | None = None) -> str:
    """The page's text as a str: the declared charset when it decodes, else the one Resiliparse detects
    from the bytes (meta tags and content), else UTF-8 with replacement characters."""
    from resiliparse.parse.encoding import bytes_to_str, detect_encoding

    if charset:
        try:
            return data.decode(charset)
        except (LookupError, UnicodeDecodeError):
            pass
    return bytes_to_str(data, detect_encoding(data))


# Resiliparse's main-content pass costs the square of the page's element depth (8,000 nested <div>s:
# 1.8 CPU-s, 100,000: minutes), so one crafted or broken page could stall a unit. No real page comes
# near: browsers stop nesting at 512 (Blink's parser depth cap), documentation pages sit at ~20.
MAX_DEPTH = 4000
_BROWSER_DEPTH = 512


def _deeper_than(depth: int) -> str:
    return " > ".join(["*"] * (depth + 1))  # an element with ``depth`` element ancestors


# Lexbor parses a selector on every call (0.7 ms for MAX_DEPTH's): the browser's depth is asked first.
_DEEPER, _DEEPER_THAN_BROWSERS = _deeper_than(MAX_DEPTH), _deeper_than(_BROWSER_DEPTH)


class PageRefused(ValueError):
    """An extractor is not given this page; each kind's ``reason`` names why (the quarantine's reason)."""

    reason: str


class PageTooDeep(PageRefused):
    """The page nests elements deeper than :data:`MAX_DEPTH`."""

    reason = "html_too_deep"


# trafilatura grows faster than the page on some shapes (100,000 links, 3.3 MB: ~21 CPU-s; 50,000: ~3.5;
# benchmarks/bench_html_depth.py). datatrove drops a page whose extraction passes 1 s of wall time (its
# sandbox's timeout), which depends on the machine; a page with more tags than this is refused instead, the
# same on every machine (Common Crawl's 1 MiB payloads stay under it but for degenerate ones).
TRAFILATURA_MAX_TAGS = 100_000


class PageTooLarge(PageRefused):
    """The page has more tags than the extractor is given (:data:`TRAFILATURA_MAX_TAGS`)."""

    reason = "html_too_large"


def resiliparse_main_text(tree) -> str:
    """Resiliparse's main text of a parsed page (``HTMLTree``), unguarded (the benchmark's peer)."""
    from resiliparse.extract.html2text import extract_plain_text

    return extract_plain_text(tree, main_content=True, alt_texts=False, links=False)


def _resiliparse(html: str) -> str:
    from resiliparse.parse.html import HTMLTree

    tree = HTMLTree.parse(html)
    # Depth needs an opening tag per level, so only a page with more '<' than MAX_DEPTH is asked (the
    # selectors run in Lexbor: ~3 ms on a 750 KB page of depth 20, 0.1 s on a chain of 4,000).
    if (
        html.count("<") > MAX_DEPTH
        and tree.document.query_selector(_DEEPER_THAN_BROWSERS) is not None
        and tree.document.query_selector(_DEEPER) is not None
    ):
        raise PageTooDeep(f"elements nest more than {MAX_DEPTH} deep (a browser stops at {_BROWSER_DEPTH})")
    return resiliparse_main_text(tree)


def _trafilatura(html: str) -> str:
    if html.count("<") > TRAFILATURA_MAX_TAGS:
        raise PageTooLarge(f"more than {TRAFILATURA_MAX_TAGS} tags for trafilatura (its time grows faster than a page)")
    return trafilatura_text(html)


def trafilatura_text(html: str) -> str:
    """trafilatura's text of a page, unguarded (the benchmark's peer)."""
    import trafilatura

    # deduplicate=False: a page is extracted on its own (no cache shared across documents, so the output
    # does not depend on the order pages come in); no comments, tables and formatting kept as text.
    text = trafilatura.extract(
        html, include_comments=False, include_tables=True, deduplicate=False, favor_precision=False
    )
    return text or ""


_BY_NAME: dict[str, Callable[[str], str]] = {"resiliparse": _resiliparse, "trafilatura": _trafilatura}


def extractor(name: str) -> Callable[[str], str]:
    """The function ``html -> text`` of one extractor.

    :param name: one of :data:`EXTRACTORS`.
    """
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown HTML extractor {name!r}; choose one of {', '.join(EXTRACTORS)}") from None


def html_to_text(data: bytes | str, name: str = "resiliparse", charset: str | None = None) -> str:
    """The main text of one HTML page (empty when it has none).

    :param data: the page, as bytes (decoded with ``charset`` or a detected one) or str.
    :param name: the extractor, one of :data:`EXTRACTORS`.
    :param charset: the charset the HTTP headers declared, if any.
    """
    html = decode_html(data, charset) if isinstance(data, bytes) else data
    return extractor(name)(html).strip()
