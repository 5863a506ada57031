"""Helpers for tests that start processes of their own: free ports, stopping a process group (Ray heads),
``python -m airflow_curation.jobs`` processes with their output in a log, and the demo's corpus generator."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


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


def start_job(args: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """``python -P -m airflow_curation.jobs ARGS`` with stdout and stderr in ``log`` (a file: a pipe nobody reads
    would block a chatty job)."""
    return subprocess.Popen(
        [sys.executable, "-P", "-m", "airflow_curation.jobs", *args],
        env=env if env is not None else dict(os.environ),
        stdout=open(log, "wb"),
        stderr=subprocess.STDOUT,
    )


def wait_job(proc: subprocess.Popen, log: Path, timeout: float = 300) -> None:
    """Wait for a :func:`start_job` process and assert it succeeded, its log's tail in the message."""
    try:
        rc = proc.wait(timeout=timeout)  # a guard against hanging, not a timing assertion
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"no end after {timeout}s:\n{log.read_text()[-3000:]}") from None
    assert rc == 0, log.read_text()[-4000:]


def sample_corpus(out: Path, modules: int) -> Path:
    """The demo's corpus (``scripts/make_sample_corpus.py``) from ``modules`` stdlib modules into ``out``: real
    text with planted exact and near duplicates, junk, bad records and a WARC; returns ``out``."""
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "make_sample_corpus.py"), "--out", str(out), "--modules", str(modules)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return out


def create_new_race(uri: str, payloads: list[bytes]) -> list[int]:
    """Threads that all call ``storage.create_new(uri, payloads[k])`` at once: the indices of those told they
    created it."""
    import threading

    from airflow_curation.core import storage

    won: list[int] = []

    def write(k: int) -> None:
        if storage.create_new(uri, payloads[k]):
            won.append(k)

    threads = [threading.Thread(target=write, args=(k,)) for k in range(len(payloads))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return won
