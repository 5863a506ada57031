"""PII detection: hand-written positives with their exact spans, and hard negatives that must stay clean."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_curation.core.pii import KINDS, Span, candidates, entropy, find_pii, pii_columns, redact

KEY_LINE = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun"  # 64 base64 characters
GH_TOKEN = "ghp_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dF3hJ5"  # 36 characters after the prefix
AWS_ID = "AKIAIOSFODNN7EXAMPLE"  # AWS's documented example key id
SECRET = "sk3jd8Fh2kLq9Zx7Wm4Np1Rt"

POSITIVES = [
    # (text, [(kind, the exact matched text)])
    ("Write to john.doe@gmail.com today.", [("email", "john.doe@gmail.com")]),
    ("jane_@corp.co.uk, then", [("email", "jane_@corp.co.uk")]),
    ("<a href='mailto:ops+alerts@sub.mail-host.io'>", [("email", "ops+alerts@sub.mail-host.io")]),
    ("The host is at 142.250.74.46.", [("ipv4", "142.250.74.46")]),
    ("connect to 93.184.216.34:443 now", [("ipv4", "93.184.216.34")]),
    ("(23.5.1.7)", [("ipv4", "23.5.1.7")]),
    ("dns 2606:4700:4700::1111 answers", [("ipv6", "2606:4700:4700::1111")]),
    ("host [2a00:1450:4001:81c::200e]:80", [("ipv6", "2a00:1450:4001:81c::200e")]),
    ("Call (555) 123-4567 now", [("phone", "(555) 123-4567")]),
    ("Call 555-123-4567.", [("phone", "555-123-4567")]),
    ("fax 555.123.4567", [("phone", "555.123.4567")]),
    ("US +1 555 123 4567", [("phone", "+1 555 123 4567")]),
    ("London +44 20 7946 0958.", [("phone", "+44 20 7946 0958")]),
    ("Paris: +33 1 42 68 53 00", [("phone", "+33 1 42 68 53 00")]),
    (f"aws_access_key_id = {AWS_ID}", [("aws_key", AWS_ID)]),
    (f"export GITHUB_TOKEN={GH_TOKEN}", [("github_token", GH_TOKEN)]),
    (f'api_key = "{SECRET}"', [("secret", SECRET)]),
    (f'{{"client_secret": "{SECRET}"}}', [("secret", SECRET)]),
    (f"DB_PASSWORD={SECRET}\n", [("secret", SECRET)]),
    ("slack xoxb-123456789012-abcdefABCDEF1234", [("secret", "xoxb-123456789012-abcdefABCDEF1234")]),
    (
        f"key:\n-----BEGIN RSA PRIVATE KEY-----\n{KEY_LINE}\nabc==\n-----END RSA PRIVATE KEY-----\nafter",
        [("private_key", f"-----BEGIN RSA PRIVATE KEY-----\n{KEY_LINE}\nabc==\n-----END RSA PRIVATE KEY-----")],
    ),
    (  # cut off: the header and the base64 lines after it
        f"-----BEGIN OPENSSH PRIVATE KEY-----\n{KEY_LINE}\nQyNTUxOQAAACDs\n\nNext paragraph.",
        [("private_key", f"-----BEGIN OPENSSH PRIVATE KEY-----\n{KEY_LINE}\nQyNTUxOQAAACDs")],
    ),
    # found on real pages (docs/pii.md: what real text taught)
    ("London +44 (0)20 7946 0958 today", [("phone", "+44 (0)20 7946 0958")]),  # a trunk prefix
    ("Berlin +49 30 12345678.", [("phone", "+49 30 12345678")]),  # a long last group
    ('DB_PASSWORD="s3cr3t!P@ssw0rd#2024"', [("secret", "s3cr3t!P@ssw0rd#2024")]),  # punctuation, quoted
    ("postgres://app:Xk29fLq7@db.corp.io/app", [("secret", "Xk29fLq7")]),  # a URL's password, no e-mail
    ("SlurmctldHost=dev0(12.34.56.78)", [("ipv4", "12.34.56.78")]),  # small first number, camelCase context
    ("the server\nat 12.34.56.78 answered", [("ipv4", "12.34.56.78")]),  # the context on the line before
    (
        "Mail bob@example.co.uk or 81.2.69.160, phone 555-867-5309.",
        [("email", "bob@example.co.uk"), ("ipv4", "81.2.69.160"), ("phone", "555-867-5309")],
    ),
]

NEGATIVES = [
    # versions and dotted numbers
    "Upgrade to version 1.2.3.4 today.",
    "Python v1.2.3.4 and release 10.4.2.1 and build 20.0.0.1",
    "GCC 2.7.2.2, Thunderbird 1.5.0.9, and the plain 1.2.3.4 (versions: every octet one digit)",
    "the resolvers 8.8.8.8 and 1.1.1.1 name nobody",
    "see section 6.4.4.12 of the standard, and § 21.3.4.5",
    "OIDs 1.3.6.1.5.5.7.3.1 and 1.3.6.1.4.1.311.60.2.1.3",
    "numpy 1.26.4, the tuple 1.2.3.4.5, and 256.1.1.1 (octet out of range)",
    "private 192.168.1.1, loopback 127.0.0.1, 10.0.0.1 and docs 203.0.113.7",  # not global
    "-----BEGIN RSA PRIVATE KEY-----\n... (private key in base64 encoding) ...\n-----END RSA PRIVATE KEY-----",
    "the value 1.02.3.4 has a leading zero",
    # dotted quads in real documentation that are no addresses
    "libxcb1 Breaks alsa-utils (<< 1.0.24.2-5), and 2.39.90.1~rc1",  # package revisions
    "intro\n\n15.4.1.1. Rules\n\nA Debian package",  # a numbered heading
    "Upgrade V8 to 4.5.103.35, see the network notes",  # a version, an address word further on
    "mDNS on 224.0.0.251 and SSDP on 239.255.255.250",  # multicast names no host
    '<a id="id-1.13.8.16"></a> and shadow-4.0.18.1-findNewUid.patch',  # identifiers
    "See Section\\ \\&55.2.2.1 for more",  # roff
    # e-mail look-alikes, key paths, coordinates, runs of numbers
    "git clone git@github.com:owner/repo.git",
    "ftp://anonymous@ftp.gnu.org/gnu/ and https://admin:hunter@db.corp.com/x",
    'private_key = "/etc/ssl/private/server-2024.key"',
    "SSH_PRIVATE_KEY_PATH=~/.ssh/id_rsa_deploy_2024x and private_key_file: keys/prod/deploy_2024_rsa.pem",
    "GPS +40.6894-074.0447 and +48.8566, +2.3522",
    "IGNORED: failed tests: 571 612 1056 1214 tests",
    # dates, times, ISBNs, numbers
    "On 2023-10-12 at 12:30:45 the build 2024.01.15 shipped.",
    "ISBN 978-0-306-40615-7 and ISBN-10: 0-306-40615-2",
    "order 5551234567 and serial 555-123-45678 and 12-555-123-4567",
    "mixed separators 555-123.4567 are not one number",
    "1234 5678 9012 3456",
    # code: hashes, scopes, decorators, versions
    'sha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"',
    "commit 9fceb02d0ae598e95dc970b74767f19372d61af8 fixed it",
    "std::vector<int> v; a::b::c; ::std::move(x); dead::beef",
    "@property\ndef name(self): return self._name",
    "npm i @scope/package@2.1.0 and icon@2x.png and logo@3x.webp",
    "user@localhost and root@server are local names",
    "see a@example.com, b@mail.example.org and c@example.net",
    # secret-named keys with values that are no secrets
    'password = "your_password_here_1234"',
    "token = get_token_from_environment_variable()",
    'api_key = os.environ["API_KEY"]',
    "SECRET_KEY = ${SECRET_KEY_FROM_VAULT}",
    'token = "aaaaaaaaaaaaaaaaaaaaaaaa1"',  # no entropy
    'tokenizer_name = "bert-base-uncased-v2-12x768"',  # a key word inside another word
    'secretary = "Jm8Kq2Lx9Pz4Nw7Rt5Vb"',
    "a 40-char hex blob ABCDEF0123456789ABCDEF0123456789ABCDEF01 without a key",
    "the token count was 12345678901234567 tokens",
    "",
]


def _found(text: str) -> list[tuple[str, str]]:
    return [(s.kind, text[s.start : s.end]) for s in find_pii(text)]


@pytest.mark.parametrize(("text", "expected"), POSITIVES)
def test_positives_are_found_with_their_exact_spans(text, expected):
    assert _found(text) == expected


@pytest.mark.parametrize("text", NEGATIVES)
def test_hard_negatives_are_not_pii(text):
    assert _found(text) == []


def test_offsets_are_code_points():
    text = "Grüße — schreib an jürgen@exämple.de oder anna@mail.de ✉"
    spans = find_pii(text)
    assert [(s.kind, text[s.start : s.end]) for s in spans] == [("email", "anna@mail.de")]
    assert spans[0].start == text.index("anna")


def test_private_addresses_are_reported_when_asked():
    text = "router 192.168.1.1"
    assert find_pii(text) == []
    assert find_pii(text, ip_public_only=False) == [Span(7, 18, "ipv4")]


def test_kinds_limit_what_is_found():
    text = "john@gmail.com at 81.2.69.160"
    assert [s.kind for s in find_pii(text, kinds=["ipv4"])] == ["ipv4"]
    assert [s.kind for s in find_pii(text, kinds=["email"])] == ["email"]


def test_overlaps_go_to_the_stronger_kind():
    # The private key block holds what would match as other kinds; it wins, and spans never overlap.
    block = f"-----BEGIN PRIVATE KEY-----\n{KEY_LINE} token=ab12cd34ef56gh78ij90 81.2.69.160\n-----END PRIVATE KEY-----"
    assert _found(block) == [("private_key", block)]


def test_redaction_replaces_each_span_with_its_placeholder():
    text = f"Mail john.doe@gmail.com, call (555) 123-4567, host 81.2.69.160, key {AWS_ID}."
    assert redact(text, find_pii(text)) == "Mail <EMAIL>, call <PHONE>, host <IP_ADDRESS>, key <KEY>."
    spans = [{"start": 5, "end": 23, "kind": "email"}]  # as read back from the attrs file
    assert redact(text, spans).startswith("Mail <EMAIL>, call")
    with pytest.raises(ValueError, match="overlapping"):
        redact("abcdef", [Span(0, 3, "email"), Span(2, 4, "phone")])


def test_prefilters_never_miss_a_positive():
    texts = [t for t, _ in POSITIVES]
    for (text, expected), kinds in zip(POSITIVES, candidates(pa.array(texts), KINDS)):
        assert {kind for kind, _ in expected} <= set(kinds), text


def test_entropy():
    assert entropy("") == 0.0 and entropy("aaaa") == 0.0
    assert entropy("abcd") == pytest.approx(2.0)


def test_pii_columns_shape_counts_and_nulls():
    texts = pa.chunked_array([["Mail a.b@gmail.com and c.d@gmail.com", "nothing at all", None, ""]])
    t = pii_columns(texts)
    assert t.column_names == ["pii_spans", "pii_count", *(f"pii_{k}" for k in KINDS), "redacted_text"]
    assert t.column("pii_count").to_pylist() == [2, 0, 0, 0]
    assert t.column("pii_email").to_pylist() == [2, 0, 0, 0]
    assert t.column("pii_spans").to_pylist()[0] == [
        {"start": 5, "end": 18, "kind": "email"},
        {"start": 23, "end": 36, "kind": "email"},
    ]
    assert t.column("redacted_text").to_pylist() == ["Mail <EMAIL> and <EMAIL>", None, None, None]
    only = pii_columns(texts, kinds=["phone"], redacted=False)
    assert only.column_names == ["pii_spans", "pii_count", "pii_phone"]


FULL_EMAIL = re.compile(  # the whole pattern scanned at every position: what the "@"-anchored search must equal
    r"(?<![\w.%+-])[A-Za-z0-9](?:[A-Za-z0-9._%+-]{0,62}[A-Za-z0-9_%+-])?"
    r"@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}(?![\w-]|\.[A-Za-z0-9])"
)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab1Z.-_+@ \n", max_size=80))
def test_anchored_email_search_equals_the_full_scan(text):
    expected = [(m.start(), m.end()) for m in FULL_EMAIL.finditer(text)]
    assert [(s.start, s.end) for s in find_pii(text, kinds=["email"])] == expected


def test_many_spans_in_one_document_stay_linear():
    text = " ".join(f"user{i}@mail{i}.org" for i in range(20_000))
    spans = find_pii(text, kinds=["email"])
    assert len(spans) == 20_000 and spans[-1].end == len(text)


def test_long_runs_of_letters_near_a_url_stay_linear():
    """The URL-password pattern re-scanned a run of letters from each of its positions (O(n^2): 80,000
    letters 23 CPU-s, this document hours); bounded, the run is passed once and the password still found."""
    text = "see http://" + "a" * 2_000_000 + ".com and postgres://admin:Xk92jfLq8@db.internal/x"
    spans = find_pii(text, kinds=["secret"])
    assert [text[s.start : s.end] for s in spans] == ["Xk92jfLq8"]


OLD_URL_PASSWORD = re.compile(r"[A-Za-z][\w+.-]*://[^\s/:@]+:([^\s/@]{6,128})@")


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="ab1Z:/@.-+ x", max_size=150))
def test_the_bounded_url_password_pattern_finds_what_the_unbounded_one_did(text):
    from airflow_curation.core.pii import _URL_PASSWORD

    assert [m.span(1) for m in _URL_PASSWORD.finditer(text)] == [m.span(1) for m in OLD_URL_PASSWORD.finditer(text)]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="aZ09.:@-+()_= \n'\"AKIghp", max_size=120))
def test_spans_are_ordered_disjoint_and_redaction_keeps_the_rest(text):
    spans = find_pii(text, ip_public_only=False)
    assert all(0 <= s.start < s.end <= len(text) and s.kind in KINDS for s in spans)
    assert all(a.end <= b.start for a, b in zip(spans, spans[1:]))
    out = redact(text, spans, placeholders={k: "" for k in KINDS})
    assert out == "".join(
        text[a:b] for a, b in zip([0] + [s.end for s in spans], [s.start for s in spans] + [len(text)])
    )
