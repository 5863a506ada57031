"""Web crawl input: WARC (written by warcio, the reference writer), WET, ARC and .html files of real pages
(the Python documentation Debian ships), through the real ingest stage."""

from __future__ import annotations

import gzip
import io
import json
import zlib
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from ingest_helpers import books_close, ingest, quarantined
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from airflow_curation.core.html_text import EXTRACTORS, html_to_text

DOCS = Path("/usr/share/doc/python3.11/html/library")
PAGES = ["json.html", "csv.html", "gzip.html", "zlib.html"]
# A sentence of each page's main text (its first paragraph), and the page's navigation words.
EXPECTED = {
    "json.html": "JSON (JavaScript Object Notation)",
    "csv.html": "CSV (Comma Separated Values)",
    "gzip.html": "This module provides a simple interface to compress and decompress files",
    "zlib.html": "For applications that require data compression",
}


def _page(name: str) -> bytes:
    return (DOCS / name).read_bytes()


def _http(status: str, content_type: str) -> StatusAndHeaders:
    return StatusAndHeaders(status, [("Content-Type", content_type)], protocol="HTTP/1.1")


def write_warc(path: Path, extra: bool = True) -> Path:
    """A crawl as a crawler writes it: warcinfo, then request + response per page, plus records that are
    not documents (a 404, an image, metadata) when ``extra``."""
    with open(path, "wb") as f:
        w = WARCWriter(f, gzip=path.suffix == ".gz")
        w.write_record(w.create_warcinfo_record(path.name, {"software": "test"}))
        for name in PAGES:
            url = f"https://docs.python.org/3/library/{name}"
            req = StatusAndHeaders(
                "GET /3/library/" + name + " HTTP/1.1", [("Host", "docs.python.org")], is_http_request=True
            )
            w.write_record(w.create_warc_record(url, "request", http_headers=req))
            w.write_record(
                w.create_warc_record(
                    url,
                    "response",
                    payload=io.BytesIO(_page(name)),
                    http_headers=_http("200 OK", "text/html; charset=utf-8"),
                )
            )
        if extra:
            w.write_record(
                w.create_warc_record(
                    "https://docs.python.org/missing",
                    "response",
                    payload=io.BytesIO(b"<html>gone</html>"),
                    http_headers=_http("404 Not Found", "text/html"),
                )
            )
            w.write_record(
                w.create_warc_record(
                    "https://docs.python.org/logo.png",
                    "response",
                    payload=io.BytesIO(b"\x89PNG\r\n\x1a\n" + bytes(64)),
                    http_headers=_http("200 OK", "image/png"),
                )
            )
            w.write_record(
                w.create_warc_record(
                    "https://docs.python.org/3/library/json.html",
                    "metadata",
                    payload=io.BytesIO(b"fetchTimeMs: 12\n"),
                    warc_content_type="application/warc-fields",
                )
            )
    return path


def _rows(m) -> list[dict]:
    return [r for s in m.shards for r in pq.read_table(s.uri, columns=["id", "text", "meta"]).to_pylist()]


@pytest.mark.parametrize("suffix", [".gz", "", ".zst"])
def test_warc_responses_become_documents_with_their_crawl_metadata(tmp_path, suffix):
    path = write_warc(tmp_path / f"crawl.warc{suffix if suffix != '.zst' else ''}")
    if suffix == ".zst":  # zstd over the whole file (FastWARC panicked on the zstd reader's tell())
        import zstandard

        path = path.rename(path.with_name("crawl.warc.zst"))
        path.write_bytes(zstandard.ZstdCompressor().compress(path.read_bytes()))
    lake, m = ingest(tmp_path, [path])
    rows = _rows(m)
    assert len(rows) == len(PAGES) and m.accounting["read"] == len(PAGES) and books_close(m.accounting)
    by_url = {json.loads(r["meta"])["url"]: r for r in rows}
    for name in PAGES:
        row = by_url[f"https://docs.python.org/3/library/{name}"]
        meta = json.loads(row["meta"])
        assert EXPECTED[name] in row["text"] and "<" not in row["text"][:200]  # text, not markup
        assert meta["warc_record_id"].startswith("<urn:uuid:") and meta["warc_date"].startswith("20")
        assert (meta["content_type"], meta["charset"], meta["record_type"]) == ("text/html", "utf-8", "response")
    # the records that are not documents: one note, counted by kind, not rows
    notes = [q for q in quarantined(lake) if q["reason"] == "records_not_documents"]
    assert len(notes) == 1 and "request=4" in notes[0]["detail"] and "response 404=1" in notes[0]["detail"]
    assert "response image/png=1" in notes[0]["detail"] and "metadata=1" in notes[0]["detail"]
    assert m.accounting["notes"]["records_not_documents"] == 1


