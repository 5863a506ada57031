"""PII and secrets: find spans of emails, IP addresses, phone numbers and keys/tokens; redact them.

Detection is regular expressions plus checks a regex cannot do (an address's range, a secret's entropy),
tuned for precision: a span is reported only where the text leaves little doubt, and what is left out is
written down here and tested as a hard negative (``tests/core/test_pii.py``). Offsets are code points
into the text (Python ``str`` indices), ``end`` exclusive.

Kinds:

- ``email``: ``local@domain.tld``; the TLD is letters, 2+; left out: ``user@localhost`` (no TLD),
  ``icon@2x.png`` and other image/file names (TLD ``png``, ``jpg``... ), the documentation domains
  ``example.com/.org/.net`` (they name nobody).
- ``ipv4``: four dotted decimal octets 0-255, no leading zeros, not inside a longer dotted or
  alphanumeric run (``1.2.3.4.5``, ``v1.2.3.4``, OIDs), not after a version or section word (``version``,
  ``release``, ``build``, ``section``, ``§``...), not with every octet a single digit (``1.2.3.4``,
  ``GCC 2.7.2.2``: versions; the only such public addresses in use are resolvers like ``8.8.8.8``, which
  name nobody), and only global addresses (``ip_public_only``, as datatrove's PIIFormatter: ``10.x``,
  ``192.168.x``, ``127.x`` and the documentation ranges identify nobody).
- ``ipv6``: colon-hex groups parsed by :mod:`ipaddress`, 3+ groups with at least one full 4-digit group
  holding a digit (so ``std::vector``, ``a::b``, ``12:30:45`` are not addresses), global only likewise.
- ``phone``: North American ``(555) 123-4567``, ``555-123-4567``, ``555.123.4567`` (one separator
  style), and international ``+CC ...`` with 8-15 digits in groups; not after ``ISBN``/``ISSN``/``DOI``,
  not inside a longer run of digits or dashes; bare 10-digit numbers and dates are not phones.
- ``aws_key``: AWS access key ids (``AKIA``/``ASIA``... + 16 upper-case letters or digits).
- ``github_token``: ``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_`` + 36+ characters, ``github_pat_...``.
- ``private_key``: a ``-----BEGIN ... PRIVATE KEY-----`` block through its END line (or, cut off,
  through the base64 lines after the header) holding a run of 40+ base64 characters (a template with
  "... key here ..." is not a key).
- ``secret``: the value of an assignment whose key names a secret (``api_key = "..."``,
  ``"client_secret": "..."``, ``PASSWORD=...``), 16+ characters, letters and digits both, Shannon entropy
  of at least 3 bits per character, not a placeholder; also Slack (``xox?-``), Stripe (``sk_live_``) and
  Google (``AIza``) keys. A high-entropy string with no such key (a hex digest, a base64 blob in code)
  is *not* a secret: hashes are everywhere in code and name nobody.

Spans never overlap: where two kinds claim the same characters, the one listed first in ``KINDS`` wins.
"""

from __future__ import annotations

import bisect
import ipaddress
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from airflow_curation.core.redact import AWS_KEY_ID

AWS_PREFIXES = ("AKIA", "ASIA", "ABIA", "ACCA", "AGPA", "AIDA", "AIPA", "ANPA", "ANVA", "APKA", "AROA")

# Priority order: a span of an earlier kind wins an overlap.
KINDS = ("private_key", "aws_key", "github_token", "secret", "email", "ipv6", "ipv4", "phone")
KEY_KINDS = ("private_key", "aws_key", "github_token", "secret")

# What redaction writes in place of each kind (the BigCode/StarCoder convention of bracketed tags).
PLACEHOLDERS = {
    "email": "<EMAIL>",
    "ipv4": "<IP_ADDRESS>",
    "ipv6": "<IP_ADDRESS>",
    "phone": "<PHONE>",
    "aws_key": "<KEY>",
    "github_token": "<KEY>",
    "secret": "<KEY>",
    "private_key": "<PRIVATE_KEY>",
}


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    kind: str


