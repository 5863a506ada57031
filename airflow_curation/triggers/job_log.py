"""Relay a stage job's log into an Airflow task log (from a trigger), at the level each line was logged.

A job's log is its process's stderr: ``<time> <LEVEL> <logger>: <message>`` lines from the stage, and
on a crash a Python traceback. Relayed as is, every line would be an INFO record, a traceback 30 INFO
lines. Here a record keeps its level (a unit's failure is a WARNING in the task log too), a
traceback becomes one ERROR record holding the whole block, and the job's result (the JSON line it ends
with, for the backend) becomes one readable line.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import Any

from airflow_curation.jobs.result import JobResult

_LEVEL = re.compile(r"^\S+ \S+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")
_TRACEBACK = "Traceback (most recent call last):"
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")


class JobLogRelay:
    """Feeds log text read by offset (``backend.logs(handle, offset)``) into a logger.

    :param log: the logger to write to (a trigger's ``self.log`` ends up in the task's log).
    :param job_id: shown in front of every relayed line.
    """

    def __init__(self, log: logging.Logger | Any, job_id: str) -> None:
        self.log = log
        self.prefix = f"[job {job_id}]"
        self._partial = ""  # a line the last read cut in two
        self._traceback: list[str] = []

    def feed(self, text: str) -> None:
        """Relay ``text``; a last line without its newline waits for the next read.

        :param text: the log's new text since the previous read.
        """
        text = self._partial + text
        lines = text.split("\n")
        self._partial = lines.pop()
        for line in lines:
            self._line(line.rstrip("\r"))

    def flush(self) -> None:
        """Relay what is held back (the job ended: no more text will come)."""
        if self._partial:
            self._line(self._partial)
            self._partial = ""
        self._end_traceback()

    def _line(self, line: str) -> None:
        if self._traceback:
            if (
                line.startswith((" ", "\t"))
                or not line.strip()
                or line.startswith(_CHAINED)
                or line.startswith(_TRACEBACK)
            ):
                self._traceback.append(line)
                return
            self._traceback.append(line)  # the exception's own line closes the block
            self._end_traceback()
            return
        if line.startswith(_TRACEBACK):
            self._traceback = [line]
            return
        if not line.strip():
            return
        if line.startswith("{") and self._result(line):
            return
        match = _LEVEL.match(line)
        level = getattr(logging, match.group(1)) if match else logging.INFO
        self._emit(level, line)

    def _result(self, line: str) -> bool:
        """The job's last line is its result as JSON (for the backend): relayed as one readable line."""
        try:
            result = JobResult.from_dict(json.loads(line))
        except (ValueError, TypeError):
            return False
        self._emit(logging.INFO if result.succeeded else logging.ERROR, f"job result: {result.describe()}")
        return True

    def _end_traceback(self) -> None:
        if self._traceback:
            self._emit(logging.ERROR, "\n".join(self._traceback))
            self._traceback = []

    def _emit(self, level: int, text: str) -> None:
        emit: Callable[..., Any] = {
            logging.DEBUG: self.log.debug,
            logging.WARNING: self.log.warning,
            logging.ERROR: self.log.error,
            logging.CRITICAL: self.log.error,
        }.get(level, self.log.info)
        emit("%s %s", self.prefix, text)


def unit_line(stage: str, unit_id: str, info: dict[str, Any]) -> str:
    """One shard's progress line: its rows in and out, dropped and quarantined, with reasons.

    :param stage: the stage's name.
    :param unit_id: the unit (a shard, or a group of input files).
    :param info: ``rows``, ``shards`` and ``accounting`` (``read``, ``kept``, ``dropped``, ``quarantined``).
    """
    acc = info.get("accounting") or {}
    parts = [f"{stage}: unit {unit_id} checkpointed: {info.get('rows', 0)} rows in {info.get('shards', 0)} shards"]
    if acc:
        parts.append(f"read {acc.get('read', 0)}, kept {acc.get('kept', 0)}")
        for what in ("dropped", "quarantined"):
            reasons = acc.get(what) or {}
            if reasons:
                detail = ", ".join(f"{k}={v}" for k, v in sorted(reasons.items()))
                parts.append(f"{what} {sum(reasons.values())} ({detail})")
    return "; ".join(parts)
