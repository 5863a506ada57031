"""The sandbox of ``sql`` checks: a declared query may read the curated view and nothing else.

Checks come from YAML files, dicts and DAG params, so whoever sets a param writes this SQL. Left
alone it could read any file the job can (``read_text('/proc/self/environ')`` holds the storage
secrets), write files (``COPY ... TO``), attach databases, or drop the views later checks read.

- DuckDB: exactly one statement, of type SELECT (DuckDB's own parser says which), on a connection
  locked once the views are built: no file but the view's own, no extension, no setting change.
- Daft has no such switch and its SQL reads files by name (``read_csv(...)``, ``FROM 'x.csv'``,
  ``url_download(...)``, ``url_upload(...)``), so a query must first pass a strict lexical gate:
  one SELECT/WITH query in a plain subset of SQL (no comments, no backslash, no ``$``, ``&``, ``;``,
  backticks or non-ASCII outside strings), calling only pure functions, with no table function and
  no string where a table goes. What the gate accepts is exactly what Daft receives.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterator

from airflow_curation.core import redact


class SqlRefused(ValueError):
    """The query is not a single read-only query over the view."""


class SqlFailed(RuntimeError):
    """The engine could not run the query (the message is scrubbed)."""


# --- DuckDB ---------------------------------------------------------------------------------------


def duckdb_statement(query: str) -> Any:
    """The one SELECT statement of ``query``, parsed by DuckDB; anything else is refused."""
    import duckdb

    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as e:
        raise SqlRefused(f"not valid SQL: {redact.scrub(e)}") from None
    if len(statements) != 1:
        raise SqlRefused(f"exactly one statement may run, got {len(statements)}")
    kind = statements[0].type
    if kind != duckdb.StatementType.SELECT:
        raise SqlRefused(f"only a read query (SELECT, WITH) may run, not {kind.name}")
    return statements[0]


def lock_duckdb(con: Any, files: list[str]) -> None:
    """No file access but ``files`` from now on, and no setting can be changed back.

    The views read their files at query time, so exactly those stay allowed (remote ones too: they
    are read through the registered fsspec filesystem, under the same rule).
    """
    listed = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
    con.execute(f"SET allowed_paths = [{listed}]")
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


# --- Daft -----------------------------------------------------------------------------------------

# Pure functions a validation query may call in Daft SQL; any other function Daft knows is refused
# (new Daft functions are refused until listed here).
DAFT_FUNCTIONS = frozenset(
    """
    count count_distinct sum avg mean min max median percentile product stddev stddev_pop stddev_samp var
    var_pop var_samp variance pearson_correlation bool_and bool_or rank dense_rank row_number lag lead
    abs sign round ceil floor trunc sqrt cbrt exp expm1 ln log log2 log10 log1p pow power pmod factorial
    negate clip sin cos tan cot sec csc sinh cosh tanh arcsin arccos arctan arctan2 atan2 arcsinh arccosh
    arctanh degrees radians hypot pi e is_nan is_inf not_nan fill_nan try_divide coalesce hash
    length length_bytes lower upper capitalize left right lpad rpad lstrip rstrip strip reverse repeat
    replace translate substr split split_part substring_index concat concat_ws contains utf8_contains
    starts_with ends_with find like ilike count_matches regexp_match regexp_count regexp_extract
    regexp_extract_all regexp_replace regexp_split extract extract_all normalize ascii chr space
    to_camel_case to_snake_case to_kebab_case to_title_case to_upper_camel_case to_upper_snake_case
    to_upper_kebab_case levenshtein_distance damerau_levenshtein_distance hamming_distance
    hamming_distance_str jaro_similarity jaro_winkler_similarity jaccard_similarity cosine_similarity
    cosine_distance dot_product euclidean_distance json_array_length json_object_keys jq
    list_contains list_count list_count_distinct list_distinct list_get list_join list_max list_mean
    list_min list_sum list_sort list_bool_and list_bool_or list_value_counts list_flatten list_slice
    element struct_get struct_extract map_get map_keys map_extract
    date time year month day hour minute second millisecond microsecond nanosecond quarter day_of_week
    day_of_month day_of_year dayofmonth dayofyear week_of_year weekofyear date_trunc date_add date_sub
    date_diff datediff dateadd datepart date_format strftime to_date to_datetime make_date
    make_timestamp make_timestamp_ltz to_unix_epoch from_unixtime unix_date date_from_unix_date
    timestamp_seconds timestamp_millis timestamp_micros last_day add_months months_between next_day
    current_date current_timestamp total_days total_hours total_minutes total_seconds
    total_milliseconds total_microseconds total_nanoseconds to_string
""".split()
)
# Statements are refused by the first word already; these keywords have no business in a query.
_DAFT_KEYWORDS = frozenset(
    """
    set use show describe explain drop create alter insert update delete merge copy attach detach
    install load pragma call execute prepare grant revoke truncate vacuum checkpoint export import
