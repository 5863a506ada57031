"""An HTTP response body as the server sent it, decoded: chunked transfer coding and content codings.

A crawler that writes what it received (wget's ``--warc-file``, Heritrix, many archiving tools) leaves a
response's body chunked and gzip-, deflate-, brotli- or zstd-encoded in the WARC; FastWARC hands it over as
it is (decoding is "the crawler's job", and Common Crawl's crawler does it). warcio's ``content_stream``,
which datatrove reads through, decodes both. Without this, such a page became binary garbage or text with
chunk-size lines in it.

Lenient where crawlers are known to be: a body declared chunked that does not start with a chunk-size line
was de-chunked already (Browsertrix keeps the header), and one declared compressed that is plainly markup
was decompressed already. Anything else that does not decode is an error for that record, and the decoded
size is capped so that a small compressed body cannot take the memory.
"""

from __future__ import annotations

import io
import re
import zlib

# A chunk-size line: hex size, optional extensions, CRLF (a bare LF accepted, as clients do).
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,16})[ \t]*(?:;[^\r\n]*)?\r?\n")


class BodyTooLarge(ValueError):
    """The decoded body is past the record limit."""


def decode_body(body: bytes, transfer_encoding: str | None, content_encoding: str | None, limit: int) -> bytes:
    """``body`` without its transfer and content codings, at most ``limit`` bytes.

    :param transfer_encoding: the response's ``Transfer-Encoding`` header (None: absent).
    :param content_encoding: its ``Content-Encoding`` header, codings in the order applied.
    :raises ValueError: a coding that is malformed or unknown (:class:`BodyTooLarge` past ``limit``).
    """
    if transfer_encoding and "chunked" in transfer_encoding.lower() and _CHUNK_SIZE.match(body):
        body = _dechunk(body)
    for coding in reversed([c.strip().lower() for c in (content_encoding or "").split(",") if c.strip()]):
        if coding in ("identity", "none"):
            continue
        if _is_markup(body):  # decoded already by the crawler, header left as it was
            break
        body = _decompress(body, coding, limit)
    if len(body) > limit:
        raise BodyTooLarge(f"the decoded body exceeds {limit} bytes")
    return body


def _dechunk(body: bytes) -> bytes:
    parts, pos = [], 0
    while True:
        m = _CHUNK_SIZE.match(body, pos)
        if m is None:
            if pos >= len(body):  # the capture ended between chunks (a crawler's size cap): what came is kept
                break
            raise ValueError(f"chunked body: no chunk-size line at byte {pos}")
        size, pos = int(m.group(1), 16), m.end()
        if size == 0:  # the last chunk (trailers, if any, follow)
            break
        parts.append(body[pos : pos + size])  # a chunk cut by the capture's end keeps what came
        pos += size
        end = pos + 2 if body.startswith(b"\r\n", pos) else pos + 1 if body.startswith(b"\n", pos) else None
        if end is None and pos < len(body):
            raise ValueError(f"chunked body: the chunk of {size} bytes ending at byte {pos} is not followed by CRLF")
        pos = end or pos
    return b"".join(parts)


def _is_markup(body: bytes) -> bool:
    head = body[:64].lstrip(b"\xef\xbb\xbf \t\r\n")
    return head.startswith(b"<")


def _decompress(body: bytes, coding: str, limit: int) -> bytes:
    if coding not in _DECODERS:
        raise ValueError(f"unsupported Content-Encoding {coding!r}")
    try:
        out = _DECODERS[coding](body, limit + 1)
    except Exception as e:  # noqa: BLE001 - zlib.error, brotli.error, zstandard.ZstdError: one record's problem
        raise ValueError(f"Content-Encoding {coding}: {type(e).__name__}: {e}") from e
    if len(out) > limit:
        raise BodyTooLarge(f"the body decoded from {coding} exceeds {limit} bytes")
    return out


def _inflate(body: bytes, most: int) -> bytes:
    try:  # 47: a gzip or zlib stream, by its header
        return zlib.decompressobj(47).decompress(body, most)
    except zlib.error:  # raw deflate, what some servers send for "deflate"
        return zlib.decompressobj(-15).decompress(body, most)


def _unbrotli(body: bytes, most: int) -> bytes:
    import brotli  # FastWARC's own dependency

    return brotli.Decompressor().process(body, output_buffer_limit=most)


def _unzstd(body: bytes, most: int) -> bytes:
    import zstandard

    return zstandard.ZstdDecompressor().stream_reader(io.BytesIO(body)).read(most)


# Each decoder gives at most ``most`` bytes (one past the limit tells a body too large).
_DECODERS = {"gzip": _inflate, "x-gzip": _inflate, "deflate": _inflate, "br": _unbrotli, "zstd": _unzstd}
