"""Row accounting: every row read is kept, dropped with a reason, or quarantined.

Notes count events that stand for no row (an empty or special input file, a stream cut short): they are
reported beside the books, not in them.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field


def allowed_failures(max_failed_fraction: float, units: int) -> int:
    """How many units may fail before a run fails: ``floor(fraction * units)`` (the one place it is computed:
    the stage runner, the gates and the backends all ask here)."""
    return math.floor(float(max_failed_fraction or 0.0) * units)


class AccountingError(AssertionError):
    """The books do not close: rows were lost or invented."""


@dataclass
class RowAccounting:
    read: int = 0
    kept: int = 0
    dropped: Counter = field(default_factory=Counter)
    quarantined: Counter = field(default_factory=Counter)
    notes: Counter = field(default_factory=Counter)

    def keep(self, n: int = 1) -> None:
        self.read += n
        self.kept += n

    def drop(self, reason: str, n: int = 1) -> None:
        self.read += n
        self.dropped[reason] += n

    def quarantine(self, reason: str, n: int = 1) -> None:
        self.read += n
        self.quarantined[reason] += n

    def note(self, reason: str, n: int = 1) -> None:
        self.notes[reason] += n

    def merge(self, other: "RowAccounting") -> "RowAccounting":
        self.read += other.read
        self.kept += other.kept
        self.dropped.update(other.dropped)
        self.quarantined.update(other.quarantined)
        self.notes.update(other.notes)
        return self

    @property
    def closes(self) -> bool:
        return self.read == self.kept + sum(self.dropped.values()) + sum(self.quarantined.values())

    def check(self, where: str = "") -> None:
        if not self.closes:
            raise AccountingError(f"row accounting does not close{' in ' + where if where else ''}: {self.to_dict()}")

    def to_dict(self) -> dict:
        d = {
            "read": self.read,
            "kept": self.kept,
            "dropped": dict(sorted(self.dropped.items())),
            "quarantined": dict(sorted(self.quarantined.items())),
        }
        if self.notes:  # only where there are any: the stages that never note keep their old records
            d["notes"] = dict(sorted(self.notes.items()))
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "RowAccounting":
        return cls(
            read=d["read"],
            kept=d["kept"],
            dropped=Counter(d.get("dropped", {})),
            quarantined=Counter(d.get("quarantined", {})),
            notes=Counter(d.get("notes", {})),
        )