""".split()
)
# Where a table goes: Daft reads a string there as a file (``FROM 'x.csv'``).
_TABLE_KEYWORDS = frozenset({"from", "join", "lateral", "apply", "table"})
# What ends a FROM clause: keywords Daft's parser never takes for a table alias without AS.
_FROM_ENDS = frozenset("where group having order limit offset union except intersect select window qualify".split())
_LEX = re.compile(
    r"""
    (?P<ws>[ \t\r\n]+)
  | (?P<str>(?:[A-Za-z]{1,2})?'(?:[^']|'')*')  # with its prefix, if any (E'..', N'..', X'..')
  | (?P<qid>"(?:[^"]|"")*")
  | (?P<bad>--|/\*|\*/)
  | (?P<word>[A-Za-z0-9_]+)
  | (?P<op>[(),.*+\-/%<>=!|:\[\]{}^~])
""",
    re.X,
)
_WORD = re.compile(r"[A-Za-z0-9_]+")


def daft_query(query: str) -> str:
    """``query`` (without trailing semicolons) if it passes the Daft gate; else :class:`SqlRefused`."""
    q = re.sub(r"[\s;]+$", "", query)
    if "\\" in q:
        raise SqlRefused("backslashes are not allowed in Daft SQL checks")
    tokens = [(kind, text) for kind, text in _lex(q) if kind != "ws"]
    _check_start(tokens)
    denied = _daft_denied()
    for kind, text in tokens:
        names = text.split("'", 1)[0] if kind == "str" else text  # a string: only its prefix
        for word in _WORD.findall(names):
            _check_word(word, bare=kind == "word", denied=denied)
    _check_table_positions(tokens)
    return q


def _lex(q: str) -> Iterator[tuple[str, str]]:
    pos = 0
    while pos < len(q):
        m = _LEX.match(q, pos)
        if m is None or m.lastgroup == "bad":
            what = m.group() if m else q[pos]
            raise SqlRefused(
                f"{what!r} at character {pos} is not allowed in Daft SQL checks (comments, "
                "';', '$', '&', '#', backticks and non-ASCII are refused outside strings)"
            )
        yield m.lastgroup, m.group()
        pos = m.end()


def _check_start(tokens: list[tuple[str, str]]) -> None:
    first = next((t for k, t in tokens if (k, t) != ("op", "(")), "")
    if first.lower() not in ("select", "with"):
        raise SqlRefused("only a read query (SELECT, WITH) may run")


def _check_word(word: str, bare: bool, denied: frozenset[str]) -> None:
    w = word.lower()
    rest = w.lstrip("0123456789")
    # A tokenizer may split a leading number off (``1url_download``, ``0xurl_download``): check the rest too.
    for cand in {w, rest, rest[1:]} if rest != w else {w}:
        if cand.startswith("read_"):
            raise SqlRefused(f"{word!r}: table functions that read files are not allowed")
        if cand in denied:
            raise SqlRefused(
                f"{word!r} names a Daft function that may reach outside the view (files, URLs, "
                "models): only pure functions may be called"
            )
    if bare and w in _DAFT_KEYWORDS:
        raise SqlRefused(f"{word!r}: only a read query (SELECT, WITH) may run")


@dataclass
class _Level:
    """One parenthesis level of the query, as far as tables go."""

    at_table: bool = False  # the parenthesis itself stands where a table goes: FROM (...)
    in_from: bool = False  # inside a FROM clause, where ',' separates tables


def _check_table_positions(tokens: list[tuple[str, str]]) -> None:
    """No string literal and no function call where a table goes (Daft would read a file there)."""
    levels = [_Level()]
    prev: tuple[str, str] | None = None
    prev2: tuple[str, str] | None = None
    for kind, text in tokens:
        if kind == "str" and _table_position(prev, levels[-1]):
            raise SqlRefused("a string where a table could go is not allowed (Daft reads it as a file)")
        if (kind, text) == ("op", "(") and prev and prev[0] in ("word", "qid") and _table_position(prev2, levels[-1]):
            raise SqlRefused(f"table function {prev[1]!r} is not allowed: query the views")
        if (kind, text) == ("op", "("):
            at_table = _table_position(prev, levels[-1])  # FROM (...): a subquery, or tables again
            levels.append(_Level(at_table=at_table, in_from=at_table))
        elif (kind, text) == ("op", ")"):
            if len(levels) == 1:
                raise SqlRefused("unbalanced parentheses")
            levels.pop()
        elif kind == "word" and text.lower() in ("from", "join"):
            levels[-1].in_from = True
        elif kind == "word" and text.lower() in _FROM_ENDS and not (prev and prev[1].lower() in ("as", ".")):
            levels[-1].in_from = False  # (after AS or '.', a keyword is a name: the FROM goes on)
        prev2, prev = prev, (kind, text)


def _table_position(prev: tuple[str, str] | None, level: _Level) -> bool:
    """Would a table go after ``prev``? After FROM/JOIN, a ',' of a FROM clause, a '.' (the next
    part of a name), or a '(' that itself stands where a table goes."""
    if prev is None:
        return False
    kind, text = prev
    if kind == "word":
        return text.lower() in _TABLE_KEYWORDS
    if text == ",":
        return level.in_from
    if text == ".":
        return True
    if text == "(":
        return level.at_table
    return False


_DENIED: frozenset[str] | None = None


def _daft_denied() -> frozenset[str]:
    """Every function Daft's SQL knows that is not on the pure list."""
    global _DENIED
    if _DENIED is None:
        from daft.daft import list_sql_functions

        _DENIED = frozenset(f.name.lower() for f in list_sql_functions()) - DAFT_FUNCTIONS
    return _DENIED