# -- patterns -------------------------------------------------------------------------------------
# Found from each "@" (a scan for the whole pattern at every position costs 5x more): the local part
# backwards from it, the domain forwards.
_EMAIL_LOCAL = re.compile(r"(?<![\w.%+-])[A-Za-z0-9](?:[A-Za-z0-9._%+-]{0,62}[A-Za-z0-9_%+-])?\Z")
_EMAIL_DOMAIN = re.compile(
    r"((?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+([A-Za-z]{2,24}))(?![\w-]|\.[A-Za-z0-9])"
)
_FILE_TLDS = frozenset("png jpg jpeg gif svg webp bmp ico tif tiff pdf js css ts py txt json html".split())
_EXAMPLE_DOMAINS = frozenset({"example.com", "example.org", "example.net"})
_EXAMPLE_SUFFIXES = tuple("." + d for d in sorted(_EXAMPLE_DOMAINS))
# git@github.com:owner/repo.git is an SSH address (scp syntax), not a mailbox.
_NOT_EMAIL_AFTER = re.compile(r":[\w~/.-]")
# https://user:password@host: the part before "@" is a URL's credentials, not a mailbox (the secret kind's job).
_URL_USERINFO_BEFORE = re.compile(r"[A-Za-z][\w+.-]*://[^\s/@]*\Z")

_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_IPV4 = re.compile(rf"(?<![\w.])(?<!\d\.)({_OCTET}(?:\.{_OCTET}){{3}})(?!\.?\d|\.\w|\w)")
# Words after which a dotted quad numbers something else (a version, a section of a standard).
_VERSION_WORD = re.compile(
    r"(?i)(?:\b(?:version|ver\.?|v|release|rel\.?|build|update|patch|section|sec\.?|chapter|clause|rule|step|"
    r"item|figure|fig\.?|table|appendix|page|p\.|para\.?)|§)(?:\s|\\[ &])*$"  # (roff: "Section\ \&1.2")
)

# An identifier or file name ends in the quad (id-1.13.8.16, shadow-4.0.18.1): not an address.
_IDENTIFIER_BEFORE = re.compile(r"\w\\?-\Z")  # (roff writes a hyphen "\-")
# A package revision or pre-release after it (1.0.24.2-5, 2.39.90.1~rc1); a range (1.2.3.4-1.2.3.9) is not one.
_REVISION_AFTER = re.compile(r"-\d+(?![\d.])|~\w")
_VERSION_NEAR = re.compile(r"(?i)(?<![a-z])(?:upgrade[ds]?|updated?|bump(?:ed)?|version|release[ds]?)(?![a-z])")
# A numbered heading: "14.3.2.1. Real-time monitoring" at the start of its line.
_SECTION_AFTER = re.compile(r"\.(?:\s|$)")
_PORT_OR_PREFIX = re.compile(r":\d{1,5}(?!\d)|/\d{1,2}(?!\d)")
# Words that say a dotted quad on their line is an address.
_IP_CONTEXT = re.compile(
    # a word boundary, or a camelCase one (ControlAddr, remoteAddress, SlurmctldHost)
    r"(?:(?<![A-Za-z])|(?<=[a-z])(?=[A-Z]))(?i:ip|ipv4|inet|addr|address(?:es)?|hosts?|hostname|server|client|"
    r"connect\w*|ping|dns|resolv\w*|route[rsd]?|routing|gateway|subnet|netmask|nameserver|proxy|firewall|"
    r"listen\w*|bind|remote|peer|packets?|src|dst|socket|tcp|udp|ssh|smtp|nat|lan|wan|network|interface|"
    r"iptables|allow|deny|block\w*|banned|attack\w*|login|visitor|whois|traceroute|nslookup|dig)(?![a-z])"
)

_IPV6 = re.compile(r"(?<![\w:.])((?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{1,4}|(?:\d{1,3}\.){3}\d{1,3})?)(?![\w:])")
_FULL_GROUP = re.compile(r"(?:^|:)(?=[0-9A-Fa-f]*\d)[0-9A-Fa-f]{4}(?=:|$)")

