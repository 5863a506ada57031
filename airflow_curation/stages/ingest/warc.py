"""Web crawl input for ingest: WARC, WET and ARC files, and plain ``.html`` pages, streamed record by record.

What becomes a document (an input row):

- a WET ``conversion`` record (Common Crawl's extracted text): its text as it is;
- a WARC ``response`` (HTTP 200) or ``resource`` record whose content type is HTML: its main text, by the
  extractor chosen (:mod:`airflow_curation.core.html_text`); with ``html_only`` off, ``text/plain`` too. The
  type is the crawler's ``WARC-Identified-Payload-Type`` where the record has one, else the declared one.

Each document's ``meta`` holds ``url``, ``warc_record_id``, ``warc_date``, ``content_type``,
``identified_type``, ``charset``, ``record_type`` and ``offset`` (the record's byte offset in the
decompressed stream). Other records
(``warcinfo``, ``request``, ``metadata``, non-HTML or non-200 responses) are not documents: one note per file
counts them by kind. A record the parser cannot read, a truncated file, or a page with no text is
quarantined with the file, the record's offset and the reason, and counted like any other input row.

FastWARC (Rust) parses WARC and WET; warcio parses ARC, which FastWARC does not read
(``benchmarks/bench_html.py`` measures both parsers on the same WARC files).
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

from airflow_curation.core.html_text import PageRefused, decode_html, extractor
from airflow_curation.stages.ingest.http_body import BodyTooLarge, decode_body
from airflow_curation.stages.ingest.readers import RAW_HEAD, STREAM_ERRORS, Bad, Doc

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
TEXT_TYPES = HTML_TYPES | {"text/plain"}
DOCUMENT_RECORDS = frozenset({"response", "resource", "conversion"})
# What a parser raises for a record it cannot read (besides a damaged compressed stream).
PARSE_ERRORS = (*STREAM_ERRORS, OSError, ValueError, zlib.error)


@dataclass
class Record:
    """One WARC/ARC record, parser-neutral."""

    index: int  # 1-based, in file order
    offset: int
    record_type: str
    url: str | None
    record_id: str | None
    date: str | None
    status: int | None  # HTTP status of a response, None for other records
    content_type: str | None  # the HTTP Content-Type's media type, else the WARC Content-Type's
    # WARC-Identified-Payload-Type: the type the crawler found by looking at the bytes (Common Crawl's)
    identified_type: str | None
    charset: str | None
    length: int  # payload bytes (the HTTP body of a response)
    payload: bytes | None  # None when not read (not a document, or larger than allowed)
    # A document record cut short by the end of the input: its payload holds fewer bytes than its headers
    # declare, or its WARC headers end before their Content-Length (an input cut inside them).
    truncated: bool = False
    # WARC-Truncated: the crawler cut the payload when it fetched it (length, time, disconnect, unspecified;
    # Common Crawl stops at 1 MiB). A whole record of a cut page: kept, and said in meta.
    crawler_truncated: str | None = None
    # The response's HTTP codings, when the parser leaves the body coded (FastWARC; warcio decodes it).
    transfer_encoding: str | None = None
    content_encoding: str | None = None

    @property
    def media(self) -> str | None:
        """What the payload is: the crawler's identified type where it has one (what datatrove and FineWeb
        select on: a server's Content-Type is missing or wrong on a share of real pages), else the declared."""
        return self.identified_type or self.content_type


def fastwarc_records(stream: IO[bytes], max_payload: int) -> Iterator[Record]:
    """WARC/WET records by FastWARC. A payload longer than ``max_payload`` is not read."""
    from fastwarc import ArchiveIterator

    for i, r in enumerate(ArchiveIterator(stream, parse_http=True, stream_detect=False), start=1):
        kind = str(r.record_type).rsplit(".", 1)[-1].lower()
        http = r.http_headers if r.is_http else None
        media = (r.http_content_type if http is not None else _media(r.headers.get("Content-Type"))) or None
        length = int(r.content_length or 0)
        payload = r.reader.read() if kind in DOCUMENT_RECORDS and length <= max_payload else None
        # FastWARC yields what a cut input holds without a word: a payload short of the length it counts
        # down from the headers, or (a cut inside the WARC headers) a record with no Content-Length at all.
        truncated = kind in DOCUMENT_RECORDS and (
            r.headers.get("Content-Length") is None or (payload is not None and len(payload) < length)
        )
        yield Record(
            index=i,
            offset=int(r.stream_pos),
            record_type=kind,
            url=r.headers.get("WARC-Target-URI"),
            record_id=r.record_id,
            date=r.headers.get("WARC-Date"),
            status=int(http.status_code) if http is not None and http.status_code is not None else None,
            content_type=media.lower() if media else None,
            identified_type=_media(r.headers.get("WARC-Identified-Payload-Type")),
            charset=(r.http_charset or None) if http is not None else None,
            length=length if payload is None else len(payload),
            payload=payload,
            truncated=truncated,
            crawler_truncated=_lower(r.headers.get("WARC-Truncated")),
            transfer_encoding=http.get("Transfer-Encoding") if http is not None else None,
            content_encoding=http.get("Content-Encoding") if http is not None else None,
        )


