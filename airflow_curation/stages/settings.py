"""Typed stage settings: each setting is declared once, in its stage's :class:`Settings`.

From that one declaration come the stage's defaults and which settings stay out of its fingerprint
(``runtime``), the ``curation <stage>`` flags (``cli/``) and the operators' config check, where the
strings a templated DAG param renders (``"true"``, ``"4"``, ``"0.7"``, ``"512MiB"``) are coerced once.

A setting's ``type`` is a coercer: ``bool``, ``int``, ``float``, ``str``, ``list``, ``dict`` or any function
of one value (:func:`size`, :func:`auto_or_bool`, :func:`str_or_list`, :func:`anything`). ``None`` is always
accepted: it is what the stage reads as "not set" (e.g. dedup's ``bands``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

# Templated params render "nothing" as these; an operator drops them, so the stage's default applies.
EMPTY = ("", "none", "null")

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.I)
_UNITS = {
    "": 1,
    "b": 1,
    "k": 1e3,
    "kb": 1e3,
    "kib": 1024,
    "m": 1e6,
    "mb": 1e6,
    "mib": 1024**2,
    "g": 1e9,
    "gb": 1e9,
    "gib": 1024**3,
    "t": 1e12,
    "tb": 1e12,
    "tib": 1024**4,
}
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


# -- coercers: one value in, the typed value out (ValueError/TypeError when it cannot be) --------------
def parse_size(text: str) -> int:
    """``512MB``, ``64KiB``, ``1000000`` -> bytes."""
    m = _SIZE.match(str(text))
    if not m or (m.group(2) or "").lower() not in _UNITS:
        raise ValueError(f"not a size: {text!r} (examples: 512MB, 64KiB, 1000000)")
    return int(float(m.group(1)) * _UNITS[(m.group(2) or "").lower()])


def size(value: Any) -> int:
    """Bytes: an integer, or a size with a unit (``512MiB``)."""
    return parse_size(value) if isinstance(value, str) else _int(value)


def auto_or_bool(value: Any) -> str | bool:
    """``"auto"``, or a boolean."""
    return "auto" if isinstance(value, str) and value.strip().lower() == "auto" else _bool(value)


def str_or_list(value: Any) -> str | list[str]:
    """A name, or a list of names (kept as given: both forms are read by the stage)."""
    if isinstance(value, str):
        return value
    return [_str(v) for v in _list(value)]


def anything(value: Any) -> Any:
    """Taken as it is (the stage checks it)."""
    return value


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError(f"expected a boolean (true/false), got {value!r}")


def _int(value: Any) -> int:
    try:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, (int, str)) and not isinstance(value, bool):
            return int(value)
    except ValueError:
        pass
    raise ValueError(f"expected an integer, got {value!r}")


def _float(value: Any) -> float:
    try:
        if isinstance(value, (int, float, str)) and not isinstance(value, bool):
            return float(value)
    except ValueError:
        pass
    raise ValueError(f"expected a number, got {value!r}")


def _str(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise ValueError(f"expected a string, got {value!r}")


def _list(value: Any) -> list:
    """A list; a string is a JSON list, or else comma-separated items (``"a.jsonl, b.jsonl"``)."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            value = _json(text)
            if isinstance(value, list):
                return value
        else:
            return [part.strip() for part in text.split(",") if part.strip()]
    raise ValueError(f"expected a list, got {value!r}")


def _dict(value: Any) -> dict:
    """A dict; a string is a JSON object."""
    if isinstance(value, str):
        value = _json(value)
    if isinstance(value, Mapping):
        return dict(value)
    raise ValueError(f"expected a mapping (a JSON object), got {value!r}")


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON: {e}") from None


_COERCERS: dict[Any, Callable[[Any], Any]] = {
    bool: _bool,
    int: _int,
    float: _float,
    str: _str,
    list: _list,
    dict: _dict,
}


