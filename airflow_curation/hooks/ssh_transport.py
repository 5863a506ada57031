"""Slurm commands on a login node through Airflow's SSH provider (``SSHHook``, paramiko).

:class:`SSHTransport` is what :class:`~airflow_curation.backends.slurm.SlurmBackend` takes as
``transport``: it runs one argv there, bytes in and out. Host, user, key, port, host-key checking, proxy
command and timeouts all come from the ``ssh`` connection; no ``ssh`` binary, no key on a command line.
"""

from __future__ import annotations

import selectors
import shlex
import subprocess
import time
from collections.abc import Sequence
from typing import Any

CHUNK = 1 << 16


class SSHTransport:
    """Runs commands over one SSH connection (opened on first use, reopened when it drops).

    The remote command line is ``shlex.join(argv)``: the remote shell parses it back into exactly
    ``argv``, as with ``ssh HOST CMD``. Data for stdin goes over the channel, never into the command.

    :param hook: an ``airflow.providers.ssh.hooks.ssh.SSHHook`` (e.g. ``SSHHook(ssh_conn_id=...)``).
    """

    remote = True  # the commands (and, unless mounted here, the files they name) are on another host

    def __init__(self, hook: Any) -> None:
        self.hook = hook

    @property
    def host(self) -> str:
        return str(self.hook.remote_host)

    def run(
        self, argv: Sequence[str], data: bytes | None = None, timeout: float | None = None
    ) -> subprocess.CompletedProcess:
        """Run ``argv`` on the login node.

        :param argv: the command and its arguments (each one literal: quoted for the remote shell).
        :param data: bytes for the command's stdin (then end of file); ``None``: empty stdin.
        :param timeout: seconds the whole command may take.
        :returns: the exit status and the raw stdout/stderr bytes.
        :raises ConnectionError: the login node cannot be reached or refuses us.
        :raises subprocess.TimeoutExpired: the command took longer than ``timeout``.
        """
        import paramiko

        command = shlex.join(argv)
        try:
            channel = self.hook.get_conn().get_transport().open_session(timeout=timeout)
        except (paramiko.SSHException, OSError, EOFError) as e:
            self.hook.client = None  # a dead connection is opened afresh next time
            raise ConnectionError(f"ssh {self.host}: {e}") from e
        with channel:
            try:
                return self._exchange(channel, argv, command, data, timeout)
            except (paramiko.SSHException, EOFError) as e:
                raise ConnectionError(f"ssh {self.host}: {e}") from e

    @staticmethod
    def _exchange(
        channel: Any, argv: Sequence[str], command: str, data: bytes | None, timeout: float | None
    ) -> subprocess.CompletedProcess:
        deadline = None if timeout is None else time.monotonic() + timeout
        channel.exec_command(command)
        channel.settimeout(timeout)
        try:
            if data:
                channel.sendall(data)  # our remote commands read all of stdin before writing much
            channel.shutdown_write()
        except TimeoutError as e:
            raise subprocess.TimeoutExpired(list(argv), timeout or 0) from e
        out, err = bytearray(), bytearray()
        with selectors.DefaultSelector() as selector:
            selector.register(channel, selectors.EVENT_READ)
            while True:
                while channel.recv_ready():
                    out += channel.recv(CHUNK)
                while channel.recv_stderr_ready():
                    err += channel.recv_stderr(CHUNK)
                if channel.exit_status_ready() and not channel.recv_ready() and not channel.recv_stderr_ready():
                    # The exit status can come before the last bytes: read to end of stream.
                    while chunk := channel.recv(CHUNK):
                        out += chunk
                    while channel.recv_stderr_ready():
                        err += channel.recv_stderr(CHUNK)
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(list(argv), timeout or 0, bytes(out), bytes(err))
                selector.select(left)
        return subprocess.CompletedProcess(list(argv), channel.recv_exit_status(), bytes(out), bytes(err))
