"""How long a trigger waits between looks."""

from __future__ import annotations

import asyncio
import contextlib
import math
import signal
import threading
from collections.abc import Iterator
from typing import Any

FIRST_POLL_S = 0.5


class PollSchedule:
    """Seconds between a trigger's looks: a short first wait, doubled after each look up to ``interval``.

    A gate on a stage that takes seconds (or a quorum reached in seconds) opens about when it happens,
    not a whole interval later, and a long stage is still looked at only every ``interval``: a few more
    looks per gate in all (0.5, 1, 2, 4 s before a 5 s interval). :meth:`restart` goes back to the short
    wait, for a moment when the end is near (every unit checkpointed, only the job's final step left).

    :param interval: the longest wait (the operator's ``poll_interval``).
    :param first: the first wait (no longer than ``interval``).
    """

    def __init__(self, interval: float, first: float = FIRST_POLL_S) -> None:
        self.interval = max(0.0, float(interval))
        self.first = min(max(0.0, float(first)), self.interval)
        self._next = self.first

    def next(self) -> float:
        """The wait before the next look (each call moves the schedule on)."""
        wait = self._next
        self._next = min(self.interval, max(2 * self._next, self.first)) if self._next else self.interval
        return wait

    def restart(self) -> None:
        self._next = self.first


async def wait_for_look(seconds: float, backend: Any = None, handle: dict | None = None) -> None:
    """Wait ``seconds`` before the next look, or less once the job ``handle`` names has finished.

    Where the backend's status is cheap to read (its ``status_poll_s``: the local backend's is a /proc
    read), it is read every ``status_poll_s`` while waiting, so a gate opens within that step of the
    job's end rather than up to a whole ``poll_interval`` later (measured on a real scheduler and
    triggerer: 1-6 s per gate, most of the Airflow overhead on a run's critical path). Slurm's and
    Kubernetes' status is a scheduler or API call: their followers wait the whole interval.
    """
    step = getattr(backend, "status_poll_s", None) if handle else None
    if not step or seconds <= step:
        await asyncio.sleep(seconds)
        return
    steps = math.ceil(seconds / step)
    for k in range(steps):
        await asyncio.sleep(min(step, seconds - k * step))
        if k + 1 < steps and (await asyncio.to_thread(backend.status, handle)).state.finished:
            return


# The task runner's SIGTERM handler: it calls the task's on_kill and returns. dag.test runs a deferred task's
# trigger inline in that same process, with that handler still in place, so a SIGTERM was "handled" and the
# trigger went on waiting (25 s+, or for ever on a gate that never opens).
_TASK_RUNNER = "airflow.sdk.execution_time.task_runner"


@contextlib.contextmanager
def interruptible_inline() -> Iterator[None]:
    """Around an inline trigger's run (dag.test): a SIGTERM runs the handler that was there (the task's
    on_kill), then cancels the trigger and ends the process (exit 143). In a triggerer (no task runner's
    handler in place, or not the main thread) nothing changes: the triggerer handles its own signals."""
    handler = signal.getsignal(signal.SIGTERM)
    if threading.current_thread() is not threading.main_thread() or getattr(handler, "__module__", "") != _TASK_RUNNER:
        yield
        return
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    terminated = []

    def stop() -> None:
        terminated.append(True)
        with contextlib.suppress(Exception):
            handler(signal.SIGTERM, None)  # the task's on_kill (a job's cancel), as before
        if task is not None:
            task.cancel()

    loop.add_signal_handler(signal.SIGTERM, stop)
    try:
        yield
    except asyncio.CancelledError:
        if terminated:
            raise SystemExit(128 + signal.SIGTERM) from None
        raise
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        signal.signal(signal.SIGTERM, handler)
