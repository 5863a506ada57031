"""URL filtering: block lists of domains and URLs (the UT1 layout) and banned sub-words in URLs.

A block list is a folder with one sub-folder per category, each holding a ``domains`` file (one host a
line) and/or a ``urls`` file (one URL a line, without scheme), as the Université Toulouse 1 lists
(UT1, what FineWeb and datatrove's ``URLFilter`` use) are laid out::

    blocklist/adult/domains    blocklist/adult/urls    blocklist/gambling/domains ...

Hosts are normalised before they are compared: lower case, no port, no trailing dot, no ``www.``. A host
is blocked when it or any parent domain down to its registered domain (found with ``tldextract`` and the
public-suffix list bundled in its wheel: nothing is downloaded) is listed, so ``shop.casino.example``
is blocked by ``casino.example`` but ``co.uk`` never blocks every British site. A URL entry blocks that
URL (host normalised, no scheme, no fragment; with or without its query; a trailing ``/`` ignored).

Each blocked document gets one reason: ``url_blocklist:<category>`` (the first category in name order
that lists it), else ``url_subword`` when its URL, lower-cased, contains a banned sub-word.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from urllib.parse import urlsplit

import numpy as np
import xxhash

from airflow_curation.core import storage

BLOCKLIST = "url_blocklist"
SUBWORD = "url_subword"
_LIST_FILES = ("domains", "urls")


@lru_cache(maxsize=1)
def _extractor():
    import tldextract

    # suffix_list_urls=(): the snapshot bundled in the wheel, never a download; cache_dir=None: no cache
    # folder written on the workers either.
    return tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)


def normalize_host(host: str) -> str:
    host = host.strip().lower().rstrip(".")
    host = host.rsplit("@", 1)[-1]  # user:password@
    if host.startswith("["):  # an IPv6 literal keeps its colons
        return host.split("]", 1)[0] + "]"
    host = host.split(":", 1)[0]
    return host[4:] if host.startswith("www.") else host


def host_of(url: str) -> str:
    """The normalised host of a URL (with or without a scheme)."""
    url = url.strip()
    return normalize_host(urlsplit(url if "://" in url else "//" + url).netloc)


def normalize_url(url: str, with_query: bool = True) -> str:
    """``host/path[?query]`` with the host normalised, no scheme or fragment, no trailing ``/``."""
    url = url.strip()
    parts = urlsplit(url if "://" in url else "//" + url)
    out = normalize_host(parts.netloc) + parts.path
    if with_query and parts.query:
        out += "?" + parts.query
    return out.rstrip("/")


def parent_domains(host: str) -> list[str]:
    """``host`` and its parents down to its registered domain (``a.b.example.co.uk`` -> ..., ``example.co.uk``).
    A host under no known public suffix goes down to its last two labels; an IP address is only itself."""
    if not host or host.startswith("[") or host.replace(".", "").isdigit():
        return [host]
    registered = _extractor()(host).top_domain_under_public_suffix or ".".join(host.split(".")[-2:])
    if not host.endswith(registered):
        return [host]
    out = [host]
    while host != registered and "." in host:
        host = host.split(".", 1)[1]
        out.append(host)
    return out


class HashedList:
    """A block list held as sorted 64-bit hashes with a category index each: UT1's adult list alone has
    millions of domains, ~0.5 GB per worker as a Python dict and ~10 bytes an entry here. A 64-bit hash
    collision between a listed and an unlisted host is ~5e-8 likely at 10^6 listed x 10^6 seen (it would
    block, never unblock)."""

    def __init__(self) -> None:
        self._hashes: list[int] = []
        self._cats: list[int] = []
        self.categories: list[str] = []
        self.keys = np.empty(0, np.uint64)
        self.values = np.empty(0, np.uint16)

    def add(self, key: str, category: str) -> None:
        if category not in self.categories:
            self.categories.append(category)
        self._hashes.append(xxhash.xxh64_intdigest(key.encode("utf-8", "surrogatepass")))
        self._cats.append(self.categories.index(category))

    def freeze(self) -> None:
        """Sorted and deduplicated, the first entry of a key kept (files are read in category order)."""
        keys = np.array(self._hashes, np.uint64)
        keys, first = np.unique(keys, return_index=True)
        self.keys, self.values = keys, np.array(self._cats, np.uint16)[first]
        self._hashes, self._cats = [], []

    def __len__(self) -> int:
        return len(self.keys)

    def get(self, key: str) -> str | None:
        h = np.uint64(xxhash.xxh64_intdigest(key.encode("utf-8", "surrogatepass")))
        i = int(np.searchsorted(self.keys, h))
        return self.categories[self.values[i]] if i < len(self.keys) and self.keys[i] == h else None


class UrlFilter:
    """Why a URL is blocked, or None.

    :param blocklist: a folder in the UT1 layout (local or fsspec URL), or None.
    :param categories: only these categories of it (default: every category folder).
    :param subwords: banned sub-words, matched in the lower-cased URL.
    """

    def __init__(
        self, blocklist: str | None = None, categories: Iterable[str] | None = None, subwords: Iterable[str] = ()
    ) -> None:
        self.domains = HashedList()
        self.urls = HashedList()
        if blocklist:
            self._load(blocklist, set(categories) if categories else None)
        words = sorted({w.strip().lower() for w in subwords if w.strip()})
        self._subwords = re.compile("|".join(map(re.escape, words))) if words else None

    def _load(self, root: str, wanted: set[str] | None) -> None:
        found: set[str] = set()
        files = sorted(f for kind in _LIST_FILES for f in storage.glob(storage.join(root, "*", kind)))
        for uri in files:  # sorted by category: the first category in name order wins a host both list
            category, kind = uri.rstrip("/").rsplit("/", 2)[-2:]
            if wanted is not None and category not in wanted:
                continue
            found.add(category)
            table = self.domains if kind == "domains" else self.urls
            norm = normalize_host if kind == "domains" else normalize_url
            with storage.open_read(uri) as f:
                for raw in f:
                    line = raw.decode("utf-8", "replace").strip()
                    if line and not line.startswith("#"):
                        table.add(norm(line), category)
        self.domains.freeze()
        self.urls.freeze()
        missing = sorted((wanted or set()) - found)
        if missing or not found:
            what = f"categories {missing}" if missing else "<category>/domains or <category>/urls file"
            raise ValueError(f"URL block list {root}: no {what} (expected the UT1 layout: <category>/domains, urls)")

    def __bool__(self) -> bool:
        return bool(len(self.domains) or len(self.urls) or self._subwords)

    def reason(self, url: str | None) -> str | None:
        if not url:
            return None
        if len(self.domains):
            for host in parent_domains(host_of(url)):
                category = self.domains.get(host)
                if category:
                    return f"{BLOCKLIST}:{category}"
        if len(self.urls):
            category = self.urls.get(normalize_url(url)) or self.urls.get(normalize_url(url, with_query=False))
            if category:
                return f"{BLOCKLIST}:{category}"
        if self._subwords is not None and self._subwords.search(url.lower()):
            return SUBWORD
        return None
