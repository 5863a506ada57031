"""Fault points: named places in the code where a test can make the process die as a node would.

``CURATION_FAULT=<point>[@N]`` in a job's environment makes the N-th call (default: the first) of
``fault_point("<point>")`` in that process kill the process with SIGKILL: no exception handler, no
``finally``, no ``atexit`` runs, exactly what an out-of-memory kill or a lost node leaves behind. The
points are listed in ``docs/reliability.md``; ``tests/reliability`` kills every stage at each of them
and checks that a rerun produces the same curated output as a clean run.

``CURATION_HOLD=<point>[@N]=<path>`` makes the N-th call wait, instead, until ``path`` exists: a test can
stop a job exactly there (say, between two units) and let it go on once it has seen what it wanted, with
no timing assumption.

Unset (production), a call is one comparison: the variables are read once, at import.
"""

from __future__ import annotations

import os
import signal
import time

ENV = "CURATION_FAULT"


def parse(value: str | None) -> tuple[str, int] | None:
    """``"point@N"`` -> ``("point", N)``; ``"point"`` -> ``("point", 1)``; empty -> None."""
    if not value or not value.strip():
        return None
    name, at, nth = value.strip().partition("@")
    count = int(nth) if nth.isdigit() else (0 if at else 1)
    if not name or count < 1:
        raise ValueError(f"{ENV}={value!r}: expected <point> or <point>@<N> with N >= 1")
    return name, count


HOLD_ENV = "CURATION_HOLD"


def parse_hold(value: str | None) -> tuple[str, int, str] | None:
    """``"point@N=path"`` -> ``("point", N, "path")``; empty -> None."""
    if not value or not value.strip():
        return None
    point, eq, path = value.strip().partition("=")
    target = parse(point)
    if target is None or not eq or not path:
        raise ValueError(f"{HOLD_ENV}={value!r}: expected <point>[@<N>]=<path>")
    return target[0], target[1], path


_TARGET = parse(os.environ.get(ENV))
_HOLD = parse_hold(os.environ.get(HOLD_ENV))
_hits = 0
_hold_hits = 0


def fault_point(name: str) -> None:
    """Die here (SIGKILL) when ``CURATION_FAULT`` names this point and this is its N-th hit."""
    if _HOLD is not None and name == _HOLD[0]:
        _hold(name)
    if _TARGET is None or name != _TARGET[0]:
        return
    global _hits
    _hits += 1
    if _hits == _TARGET[1]:
        os.kill(os.getpid(), signal.SIGKILL)


def _hold(name: str) -> None:
    global _hold_hits
    _hold_hits += 1
    if _hold_hits == _HOLD[1]:
        while not os.path.exists(_HOLD[2]):
            time.sleep(0.05)
