"""Bounds on what validation queries may take: time per check, memory, and temp disk.

A declared ``sql`` check is any SQL a param can carry, so it can run forever (``range(10**12)``), hold
the machine's memory or spill without end. Each check gets a timeout (``check_timeout_s``, or the check's
own ``timeout_s``); the engine gets a memory limit within the job's budget and a private temp folder,
capped, that the stage removes when it ends:

- DuckDB: ``memory_limit``, ``temp_directory``, ``max_temp_directory_size`` on the connection (set before
  it is locked), and ``con.interrupt()`` from a timer at the timeout;
- Daft: the ``sql`` checks in one child process (spawned: Daft's thread pools do not survive a fork),
  killed at a check's timeout, or as soon as its memory (RSS) or its temp folder passes the limit, and
  started afresh for the next check.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from airflow_curation.core import storage
from airflow_curation.stages.mappers.budget import available_memory
from airflow_curation.stages.validate.sandbox import SqlFailed

log = logging.getLogger(__name__)

GiB = 1024**3
DEFAULT_TIMEOUT_S = 300.0
MEMORY_SHARE = 0.6  # of the memory available when the stage starts: the rest for Python, Arrow, the report
DEFAULT_MAX_TEMP = 16 * GiB  # or half the free space of the temp folder's disk, if less
_PREFIX = "curation-validate-"
_POLL_S = 0.2  # how often a Daft child's memory and temp folder are looked at
STARTUP_S = 300.0  # for a child to import and build its frames


class CheckTimedOut(RuntimeError):
    """A query ran past its check's timeout and was stopped."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"stopped after {duration(seconds)}")
        self.seconds = seconds


class CheckOverBudget(RuntimeError):
    """A query's process passed its memory or temp-disk limit and was stopped."""


@dataclass(frozen=True)
class Bounds:
    timeout_s: float
    memory_bytes: int
    temp_dir: str
    max_temp_bytes: int


def duration(seconds: float) -> str:
    """``5 min``, ``90 s``: how a timeout reads in a message."""
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def check_timeout(check: dict[str, Any], default: float) -> float:
    """The check's own ``timeout_s``, else the stage's; a positive number of seconds."""
    value = check.get("timeout_s", default)
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"timeout_s must be a number of seconds, not {value!r}") from None
    if not seconds > 0:
        raise ValueError(f"timeout_s must be positive, not {value!r}")
    return seconds