_PHONE_NA = re.compile(
    r"(?<![\w+.-])(?:\+?1[ .-]?)?(?:\(\d{3}\)[ ]?|\d{3}([-. ]))\d{3}(?(1)\1|[-. ])\d{4}(?![\w-]|\.\d)"
)
# +CC, an optional area code or trunk prefix in brackets (+44 (0)20 ..., +49 (30) ...), then groups; the
# last group may be long (+49 30 12345678).
_PHONE_INTL = re.compile(
    r"(?<![\w+])\+\d{1,3}(?:[ .-]?\(\d{1,4}\)[ .-]?\d{1,5})?(?:[ .-]\d{1,5}){0,5}(?:[ .-]\d{6,8})?(?![\w-]|\.\d)"
)
# A coordinate, not a phone: +48.8566, +40.6894-074.0447 (a decimal point after the first number).
_COORDINATE = re.compile(r"\+\d{1,3}\.\d{4,}")
# Space-separated numbers inside a run of numbers (a table, a list of test ids) are no phone.
_NUMBER_BEFORE = re.compile(r"\d[ \t]\Z")
_NUMBER_AFTER = re.compile(r"[ \t]\d")
_NOT_PHONE_BEFORE = re.compile(r"(?i)(?:isbn(?:-1[03])?|issn|doi|ean|upc|patent|serial|no\.?)\s*:?\s*$")

_GITHUB = re.compile(
    r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})(?![A-Za-z0-9_])"
)
_VENDOR_SECRET = re.compile(
    r"(?<![A-Za-z0-9_-])(?:xox[baprs]-[A-Za-z0-9-]{10,72}|sk_live_[A-Za-z0-9]{24,99}|AIza[0-9A-Za-z_-]{35})(?![A-Za-z0-9_-])"
)
_PRIVATE_KEY = re.compile(
    # group 2 always takes part: Python's backreference to a group that did not match fails
    r"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY((?: BLOCK)?)-----"
    r"(?:.*?-----END \1PRIVATE KEY\2-----|(?:[ \t]*\r?\n[ \t]*[A-Za-z0-9+/=]{4,})+)",
    re.S,
)
_KEY_BODY = re.compile(r"[A-Za-z0-9+/=]{40}")  # a real key block holds long base64 lines
# A secret assignment is found from its value (cheap: an operator, then 16+ token characters), then
# the key before the operator is checked; a key word followed by a lower-case letter names something
# else (tokenizer, secretary).
# A quoted value may hold any punctuation ("s3cr3t!P@ssw0rd#2024"); an unquoted one ends at the first.
_ASSIGN_VALUE = re.compile(
    r"""(?::=|=>|[:=])[ \t]*(?:(['"])([^'"\s\\]{12,256})\1|([A-Za-z0-9+/=_\-.~]{16,256})(?![A-Za-z0-9+/=_\-.~]))"""
)
# The key names where the secret is, not the secret: private_key_path, token_file, password_length.
_KEY_NAMES_A_PLACE = re.compile(
    r"""(?i)(?:path|file|filename|dir|directory|url|uri|location|name|length|len|size|type|id)['"]?[ \t]*\Z"""
)
# A file path is no secret (it may say where one is): /etc/ssl/private/server.key, ~/.ssh/id_rsa, C:\keys\x.
# (A base64 secret starts with "/" once in 64: that one is missed.)
_PATH = re.compile(r"""[/~]|\.{1,2}/|[A-Za-z]:\\|.*/.*\.\w{1,5}\Z""")
_SECRET_KEY_BEFORE = re.compile(
    r"""(?i)(?:secret|passw(?:or)?d|passwd|pwd|token|api[_-]?key|apikey|access[_-]?key|auth[_-]?key|private[_-]?key
    |credentials?)(?-i:(?![a-z]))[\w.-]{0,40}['"]?[ \t]*$""",
    re.X,
)
# The password of a URL (postgres://user:password@host): a secret when it is no placeholder.
# (Scheme and user are bounded: unbounded, every position of a long run of letters near "://" re-scanned
# the run, O(n^2): 80,000 letters took 23 CPU-s. A user name past 256 characters is not looked at.)
_URL_PASSWORD = re.compile(r"[A-Za-z][\w+.-]{0,31}://[^\s/:@]{1,256}:([^\s/@]{6,128})@")
_PLACEHOLDER = re.compile(r"(?i)(x{6,}|\*{4,}|your|example|changeme|placeholder|dummy|redacted|sample|<|\$\{)")

