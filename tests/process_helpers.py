"""Helpers for tests that start servers of their own (Ray heads): free ports, and stopping a process group."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_group(proc: subprocess.Popen, temp: str, wait_s: float) -> None:
    """Wait up to ``wait_s`` for ``proc`` (already asked to stop) to end, kill whatever of its process group is
    left (it was started with ``start_new_session``), and remove its temp folder."""
    try:
        proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    shutil.rmtree(temp, ignore_errors=True)