def warcio_records(stream: IO[bytes], max_payload: int) -> Iterator[Record]:
    """WARC and ARC records by warcio (ARC records are read as WARC responses)."""
    from warcio.archiveiterator import ArchiveIterator

    it = ArchiveIterator(stream, arc2warc=True, no_record_parse=False)
    for i, r in enumerate(it, start=1):
        http = r.http_headers if r.rec_type in ("response", "request") and r.http_headers else None
        content_type = (http.get_header("Content-Type") if http else None) or r.rec_headers.get_header("Content-Type")
        media, charset = _media(content_type), _charset(content_type)
        length = int(r.rec_headers.get_header("Content-Length") or r.length or 0)
        payload, truncated = None, False
        if r.rec_type in DOCUMENT_RECORDS:
            payload = r.content_stream().read(max_payload + 1)
            if len(payload) > max_payload:
                length, payload = max(length, len(payload)), None
            else:  # read to its end: bytes the record declared and the input did not hold are left over
                truncated = r.raw_stream.limit > 0
        yield Record(
            index=i,
            offset=int(it.get_record_offset()),
            record_type=r.rec_type,
            url=r.rec_headers.get_header("WARC-Target-URI"),
            record_id=r.rec_headers.get_header("WARC-Record-ID"),
            date=r.rec_headers.get_header("WARC-Date"),
            status=int(http.get_statuscode()) if http and r.rec_type == "response" else None,
            content_type=media,
            identified_type=_media(r.rec_headers.get_header("WARC-Identified-Payload-Type")),
            charset=charset,
            length=length if payload is None else len(payload),
            payload=payload,
            truncated=truncated,
            crawler_truncated=_lower(r.rec_headers.get_header("WARC-Truncated")),
        )


def _lower(value: str | None) -> str | None:
    return value.strip().lower() or None if value else None


def _media(content_type: str | None) -> str | None:
    return content_type.split(";", 1)[0].strip().lower() or None if content_type else None


def _charset(content_type: str | None) -> str | None:
    for part in (content_type or "").split(";")[1:]:
        key, _, value = part.partition("=")
        if key.strip().lower() == "charset" and value.strip():
            return value.strip().strip("\"'").lower()
    return None


def read_warc(
    stream: IO[bytes], fmt: str, html_extractor: str, max_record_bytes: int, html_only: bool = True
) -> Iterator[Doc | Bad]:
    """Documents of one WARC/WET (``fmt="warc"``) or ARC (``fmt="arc"``) file, decompressed already.

    :param html_extractor: the extractor for HTML payloads (:data:`airflow_curation.core.html_text.EXTRACTORS`).
    :param max_record_bytes: a larger payload is quarantined unread (``record_too_large``).
    :param html_only: take only HTML responses (and WET text); off: ``text/plain`` responses too.
    """
    extract = extractor(html_extractor)
    records = warcio_records(stream, max_record_bytes) if fmt == "arc" else fastwarc_records(stream, max_record_bytes)
    wanted = HTML_TYPES if html_only else TEXT_TYPES
    skipped: Counter[str] = Counter()
    last, last_offset = 0, 0
    try:
        for rec in records:
            last, last_offset = rec.index, rec.offset
            why_not = _not_a_document(rec, wanted)
            if why_not:
                skipped[why_not] += 1
                continue
            yield _document(rec, extract, max_record_bytes)
    except PARSE_ERRORS as e:
        where = f"record {last + 1}, after the record at byte {last_offset}" if last else "record 1"
        yield Bad(
            last + 1,
            where,
            "malformed_record",
            f"cannot read record {last + 1} (after {last} records read): {type(e).__name__}: {e}",
        )
    if skipped:
        detail = ", ".join(f"{k}={n}" for k, n in sorted(skipped.items()))
        yield Bad(
            0, "file", "records_not_documents", f"{sum(skipped.values())} records are not documents: {detail}", rows=0
        )