# Cheap superset tests, vectorised over a batch by Arrow (RE2): only documents that pass one run the
# Python patterns of that kind. RE2 has no look-around; these only need to never miss.
PREFILTERS = {
    "email": r"[\w%+-]@[A-Za-z0-9]",
    "ipv4": r"\d\.\d{1,3}\.\d{1,3}\.\d",
    # 3+ groups, one of them 4 hex digits with a digit (G): G has a colon on each side, or two on one
    "ipv6": r"{G}:[0-9A-Fa-f]{{0,4}}:|:[0-9A-Fa-f]{{0,4}}:{G}|:{G}:".format(
        G=r"(?:\d[0-9A-Fa-f]{3}|[0-9A-Fa-f]\d[0-9A-Fa-f]{2}|[0-9A-Fa-f]{2}\d[0-9A-Fa-f]|[0-9A-Fa-f]{3}\d)"
    ),
    "phone": r"\d{3}[-. )]{1,2}\d{3}[-. ]\d{4}|\+\d{1,3}(?:[ .-]?\(|[ .-]\d)",
    "keys": r"A[BCGIKNOPRS][A-Z][A-Z][A-Z0-9]{16}|gh[pousr]_|github_pat_|PRIVATE KEY|xox[baprs]-|sk_live_|AIza"
    r"|(?i:secret|passw|pwd|token|api.?key|access.?key|auth.?key|private.?key|credential)|://[^\s/@:]+:[^\s/@]+@",
}


def _emails(text: str) -> Iterable[Span]:
    at = text.find("@")
    while at != -1:
        dom = _EMAIL_DOMAIN.match(text, at + 1)
        local = _EMAIL_LOCAL.search(text, max(0, at - 64), at) if dom else None
        if dom and local and not _NOT_EMAIL_AFTER.match(text, dom.end()):
            domain, tld = dom.group(1).lower(), dom.group(2).lower()
            if (
                tld not in _FILE_TLDS
                and domain not in _EXAMPLE_DOMAINS
                and not domain.endswith(_EXAMPLE_SUFFIXES)
                and not _URL_USERINFO_BEFORE.search(text, max(0, local.start() - 256), local.start())
            ):
                yield Span(local.start(), dom.end(), "email")
        at = text.find("@", at + 1)


def _global(address: str, public_only: bool) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return ip.is_global or not public_only


def _ipv4(text: str, public_only: bool) -> Iterable[Span]:
    for m in _IPV4.finditer(text):
        quad, start, end = m.group(1), m.start(1), m.end(1)
        if len(quad) == 7:  # every octet one digit: a version (GCC 2.7.2.2); of such public addresses
            continue  # only resolvers such as 8.8.8.8 and 1.1.1.1 are in use, and they name nobody
        if _VERSION_WORD.search(text, max(0, start - 16), start) or _IDENTIFIER_BEFORE.search(
            text, max(0, start - 2), start
        ):
            continue
        if _REVISION_AFTER.match(text, end) or (_SECTION_AFTER.match(text, end) and _line_start(text, start)):
            continue
        # A small first number is most often a version or a section number (4.5.103.35, 14.3.2.1): then
        # the line must say it is an address, and no version word may come shortly before.
        if int(quad[: quad.index(".")]) < 20 and (
            _VERSION_NEAR.search(text, max(0, start - 30), start) or not _ip_context(text, start, end)
        ):
            continue
        if _global(quad, public_only) and not ipaddress.ip_address(quad).is_multicast:
            yield Span(start, end, "ipv4")


def _line_start(text: str, start: int) -> bool:
    return not text[text.rfind("\n", 0, start) + 1 : start].strip()