def test_wet_conversion_records_are_taken_as_they_are(tmp_path):
    path = tmp_path / "CC-MAIN-x.warc.wet.gz"
    texts = ["Plain text of the first page.\nSecond line.", "Zweite Seite: Übersicht und Einleitung."]
    with open(path, "wb") as f:
        w = WARCWriter(f, gzip=True)
        for i, t in enumerate(texts):
            w.write_record(
                w.create_warc_record(
                    f"https://example.org/{i}",
                    "conversion",
                    payload=io.BytesIO(t.encode()),
                    warc_content_type="text/plain",
                )
            )
    _, m = ingest(tmp_path, [path])
    assert sorted(r["text"] for r in _rows(m)) == sorted(texts)
    assert {json.loads(r["meta"])["record_type"] for r in _rows(m)} == {"conversion"}


def test_a_truncated_warc_keeps_what_came_before_and_quarantines_the_rest_with_where(tmp_path):
    whole = write_warc(tmp_path / "whole.warc", extra=False).read_bytes()
    cut = tmp_path / "in" / "cut.warc.gz"
    cut.parent.mkdir()
    # gzip the plain WARC as one member and cut it inside the last response
    cut.write_bytes(gzip.compress(whole)[: int(len(gzip.compress(whole)) * 0.85)])
    lake, m = ingest(tmp_path, [cut])
    kept = _rows(m)
    assert kept and len(kept) < len(PAGES)  # some pages before the cut, not all
    bad = [q for q in quarantined(lake) if q["reason"] in ("malformed_record", "truncated_input")]
    assert bad and "record" in bad[0]["location"] and "cut.warc.gz" in bad[0]["source"]
    assert books_close(m.accounting) and m.accounting["read"] == len(kept) + len(bad)


def _records(data: bytes) -> list[tuple[int, int, str]]:
    """(start, end, type) of every record of a whole, uncompressed WARC, by warcio (the reference reader)."""
    from warcio.archiveiterator import ArchiveIterator

    it = ArchiveIterator(io.BytesIO(data))
    starts = [(it.get_record_offset(), r.rec_type) for r in it]
    ends = [s for s, _ in starts[1:]] + [len(data)]
    return [(s, e, kind) for (s, kind), e in zip(starts, ends)]