@dataclass(frozen=True)
class Setting:
    """One stage setting.

    :param name: the config key (``snake_case``); the flag is ``--name-with-dashes`` unless ``flag`` says.
    :param type: ``bool``, ``int``, ``float``, ``str``, ``list``, ``dict`` or a coercer function.
    :param default: the value when not given.
    :param help: one line for ``--help`` and the docs.
    :param choices: the allowed values (after coercion).
    :param runtime: changes how a run executes, not what it produces: kept out of the fingerprint, so
        that e.g. more workers never invalidate checkpoints.
    :param cli: offered as a ``curation <stage>`` flag.
    :param flag: the flag when not derived from ``name`` (e.g. ``--target-shard-size``).
    :param off_flag: for a boolean, one more flag that sets it false (e.g. ``--all-rows`` for ``only_kept``).
    :param required: the stage cannot run without it (the CLI flag is required too).
    :param minimum: the lowest value allowed (a number): ``0`` rows per batch or bytes per file would make
        one row group per row, a file per sequence, or divide by it; refused when the config is read.
    :param maximum: the highest value allowed (a fraction's 1).
    :param keep_old_fingerprint: a setting added to a stage that already had runs: left out of the
        fingerprint while at its default, so that a configuration keeps the fingerprint (and the
        checkpoints) it had before the setting existed.
    """

    name: str
    type: Any = str
    default: Any = None
    help: str = ""
    choices: tuple | None = None
    runtime: bool = False
    cli: bool = True
    flag: str | None = None
    off_flag: str | None = None
    required: bool = False
    keep_old_fingerprint: bool = False
    minimum: float | None = None
    maximum: float | None = None

    @property
    def coercer(self) -> Callable[[Any], Any]:
        return _COERCERS.get(self.type, self.type)

    @property
    def bounds(self) -> str:
        """The bounds in words (``between 0 and 1``, ``at least 1``), or ``""``: for messages and ``--help``."""
        low, high = self.minimum, self.maximum
        if low is not None and high is not None:
            return f"between {low:g} and {high:g}"
        if low is not None:
            return f"at least {low:g}"
        return f"at most {high:g}" if high is not None else ""

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    def coerce(self, value: Any, where: str) -> Any:
        if value is None:
            return None
        try:
            value = self.coercer(value)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{where}: setting {self.name!r}: {e}") from None
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"{where}: {self.name} must be one of {', '.join(map(str, self.choices))}, not {value!r}")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            low, high = self.minimum, self.maximum
            if (low is not None and value < low) or (high is not None and value > high):
                raise ValueError(f"{where}: {self.name} must be {self.bounds}, not {value!r}")
        return value


class Settings:
    """A stage's settings, in declaration order.

    :param settings: the settings; a later one of the same name replaces an earlier one (a stage may
        redeclare a base setting with another default).
    :param renamed: old key -> new key. An old key is refused with a message naming the new one, never
        ignored or mapped silently: it might have meant something else, and it is part of fingerprints.
    """

    def __init__(self, *settings: Setting, renamed: Mapping[str, str] | None = None) -> None:
        by_name: dict[str, Setting] = {}
        for s in settings:
            by_name[s.name] = s
        self._by_name = by_name
        self.renamed = dict(renamed or {})

    def extend(self, *settings: Setting, renamed: Mapping[str, str] | None = None) -> "Settings":
        """These settings plus ``settings`` (which replace those of the same name)."""
        return Settings(*self, *settings, renamed={**self.renamed, **(renamed or {})})

    def replace(self, name: str, **changes: Any) -> "Settings":
        """These settings with ``name`` changed (e.g. another default in one stage)."""
        return Settings(*(replace(s, **changes) if s.name == name else s for s in self), renamed=self.renamed)

    def __iter__(self) -> Iterator[Setting]:
        return iter(self._by_name.values())

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __getitem__(self, name: str) -> Setting:
        return self._by_name[name]

    @property
    def defaults(self) -> dict[str, Any]:
        return {s.name: s.default for s in self}

    @property
    def runtime_keys(self) -> frozenset[str]:
        return frozenset(s.name for s in self if s.runtime)

    def coerce(self, config: Mapping[str, Any], where: str, drop_empty: bool = False) -> dict[str, Any]:
        """``config`` checked and typed: unknown and renamed keys refused, values coerced, choices checked.

        :param drop_empty: leave out values that are None or render as nothing (``""``, ``"None"``,
            ``"null"``), as a templated DAG param does for "not set", so that the stage's default applies.
        """
        renamed = sorted(k for k in config if k in self.renamed and k not in self._by_name)
        if renamed:
            raise ValueError(
                f"{where}: " + "; ".join(f"setting {k!r} was renamed to {self.renamed[k]!r}" for k in renamed)
            )
        unknown = sorted(set(config) - set(self._by_name))
        if unknown:
            raise ValueError(f"{where}: unknown settings {unknown}; known: {sorted(self._by_name)}")
        out = {}
        for key, value in config.items():
            if drop_empty and (value is None or (isinstance(value, str) and value.strip().lower() in EMPTY)):
                continue
            out[key] = self[key].coerce(value, where)
        return out

    def fingerprint_config(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The settings that change what a stage produces (every one but the runtime ones)."""
        runtime = self.runtime_keys
        return {k: v for k, v in config.items() if k not in runtime and not self._new_at_default(k, v)}

    def _new_at_default(self, key: str, value: Any) -> bool:
        s = self._by_name.get(key)
        return s is not None and s.keep_old_fingerprint and value == s.default