def _ip_context(text: str, start: int, end: int) -> bool:
    """A port or prefix length after the quad, or an address word within 80 characters of it in its
    paragraph (wrapped lines included; a blank line ends the search)."""
    if _PORT_OR_PREFIX.match(text, end):
        return True
    lo = max(0, start - 80)
    lo = max(lo, text.rfind("\n\n", lo, start) + 2)
    hi = min(len(text), end + 80)
    cut = text.find("\n\n", end, hi)
    return bool(_IP_CONTEXT.search(text, lo, cut if cut != -1 else hi))


def _ipv6(text: str, public_only: bool) -> Iterable[Span]:
    for m in _IPV6.finditer(text):
        cand = m.group(1)
        groups = [g for g in cand.split(":") if g]
        if len(groups) < 3 or not _FULL_GROUP.search(cand):
            continue
        if _global(cand, public_only):
            yield Span(m.start(1), m.end(1), "ipv6")


def _phones(text: str) -> Iterable[Span]:
    for pattern, lo, hi in ((_PHONE_NA, 10, 11), (_PHONE_INTL, 8, 15)):
        if pattern is _PHONE_INTL and "+" not in text:
            continue
        for m in pattern.finditer(text):
            digits = sum(c.isdigit() for c in m.group(0))
            if not lo <= digits <= hi:
                continue
            if _NOT_PHONE_BEFORE.search(text, max(0, m.start() - 16), m.start()):
                continue
            if pattern is _PHONE_INTL and _COORDINATE.match(m.group(0)):
                continue
            if " " in m.group(0).strip() and (
                _NUMBER_BEFORE.search(text, max(0, m.start() - 2), m.start()) or _NUMBER_AFTER.match(text, m.end())
            ):
                continue
            yield Span(m.start(), m.end(), "phone")


def entropy(s: str) -> float:
    """Shannon entropy in bits per character."""
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in Counter(s).values()) if n else 0.0