def test_an_uncompressed_warc_cut_anywhere_never_keeps_part_of_a_page(tmp_path):
    """A plain ``.warc`` ends where it was cut (a copy stopped, a crawler killed): FastWARC yields the last
    record with what is there, so a page cut in its body or HTTP headers was kept as a shorter document.
    Each cut inside a page's record quarantines that record as ``truncated_record`` at its offset; the
    pages before it are whole."""
    from airflow_curation.stages.ingest.readers import Bad, Doc
    from airflow_curation.stages.ingest.warc import read_warc

    whole = write_warc(tmp_path / "whole.warc", extra=False).read_bytes()
    records = _records(whole)
    pages = [(s, e) for s, e, kind in records if kind == "response"]
    texts = {s: html_to_text(_page(name), "resiliparse") for (s, _), name in zip(pages, PAGES)}
    # cuts in every part of every page's record: WARC headers, HTTP headers, body, its last bytes
    cuts = sorted({s + d for s, e in pages for d in (5, 200, 420, 700, (e - s) // 2, e - s - 500) if s + d < e - 4})
    for cut in cuts:
        out = list(read_warc(io.BytesIO(whole[:cut]), "warc", "resiliparse", 1 << 26))
        docs = [o for o in out if isinstance(o, Doc)]
        bad = [o for o in out if isinstance(o, Bad) and o.rows]
        assert [d.text for d in docs] == [texts[s] for s, e in pages if e <= cut], cut
        (cut_page,) = [s for s, e in pages if s < cut < e]
        assert [b.reason for b in bad] == ["truncated_record" if cut - cut_page > 10 else "malformed_record"], cut
        if bad[0].reason == "truncated_record":
            assert bad[0].location.endswith(f"at byte {cut_page}"), (cut, bad[0].location)


def test_a_cut_warc_is_counted_through_the_stage(tmp_path):
    whole = write_warc(tmp_path / "whole.warc", extra=False).read_bytes()
    pages = [(s, e) for s, e, kind in _records(whole) if kind == "response"]
    cut = tmp_path / "in" / "cut.warc"
    cut.parent.mkdir()
    cut.write_bytes(whole[: (pages[2][0] + pages[2][1]) // 2])  # inside the third page's body
    lake, m = ingest(tmp_path, [cut])
    assert len(_rows(m)) == 2
    (bad,) = [q for q in quarantined(lake) if q["reason"] == "truncated_record"]
    assert (
        bad["location"] == f"record 7 at byte {pages[2][0]}"
    )  # warcinfo, then request + response a page and "cut.warc" in bad["source"]
    assert m.accounting["read"] == 3 and books_close(m.accounting)


def test_a_cut_arc_quarantines_its_last_page(tmp_path):
    pages = []
    for name in PAGES[:2]:
        body = b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\r\n" + _page(name)
        url = f"https://docs.python.org/3/library/{name}".encode()
        pages.append(url + b" 1.2.3.4 20260101000000 text/html %d\n" % len(body) + body + b"\n")
    version = b"1 0 test\nURL IP-address Archive-date Content-type Archive-length\n"
    head = b"filedesc://t.arc 0.0.0.0 20260101000000 text/plain %d\n" % len(version) + version + b"\n"
    path = tmp_path / "in" / "cut.arc"
    path.parent.mkdir()
    path.write_bytes(head + pages[0] + pages[1][: len(pages[1]) // 2])
    lake, m = ingest(tmp_path, [path])
    (row,) = _rows(m)
    assert EXPECTED[PAGES[0]] in row["text"]
    assert [q["reason"] for q in quarantined(lake) if q["rows"]] == ["truncated_record"]
    assert m.accounting["read"] == 2 and books_close(m.accounting)


def _chunked(body: bytes, size: int = 4000) -> bytes:
    chunks = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"


def _coded(page: bytes) -> dict[str, tuple[list[tuple[str, str]], bytes]]:
    """One page as servers send it: HTTP headers and body for each coding a crawler may have kept."""
    import brotli
    import zstandard

    raw_deflate = zlib.compressobj(wbits=-15)
    return {
        "plain": ([], page),
        "gzip": ([("Content-Encoding", "gzip")], gzip.compress(page)),
        "deflate": ([("Content-Encoding", "deflate")], zlib.compress(page)),
        "raw-deflate": ([("Content-Encoding", "deflate")], raw_deflate.compress(page) + raw_deflate.flush()),
        "br": ([("Content-Encoding", "br")], brotli.compress(page)),
        "zstd": ([("Content-Encoding", "zstd")], zstandard.ZstdCompressor().compress(page)),
        "chunked": ([("Transfer-Encoding", "chunked")], _chunked(page)),
        "chunked-gzip": (
            [("Content-Encoding", "gzip"), ("Transfer-Encoding", "chunked")],
            _chunked(gzip.compress(page)),
        ),
        # what Browsertrix and Common Crawl's crawler leave: the body decoded, the header kept
        "decoded-chunked": ([("Transfer-Encoding", "chunked")], page),
        "decoded-gzip": ([("Content-Encoding", "gzip")], page),
    }


def _write_responses(path: Path, responses: dict[str, tuple[list[tuple[str, str]], bytes]]) -> Path:
    with open(path, "wb") as f:
        w = WARCWriter(f, gzip=False)
        for name, (headers, body) in responses.items():
            http = StatusAndHeaders("200 OK", [("Content-Type", "text/html; charset=utf-8"), *headers], "HTTP/1.1")
            w.write_record(
                w.create_warc_record(f"https://e/{name}", "response", payload=io.BytesIO(body), http_headers=http)
            )
    return path


def test_chunked_and_compressed_bodies_are_decoded_as_warcio_decodes_them(tmp_path):
    """A crawler that writes what it received leaves bodies chunked and compressed in the WARC; FastWARC
    hands them over coded, so such a page was binary garbage. Each coding now gives the plain page's text,
    and the decoded body equals warcio's ``content_stream`` (what datatrove reads through)."""
    from warcio.archiveiterator import ArchiveIterator

    from airflow_curation.stages.ingest.http_body import decode_body

    page = _page("json.html")
    (tmp_path / "in").mkdir()
    path = _write_responses(tmp_path / "in" / "coded.warc", _coded(page))
    with open(path, "rb") as f:
        for r in ArchiveIterator(f):
            http = r.http_headers
            ours = decode_body(
                r.raw_stream.read(), http.get_header("Transfer-Encoding"), http.get_header("Content-Encoding"), 1 << 24
            )
            assert ours == page, r.rec_headers.get_header("WARC-Target-URI")
    _, m = ingest(tmp_path, [path])
    rows = {json.loads(r["meta"])["url"]: r["text"] for r in _rows(m)}
    assert len(rows) == len(_coded(page)) and len(set(rows.values())) == 1
    assert EXPECTED["json.html"] in rows["https://e/plain"]


def test_a_body_that_does_not_decode_or_decodes_too_large_is_quarantined(tmp_path):
    page = _page("json.html")
    bomb = gzip.compress(b"<p>" + b" " * (8 << 20))  # 8 MiB of markup from ~8 KiB
    path = _write_responses(
        tmp_path / "in.warc",
        {
            "ok": ([], page),
            "corrupt-gzip": ([("Content-Encoding", "gzip")], gzip.compress(page)[:20] + b"\x00" * 200),
            "unknown": ([("Content-Encoding", "compress")], b"\x1f\x9d\x90" + b"\x00" * 50),
            "bad-chunks": ([("Transfer-Encoding", "chunked")], b"10\r\n<html>0123456789AB\r\nzz\r\n"),
            "bomb": ([("Content-Encoding", "gzip")], bomb),
        },
    )
    lake, m = ingest(tmp_path, [path], max_text_bytes=1 << 20)  # records up to 4x + 1 MiB = 5 MiB
    assert len(_rows(m)) == 1
    got = {q["location"]: (q["reason"], q["detail"]) for q in quarantined(lake) if q["rows"]}
    reasons = sorted(reason for reason, _ in got.values())
    assert reasons == ["record_too_large", "undecodable_body", "undecodable_body", "undecodable_body"], got
    details = " | ".join(d for _, d in got.values())
    assert "Content-Encoding gzip" in details and "'compress'" in details and "not followed by CRLF" in details
    assert m.accounting["read"] == 5 and books_close(m.accounting)


def test_the_crawlers_identified_type_decides_over_the_servers(tmp_path):
    """Common Crawl adds ``WARC-Identified-Payload-Type`` (the type found in the bytes), which datatrove and
    FineWeb select on; a server's Content-Type is missing or wrong on a share of real pages."""
    page = _page("csv.html")
    cases = [  # (url, HTTP Content-Type or None, identified type or None, a document?)
        ("no-http-type", None, "text/html", True),
        ("wrong-http-type", "application/octet-stream", "text/html", True),
        ("json-served-as-html", "text/html", "application/json", False),
        ("no-identified-type", "text/html", None, True),
    ]
    path = tmp_path / "cc.warc"
    with open(path, "wb") as f:
        w = WARCWriter(f, gzip=False)
        for name, http_type, identified, _ in cases:
            http = StatusAndHeaders("200 OK", [("Content-Type", http_type)] if http_type else [], "HTTP/1.1")
            rec = w.create_warc_record(f"https://e/{name}", "response", payload=io.BytesIO(page), http_headers=http)
            if identified:
                rec.rec_headers.add_header("WARC-Identified-Payload-Type", identified)
            w.write_record(rec)
    lake, m = ingest(tmp_path, [path])
    metas = {json.loads(r["meta"])["url"]: json.loads(r["meta"]) for r in _rows(m)}
    assert sorted(metas) == sorted(f"https://e/{n}" for n, *_, doc in cases if doc)
    assert metas["https://e/wrong-http-type"]["content_type"] == "application/octet-stream"
    assert metas["https://e/wrong-http-type"]["identified_type"] == "text/html"
    (note,) = [q for q in quarantined(lake) if q["reason"] == "records_not_documents"]
    assert note["detail"].endswith("response application/json=1")


def test_a_page_the_crawler_cut_is_kept_and_says_so(tmp_path):
    """``WARC-Truncated`` (Common Crawl stops a fetch at 1 MiB): the record is whole, the page a part of one.
    It is kept, with the reason in ``meta.warc_truncated`` (null for a page fetched whole), by both parsers."""
    from airflow_curation.stages.ingest.warc import fastwarc_records, warcio_records

    page = _page("csv.html")
    path = tmp_path / "cut.warc"
    with open(path, "wb") as f:
        w = WARCWriter(f, gzip=False)
        for name, reason in (("whole", None), ("cut", "length"), ("slow", "Time")):
            http = StatusAndHeaders("200 OK", [("Content-Type", "text/html")], "HTTP/1.1")
            body = page[: len(page) // 2] if reason else page
            rec = w.create_warc_record(f"https://e/{name}", "response", payload=io.BytesIO(body), http_headers=http)
            if reason:
                rec.rec_headers.add_header("WARC-Truncated", reason)
            w.write_record(rec)
    for parse in (fastwarc_records, warcio_records):
        with open(path, "rb") as f:
            got = [(r.url, r.crawler_truncated, r.truncated) for r in parse(f, 1 << 20) if r.record_type == "response"]
        want = [("https://e/whole", None, False), ("https://e/cut", "length", False), ("https://e/slow", "time", False)]
        assert got == want, parse.__name__
    lake, m = ingest(tmp_path, [path])
    metas = {json.loads(r["meta"])["url"]: json.loads(r["meta"]) for r in _rows(m)}
    assert {u: meta["warc_truncated"] for u, meta in metas.items()} == {
        "https://e/whole": None,
        "https://e/cut": "length",
        "https://e/slow": "time",
    }
    assert m.accounting["kept"] == 3 and books_close(m.accounting)


def test_a_page_nested_past_any_browsers_depth_is_quarantined_not_extracted_for_minutes(tmp_path):
    """Resiliparse's main-content pass costs the square of the element depth: 100,000 nested <div>s took
    minutes, stalling the unit. Past MAX_DEPTH (browsers stop at 512) the page is ``html_too_deep``; a
    deep but possible page is extracted."""
    from airflow_curation.core.html_text import MAX_DEPTH

    def nested(depth: int, tag: str = "div") -> bytes:
        return (
            f"<html><body>{f'<{tag}>' * depth}<p>Text at depth {depth}.</p>{f'</{tag}>' * depth}</body></html>".encode()
        )

    path = _write_responses(
        tmp_path / "deep.warc",
        {
            "page": ([], _page("zlib.html")),
            "deep-ok": ([], nested(MAX_DEPTH - 10)),
            "deep-div": ([], nested(100_000)),
            "deep-span": ([], nested(MAX_DEPTH + 10, "span")),
        },
    )
    lake, m = ingest(tmp_path, [path])
    rows = {json.loads(r["meta"])["url"]: r["text"] for r in _rows(m)}
    assert sorted(rows) == ["https://e/deep-ok", "https://e/page"]
    assert rows["https://e/deep-ok"] == f"Text at depth {MAX_DEPTH - 10}."
    bad = sorted((q["reason"], q["detail"]) for q in quarantined(lake) if q["rows"])
    assert [r for r, _ in bad] == ["html_too_deep", "html_too_deep"] and str(MAX_DEPTH) in bad[0][1]
    assert m.accounting["read"] == 4 and books_close(m.accounting)


def test_trafilatura_is_not_given_a_page_of_more_tags_than_it_can_take(tmp_path):
    """trafilatura's time grows faster than a page of many links (100,000: ~21 CPU-s); past
    TRAFILATURA_MAX_TAGS the page is ``html_too_large`` (datatrove drops it after 1 s of wall time instead)."""
    from airflow_curation.core.html_text import TRAFILATURA_MAX_TAGS

    links = TRAFILATURA_MAX_TAGS // 2 + 10  # two tags a link
    many = "<html><body>" + "".join(f'<a href="/p{i}">link {i}</a> ' for i in range(links)) + "</body></html>"
    path = _write_responses(tmp_path / "big.warc", {"page": ([], _page("zlib.html")), "links": ([], many.encode())})
    lake, m = ingest(tmp_path, [path], html_extractor="trafilatura")
    assert [json.loads(r["meta"])["url"] for r in _rows(m)] == ["https://e/page"]
    (bad,) = [q for q in quarantined(lake) if q["rows"]]
    assert bad["reason"] == "html_too_large" and str(TRAFILATURA_MAX_TAGS) in bad["detail"]
    assert m.accounting["read"] == 2 and books_close(m.accounting)


def test_a_page_without_text_and_a_payload_over_the_limit_are_quarantined(tmp_path):
    path = tmp_path / "odd.warc"
    with open(path, "wb") as f:
        w = WARCWriter(f, gzip=False)
        for url, body in [("https://e/empty", b"<html><body></body></html>"), ("https://e/big", _page("json.html"))]:
            w.write_record(
                w.create_warc_record(
                    url, "response", payload=io.BytesIO(body), http_headers=_http("200 OK", "text/html")
                )
            )
    lake, m = ingest(tmp_path, [path], max_text_bytes=4096)  # records up to 4x + 1 MiB: the page passes
    reasons = sorted(q["reason"] for q in quarantined(lake))
    assert "no_text_extracted" in reasons and m.accounting["read"] == 2 and books_close(m.accounting)


def test_arc_files_are_read_too(tmp_path):
    body = b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\r\n" + _page("gzip.html")
    version = b"1 0 test\nURL IP-address Archive-date Content-type Archive-length\n"
    head = b"filedesc://t.arc 0.0.0.0 20260101000000 text/plain %d\n" % len(version)
    rec = b"https://docs.python.org/3/library/gzip.html 1.2.3.4 20260101000000 text/html %d\n" % len(body)
    path = tmp_path / "old.arc"
    path.write_bytes(head + version + b"\n" + rec + body + b"\n")
    _, m = ingest(tmp_path, [path])
    (row,) = _rows(m)
    assert EXPECTED["gzip.html"] in row["text"]
    assert json.loads(row["meta"])["url"] == "https://docs.python.org/3/library/gzip.html"


@pytest.mark.parametrize("extractor", EXTRACTORS)
def test_html_files_and_both_extractors_give_the_main_text(tmp_path, extractor):
    for name in PAGES:
        text = html_to_text(_page(name), extractor)
        assert EXPECTED[name] in text
        assert "Navigation" not in text.split("\n")[0]  # the page's menu is not its first line
    folder = tmp_path / "pages"
    folder.mkdir()
    for name in PAGES:
        (folder / name).write_bytes(_page(name))
    _, m = ingest(tmp_path, [folder], html_extractor=extractor)
    texts = [r["text"] for r in _rows(m)]
    assert len(texts) == len(PAGES)
    for name in PAGES:  # each page's opening sentence is in exactly one document
        assert sum(EXPECTED[name] in t for t in texts) == 1, name


def test_an_unknown_extractor_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="html_extractor"):
        ingest(tmp_path, [write_warc(tmp_path / "c.warc")], html_extractor="soup")


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_html_in_a_jsonl_or_parquet_column_goes_through_the_same_extractor(tmp_path, kind):
    import pyarrow as pa

    rows = [{"text": _page(name).decode("utf-8"), "url": f"https://docs.python.org/3/library/{name}"} for name in PAGES]
    rows.append({"text": "<html><body></body></html>", "url": "https://e/empty"})
    path = tmp_path / f"pages.{kind}"
    if kind == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    lake, m = ingest(tmp_path, [path], text_format="html")
    got = _rows(m)
    assert len(got) == len(PAGES) and books_close(m.accounting) and m.accounting["read"] == len(PAGES) + 1
    for row in got:
        name = json.loads(row["meta"])["url"].rsplit("/", 1)[-1]
        assert row["text"] == html_to_text(_page(name)) and EXPECTED[name] in row["text"]  # the same extractor
        assert "<div" not in row["text"]
    assert [q["reason"] for q in quarantined(lake)] == ["no_text_extracted"]
    # without the setting the markup is the text, as before
    _, plain = ingest(tmp_path / "plain", [path])
    markup = [r["text"] for r in _rows(plain) if "docs.python.org" in r["meta"]]
    assert len(markup) == len(PAGES) and all("<div" in text for text in markup)
