"""One run of a stage per dataset snapshot at a time: a lease file in the lake.

Two runs of one stage on one snapshot would write the same checkpoints, attrs and working folders
(dedup's components) under each other. The first run takes ``_locks/<stage>.lease``; a second one waits
up to ``wait_s`` for it and then refuses with a message naming the holder. A lease whose holder died is
taken over: on the same host when its pid is gone, anywhere when its heartbeat (the file's content,
rewritten every ``ttl_s / 4`` seconds) is older than ``ttl_s``.

On a local (or NFS) filesystem the lease is an ``flock`` on the file, which the kernel releases when
its holder dies, however it dies; the file's content only names the holder for messages. On object
stores it is created with a conditional write (``storage.create_new``: ``If-None-Match`` on S3), so of
two runs that start at once one takes it, then read back (a store that ignores the condition: the last
writer wins and the loser sees the other owner); a holder is presumed dead once its heartbeat is older
than ``ttl_s``, and of the runs that see it dead, the one that creates the claim file named after that
holder removes the file and creates it anew. Slurm array tasks and Kubernetes sweep pods of one run share
the run's lease: only whole runs and collect steps take it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import threading
import time
import uuid
from typing import Any

from airflow_curation.core import storage, storage_map

log = logging.getLogger(__name__)


class LeaseBusy(RuntimeError):
    """Another live run holds the lease."""


class Lease:
    """:param uri: the lease file. :param what: names the protected work in messages.
    :param wait_s: how long to wait for a live holder (``inf``: as long as it lives, for work that
        every waiter needs done once, such as dedup's global phase). :param ttl_s: a holder silent this
        long is dead."""

    def __init__(self, uri: str, what: str, wait_s: float = 0.0, ttl_s: float = 600.0) -> None:
        self.uri = uri
        self.what = what
        self.wait_s = wait_s
        self.ttl_s = ttl_s
        self.token = uuid.uuid4().hex
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self._fd: int | None = None  # local: the open, flocked lease file
        self._claims: list[str] = []  # object stores: the takeover claims this run created (removed on release)

    def _record(self) -> dict[str, Any]:
        return {
            "token": self.token,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "what": self.what,
            "heartbeat": time.time(),
        }

    def _holder(self) -> dict[str, Any] | None:
        return _record_at(self.uri)

    def _dead(self, holder: dict[str, Any]) -> bool:
        if (
            holder.get("host") == socket.gethostname()
            and isinstance(holder.get("pid"), int)
            and not storage.pid_alive(holder["pid"])
        ):
            return True
        beat = holder.get("heartbeat")
        return not isinstance(beat, (int, float)) or time.time() - beat > self.ttl_s

    def _try_lock(self) -> bool:
        path = storage.filesystem(self.uri)[1]
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(self._record()).encode(), 0)
        self._fd = fd
        return True

    def _try_create(self) -> bool:
        if storage.is_local(self.uri):
            return self._try_lock()
        if self._holder() is not None:
            return False
        # A conditional create: of two runs that both found no lease, one writes it, the other is refused
        # (they overwrote each other before, and both held it when the second wrote after the first's read-back).
        if not storage.create_new(self.uri, json.dumps(self._record()).encode()):
            return False
        time.sleep(0.5)  # a store without conditional writes: let a concurrent writer land, then see who won
        return (self._holder() or {}).get("token") == self.token

    def acquire(self) -> "Lease":
        deadline = time.monotonic() + self.wait_s
        waiting = False
        while not self._try_create():
            holder = self._holder()
            if not waiting and self.wait_s > 0:
                log.info(
                    "%s is held by host %s pid %s: waiting %s",
                    self.what,
                    (holder or {}).get("host"),
                    (holder or {}).get("pid"),
                    f"up to {self.wait_s:.0f} s" if self.wait_s < float("inf") else "while its holder lives",
                )
                waiting = True
            if holder is not None and not storage.is_local(self.uri) and self._dead(holder):
                if self._claim_takeover(holder):
                    storage.remove(self.uri)  # its holder died: this run takes over
                    continue
            if time.monotonic() >= deadline:
                who = (
                    (
                        f"host {holder.get('host')} pid {holder.get('pid')}, heartbeat "
                        f"{time.time() - holder.get('heartbeat', time.time()):.0f} s ago"
                    )
                    if holder
                    else "unknown"
                )
                raise LeaseBusy(
                    f"{self.what} is already running ({who}); wait for it to finish, or remove "
                    f"{self.uri} if that run is dead"
                )
            time.sleep(min(2.0, max(0.1, self.wait_s / 20)))
        if self._fd is None:  # object stores: the heartbeat keeps the lease alive
            self._remove_stale_claims()
            self._beat = threading.Thread(
                target=storage_map.carried(self._heartbeat), name="curation-lease", daemon=True
            )
            self._beat.start()
        return self

    def _claim_takeover(self, dead: dict[str, Any]) -> bool:
        """Whether this run is the one to replace ``dead``'s lease: the one that creates the claim file named
        after that holder. Two runs that both saw it dead both removed the lease before, and the second removal
        could remove the lease the first had just created: both ran. A claim whose own run died before it
        finished the takeover is stale after ``ttl_s`` and is removed, for the next look to claim again."""
        claim = f"{self.uri}.takeover-{dead.get('token') or 'unknown'}-{int(dead.get('heartbeat') or 0)}"
        if storage.create_new(claim, json.dumps(self._record()).encode()):
            self._claims.append(claim)
            return True
        other = _record_at(claim)
        if other and self._dead(other):
            storage.remove(claim)
        return False

    def _remove_stale_claims(self) -> None:
        """Remove the takeover claims this run did not make, once it holds the lease: a claim only orders the
        takeover of the lease file of the holder it names, and that file is gone now that this run's lease
        is the file. A run that took a lease over and crashed before its release left its claim for good (one
        file a crash, found by crashing one)."""
        for claim in storage.glob(f"{self.uri}.takeover-*"):
            if claim not in self._claims:
                storage.remove(claim)

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.ttl_s / 4):
            if (self._holder() or {}).get("token") != self.token:
                return  # taken over (we were presumed dead): never overwrite the new holder
            with contextlib.suppress(OSError):
                storage.write_bytes(self.uri, json.dumps(self._record()).encode())

    def release(self) -> None:
        if self._fd is not None:
            # The file stays (removing it would let a waiter lock an inode a newcomer no longer sees).
            os.ftruncate(self._fd, 0)
            os.close(self._fd)
            self._fd = None
            return
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=5)
        if (self._holder() or {}).get("token") == self.token:
            storage.remove(self.uri)
        for claim in self._claims:
            storage.remove(claim)
        self._claims = []

    def __enter__(self) -> "Lease":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _record_at(uri: str) -> dict[str, Any] | None:
    """The run record in a lease or takeover-claim file: None when there is none, ``{}`` when it cannot be read
    as one (being rewritten by its holder this very moment)."""
    try:
        return json.loads(storage.read_bytes(uri))
    except FileNotFoundError:
        return None
    except ValueError:
        return {}