def _not_a_document(rec: Record, wanted: frozenset[str]) -> str | None:
    if rec.record_type not in DOCUMENT_RECORDS:
        return rec.record_type
    if rec.record_type == "conversion" or (rec.truncated and not rec.payload):
        return None  # (a record cut before its body began: its status and type may be cut, it may be a page)
    if rec.record_type == "response" and rec.status != 200:
        return f"response {rec.status}"
    if rec.media not in wanted:
        return f"{rec.record_type} {rec.media or 'without content type'}"
    return None


def _document(rec: Record, extract, max_bytes: int) -> Doc | Bad:
    loc = f"record {rec.index} at byte {rec.offset}"
    meta = {
        "url": rec.url,
        "warc_record_id": rec.record_id,
        "warc_date": rec.date,
        "content_type": rec.content_type,
        "identified_type": rec.identified_type,
        "charset": rec.charset,
        "record_type": rec.record_type,
        "offset": rec.offset,
        "warc_truncated": rec.crawler_truncated,
    }
    if rec.truncated:
        return Bad(
            rec.index,
            loc,
            "truncated_record",
            f"the input ends inside this record ({rec.length} payload bytes read): the file is cut short",
            (rec.payload or b"")[:RAW_HEAD],
        )
    if rec.payload is None:
        return Bad(rec.index, loc, "record_too_large", f"payload of {rec.length} bytes exceeds the limit")
    try:
        body = decode_body(rec.payload, rec.transfer_encoding, rec.content_encoding, max_bytes)
    except BodyTooLarge as e:
        return Bad(rec.index, loc, "record_too_large", str(e), rec.payload[:RAW_HEAD])
    except ValueError as e:
        return Bad(rec.index, loc, "undecodable_body", str(e), rec.payload[:RAW_HEAD])
    if rec.record_type == "conversion" or rec.media == "text/plain":
        try:
            text = body.decode(rec.charset or "utf-8")
        except (LookupError, UnicodeDecodeError) as e:
            return Bad(rec.index, loc, "invalid_utf8", f"text not {rec.charset or 'utf-8'}: {e}", body[:RAW_HEAD])
        return Doc(rec.index, loc, text, meta, len(body), raw=body[:RAW_HEAD])
    return _page(body, rec.charset, extract, rec.index, loc, meta)


def _page(
    data: bytes | str, charset: str | None, extract, position: int, loc: str, meta: dict | None, **doc
) -> Doc | Bad:
    """One HTML page's document, or why it has none: what a WARC response, an ``.html`` file and an HTML
    text field share. ``doc``: more :class:`Doc` fields (an input row's ``raw`` and ``doc_id``)."""
    raw = doc.pop("raw", None) or (data if isinstance(data, bytes) else data.encode("utf-8", "replace"))[:RAW_HEAD]
    try:
        text = extract(decode_html(data, charset) if isinstance(data, bytes) else data)
    except PageRefused as e:  # too deep, too many tags: e.reason says which
        return Bad(position, loc, e.reason, str(e), raw)
    except Exception as e:  # noqa: BLE001 - one page the extractor chokes on is that page's problem only
        return Bad(position, loc, "html_extraction_failed", f"{type(e).__name__}: {e}", raw)
    if not text.strip():
        return Bad(position, loc, "no_text_extracted", "the page has no main text", raw)
    return Doc(position, loc, text, meta, len(data), raw=raw, **doc)


def html_fields(items: Iterator[Doc | Bad], html_extractor: str) -> Iterator[Doc | Bad]:
    """JSONL or Parquet rows whose text field holds HTML: each row's text is the page's main text, by the
    same extractor as crawled pages (a row whose text is not a string is left for the stage to refuse)."""
    extract = extractor(html_extractor)
    for item in items:
        if isinstance(item, Bad) or not isinstance(item.text, str):
            yield item
            continue
        yield _page(item.text, None, extract, item.position, item.location, item.meta, raw=item.raw, doc_id=item.doc_id)


def read_html_file(f: IO[bytes], html_extractor: str, max_record_bytes: int) -> Iterator[Doc | Bad]:
    """A plain ``.html`` file: one document, its main text by the same extractor as crawled pages."""
    data = f.read(max_record_bytes + 1)
    if len(data) > max_record_bytes:
        yield Bad(0, "file", "record_too_large", f"page exceeds {max_record_bytes} bytes", data[:RAW_HEAD])
        return
    yield _page(data, None, extractor(html_extractor), 0, "file", None)