def _keys(text: str) -> Iterable[Span]:
    # Substring tests first: each pattern runs only on texts that hold its fixed part.
    if "PRIVATE KEY-----" in text:
        for m in _PRIVATE_KEY.finditer(text):
            if _KEY_BODY.search(m.group(0)):  # a template ("... base64 here ...") is not a key
                yield Span(m.start(), m.end(), "private_key")
    if any(p in text for p in AWS_PREFIXES):
        for m in AWS_KEY_ID.finditer(text):
            yield Span(m.start(), m.end(), "aws_key")
    if any(p in text for p in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")):
        for m in _GITHUB.finditer(text):
            yield Span(m.start(), m.end(), "github_token")
    if "xox" in text or "sk_live_" in text or "AIza" in text:
        for m in _VENDOR_SECRET.finditer(text):
            yield Span(m.start(), m.end(), "secret")
    if "://" in text:
        for m in _URL_PASSWORD.finditer(text):
            if _is_secret(m.group(1), min_entropy=2.5):
                yield Span(m.start(1), m.end(1), "secret")
    for m in _ASSIGN_VALUE.finditer(text):
        quoted = m.group(2) is not None
        value, start = (m.group(2), m.start(2)) if quoted else (m.group(3), m.start(3))
        key = _SECRET_KEY_BEFORE.search(text, max(0, m.start() - 64), m.start())
        if key is None or _KEY_NAMES_A_PLACE.search(text, key.start(), m.start()):
            continue
        if _is_secret(value):
            yield Span(start, start + len(value), "secret")


def _is_secret(value: str, min_entropy: float = 3.0) -> bool:
    """Letters and digits both, ``min_entropy`` bits per character or more, no placeholder, not a path."""
    return (
        any(c.isdigit() for c in value)
        and any(c.isalpha() for c in value)
        and entropy(value) >= min_entropy
        and not _PLACEHOLDER.search(value)
        and not _PATH.match(value)
    )


def find_pii(text: str, kinds: Iterable[str] = KINDS, ip_public_only: bool = True) -> list[Span]:
    """Every PII span of ``kinds`` in ``text``, by start, without overlaps."""
    wanted = set(kinds)
    found: list[Span] = []
    if wanted & set(KEY_KINDS):
        found += [s for s in _keys(text) if s.kind in wanted]
    if "email" in wanted and "@" in text:
        found += _emails(text)
    if "ipv6" in wanted and ":" in text:
        found += _ipv6(text, ip_public_only)
    if "ipv4" in wanted and "." in text:
        found += _ipv4(text, ip_public_only)
    if "phone" in wanted:
        found += _phones(text)
    return resolve_overlaps(found)


def resolve_overlaps(spans: Sequence[Span]) -> list[Span]:
    """Drop spans that overlap a span of a kind earlier in ``KINDS`` (then an earlier, then a longer one)."""
    rank = {k: i for i, k in enumerate(KINDS)}
    starts: list[int] = []  # the kept spans, disjoint, by start
    kept: list[Span] = []
    for s in sorted(spans, key=lambda s: (rank[s.kind], s.start, -(s.end - s.start))):
        i = bisect.bisect_right(starts, s.start)
        if (i == 0 or kept[i - 1].end <= s.start) and (i == len(kept) or s.end <= kept[i].start):
            starts.insert(i, s.start)
            kept.insert(i, s)
    return kept


def redact(text: str, spans: Iterable[Span | dict], placeholders: dict[str, str] | None = None) -> str:
    """``text`` with each span replaced by its kind's placeholder (``<EMAIL>``...)."""
    marks = placeholders or PLACEHOLDERS
    out, pos = [], 0
    for s in sorted((_as_span(s) for s in spans), key=lambda s: s.start):
        if s.start < pos:
            raise ValueError(f"overlapping PII spans at {s.start}")
        out += [text[pos : s.start], marks.get(s.kind, "<PII>")]
        pos = s.end
    out.append(text[pos:])
    return "".join(out)


def _as_span(s: Span | dict) -> Span:
    return s if isinstance(s, Span) else Span(int(s["start"]), int(s["end"]), str(s["kind"]))


SPAN_TYPE = pa.struct([pa.field("start", pa.int32()), pa.field("end", pa.int32()), pa.field("kind", pa.string())])


def _group(kind: str) -> str:
    return "keys" if kind in KEY_KINDS else kind


def candidates(texts: pa.ChunkedArray | pa.Array, kinds: Iterable[str]) -> list[list[str]]:
    """Per text, the wanted kinds whose cheap prefilter matches it (Arrow's RE2, one pass per group)."""
    kinds = [k for k in KINDS if k in set(kinds)]
    hits: dict[str, list[bool]] = {}
    for group in dict.fromkeys(_group(k) for k in kinds):
        hits[group] = pc.fill_null(pc.match_substring_regex(texts, PREFILTERS[group]), False).to_pylist()
    return [[k for k in kinds if hits[_group(k)][i]] for i in range(len(texts))]


def pii_columns(
    texts: pa.ChunkedArray | pa.Array, kinds: Sequence[str] = KINDS, ip_public_only: bool = True, redacted: bool = True
) -> pa.Table:
    """Attrs columns for a batch: ``pii_spans`` (list of ``{start, end, kind}``), ``pii_count``, one
    ``pii_<kind>`` count per kind, and ``redacted_text`` (the text with its spans replaced; null where
    nothing was found, so that the column costs nothing on clean rows)."""
    values = texts.to_pylist()
    maybe = candidates(texts, kinds)
    spans_col: list[list[dict]] = []
    redacted_col: list[str | None] = []
    counts = {k: [0] * len(values) for k in kinds}
    for i, (text, doc_kinds) in enumerate(zip(values, maybe)):
        spans = find_pii(text, doc_kinds, ip_public_only) if doc_kinds and text else []
        spans_col.append([{"start": s.start, "end": s.end, "kind": s.kind} for s in spans])
        for s in spans:
            counts[s.kind][i] += 1
        redacted_col.append(redact(text, spans) if spans else None)
    total = [len(s) for s in spans_col]
    cols: dict[str, pa.Array] = {
        "pii_spans": pa.array(spans_col, pa.list_(SPAN_TYPE)),
        "pii_count": pa.array(total, pa.int32()),
    }
    for k in kinds:
        cols[f"pii_{k}"] = pa.array(counts[k], pa.int32())
    if redacted:
        cols["redacted_text"] = pa.array(redacted_col, pa.string())
    return pa.table(cols)