@contextlib.contextmanager
def scratch(config: dict[str, Any]) -> Iterator[Bounds]:
    """The bounds of this stage run, with a private temp folder under ``temp_dir`` (default: the working
    directory, which the local and Slurm backends set to the job's own folder; where it is read-only, as in
    a Kubernetes pod, the temp folder, the pod's own ``emptyDir``), removed at the end. Folders that killed
    runs on this host left are removed first."""
    base = config.get("temp_dir") or (os.getcwd() if os.access(os.getcwd(), os.W_OK) else tempfile.gettempdir())
    base = os.path.abspath(base)
    os.makedirs(base, exist_ok=True)
    _remove_dead(base)
    folder = tempfile.mkdtemp(prefix=f"{_PREFIX}{socket.gethostname()}-{os.getpid()}-", dir=base)
    try:
        yield Bounds(
            timeout_s=float(config.get("check_timeout_s") or DEFAULT_TIMEOUT_S),
            memory_bytes=_bytes(config.get("memory_limit")) or int(available_memory() * MEMORY_SHARE),
            temp_dir=folder,
            max_temp_bytes=_bytes(config.get("max_temp_size"))
            or min(DEFAULT_MAX_TEMP, shutil.disk_usage(base).free // 2),
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _bytes(value: Any) -> int | None:
    """``4GB``, ``300 MB`` or a number of bytes; None when not given."""
    if not value:
        return None
    from airflow_curation.stages.settings import parse_size

    return int(value) if isinstance(value, (int, float)) else parse_size(str(value).replace(" ", ""))


def _remove_dead(base: str) -> None:
    mine = f"{_PREFIX}{socket.gethostname()}-"
    for name in os.listdir(base):
        if not name.startswith(mine):
            continue
        pid = name[len(mine) :].split("-", 1)[0]
        if pid.isdigit() and not storage.pid_alive(int(pid)):
            log.info("validate: removing %s (the temp folder of a killed run)", name)
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)


@contextlib.contextmanager
def interrupt_after(seconds: float, interrupt: Callable[[], None]) -> Iterator[threading.Event]:
    """Call ``interrupt`` once ``seconds`` have passed, unless the block ends first; the event says whether
    it was called."""
    fired = threading.Event()

    def fire() -> None:
        fired.set()
        interrupt()

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    try:
        yield fired
    finally:
        timer.cancel()


class QueryProcess:
    """A spawned child process that runs ``prepare(*args)`` once, then ``run(prepared, *run_args)`` per query,
    its working and temp folder its own, in ``bounds.temp_dir``. A query's timeout counts from when it is
    sent (the child's imports and setup get ``STARTUP_S``, once); past it the child is killed
    (:class:`CheckTimedOut`), as it is whenever its resident memory or its temp folder passes the bounds
    (:class:`CheckOverBudget`); the next query starts a fresh one. An exception in the child is raised
    here; the child's death (killed by the kernel for memory, say) is a :class:`~.sandbox.SqlFailed`."""

    def __init__(self, prepare: Callable[..., Any], args: tuple, bounds: Bounds) -> None:
        self.prepare, self.args, self.bounds = prepare, args, bounds
        self._proc: Any = None
        self._conn: Any = None
        self._work = ""

    def run(self, run: Callable[..., Any], run_args: tuple, timeout_s: float) -> Any:
        try:
            if self._proc is None:
                self._start()
            self._conn.send((run, run_args))
            kind, value = self._wait(timeout_s, CheckTimedOut(timeout_s))
        except BaseException:
            self.close()  # whatever it was doing is not wanted any more
            raise
        if kind == "error":
            raise value
        return value

    def _start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, theirs = ctx.Pipe()
        self._work = tempfile.mkdtemp(prefix="child-", dir=self.bounds.temp_dir)
        self._proc = ctx.Process(target=_child_main, args=(theirs, self._work, self.prepare, self.args), daemon=True)
        self._proc.start()
        theirs.close()
        kind, value = self._wait(STARTUP_S, None)
        if kind == "error":
            raise value

    def _wait(self, seconds: float, timed_out: Exception | None) -> tuple[str, Any]:
        proc, conn = self._proc, self._conn
        deadline = time.monotonic() + seconds
        while not conn.poll(_POLL_S):
            if not proc.is_alive() and not conn.poll():
                raise SqlFailed(f"the query process died (exit code {proc.exitcode})")
            if time.monotonic() > deadline:
                raise timed_out or SqlFailed(f"the query process did not start within {duration(seconds)}")
            over = _over_budget(proc.pid, self._work, self.bounds)
            if over:
                raise CheckOverBudget(over)
        try:
            return conn.recv()
        except EOFError:
            raise SqlFailed(f"the query process died (exit code {proc.join(5) or proc.exitcode})") from None

    def close(self) -> None:
        if self._proc is not None:
            if self._proc.is_alive():
                self._proc.kill()
            self._proc.join(10)
            self._conn.close()
            shutil.rmtree(self._work, ignore_errors=True)
        self._proc = self._conn = None


def _child_main(conn, work: str, prepare: Callable[..., Any], args: tuple) -> None:
    os.chdir(work)
    for var in ("TMPDIR", "TEMP", "TMP"):
        os.environ[var] = work
    tempfile.tempdir = work
    try:
        prepared = prepare(*args)
    except BaseException as e:  # noqa: BLE001 - sent to the parent, which raises it
        conn.send(("error", _sendable(e)))
        return
    conn.send(("ready", None))
    while True:
        try:
            run, run_args = conn.recv()
        except EOFError:  # the parent is done
            return
        try:
            conn.send(("done", run(prepared, *run_args)))
        except BaseException as e:  # noqa: BLE001 - sent to the parent, which raises it
            conn.send(("error", _sendable(e)))


def _sendable(e: BaseException) -> BaseException:
    return e if _picklable(e) else RuntimeError(f"{type(e).__name__}: {e}")


def _picklable(e: BaseException) -> bool:
    import pickle

    try:
        pickle.loads(pickle.dumps(e))
        return True
    except Exception:  # noqa: BLE001 - any failure to round-trip: send its text instead
        return False


def _over_budget(pid: int, folder: str, bounds: Bounds) -> str | None:
    import psutil

    try:
        rss = sum(p.memory_info().rss for p in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)])
    except psutil.Error:
        return None  # it just ended: the result (or its death) is read next
    if rss > bounds.memory_bytes:
        return f"its process used {rss / GiB:.2f} GiB, past the memory limit of {bounds.memory_bytes / GiB:.2f} GiB"
    used = _folder_bytes(folder)
    if used > bounds.max_temp_bytes:
        return f"it wrote {used / GiB:.2f} GiB of temp files, past the limit of {bounds.max_temp_bytes / GiB:.2f} GiB"
    return None


def _folder_bytes(folder: str) -> int:
    total = 0
    for root, _, files in os.walk(folder):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, f)).st_size
    return total
