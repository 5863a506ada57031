"""How the Slurm backend reaches Slurm and the job folder: commands here or through the given transport
(the factory's SSH transport to a login node), and job files on a mounted filesystem or, with
``remote_work_dir``, over that same transport."""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import subprocess
import uuid
from collections.abc import Sequence
from typing import Any

from airflow_curation.backends.slurm.script import _check_arg
from airflow_curation.core import credentials

log = logging.getLogger(__name__)
_JOB_ID = re.compile(r"^\d+$")


class SlurmError(RuntimeError):
    """A Slurm command failed (submission refused, controller unreachable...)."""


class SlurmCommands:
    """Runs the Slurm commands: through ``transport`` (the factory's SSH transport), or here.

    :param transport: an object with ``run(argv, data, timeout) -> CompletedProcess`` (bytes out) that
        runs them instead of a local process.
    :param timeout: seconds a command may take.
    """

    def __init__(self, transport: Any = None, timeout: float = 60.0) -> None:
        self.transport = transport
        self.timeout = timeout
        self._max_array_size: int | None = None

    @property
    def here(self) -> bool:
        """sbatch is this process's child, with this process's environment."""
        return self.transport is None

    def exec(self, argv: Sequence[str], data: bytes | None = None) -> subprocess.CompletedProcess:
        """Run ``argv`` where the Slurm commands run (the given transport, or here), bytes in and out;
        raises ``OSError`` or ``subprocess.TimeoutExpired`` when it cannot."""
        argv = [_check_arg(a, "argument") for a in argv]
        if self.transport is not None:
            return self.transport.run(argv, data, self.timeout)
        stdin = {"input": data} if data is not None else {"stdin": subprocess.DEVNULL}
        # Without this process's credentials: sbatch would export them into the job, and Slurm records a
        # job's environment (the job gets them from its 0600 environment file instead: job_env).
        env = credentials.split(os.environ)[0]
        return subprocess.run(argv, capture_output=True, timeout=self.timeout, env=env, **stdin)

    def run(self, argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess:
        """Run ``argv`` as text; :class:`SlurmError` when it cannot run or (``check``) exits non-zero."""
        try:
            raw = self.exec(argv)
        except OSError as e:
            hint = (
                " (is Slurm installed here, or is slurm_conn_id missing?)" if isinstance(e, FileNotFoundError) else ""
            )
            raise SlurmError(f"cannot run {argv[0]!r}: {e}{hint}") from e
        except subprocess.TimeoutExpired as e:
            raise SlurmError(f"{shlex.join(argv)} took longer than {self.timeout}s") from e
        proc = subprocess.CompletedProcess(
            raw.args, raw.returncode, raw.stdout.decode("utf-8", "replace"), raw.stderr.decode("utf-8", "replace")
        )
        if check and proc.returncode != 0:
            raise SlurmError(f"{shlex.join(argv)} failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()}")
        return proc

    def run_raw(self, argv: Sequence[str], data: bytes | None = None) -> subprocess.CompletedProcess:
        """Run ``argv`` where the Slurm commands run, with bytes in and out (no check)."""
        try:
            return self.exec(argv, data if data is not None else b"")
        except (OSError, subprocess.TimeoutExpired) as e:
            raise SlurmError(f"{shlex.join(argv)}: {e}") from e

    def read(self, path: str, offset: int = 0) -> bytes:
        """Bytes of a file where the Slurm commands run, from ``offset`` (empty if it does not exist)."""
        proc = self.run_raw(["tail", "-c", f"+{int(offset) + 1}", "--", path])
        return proc.stdout if proc.returncode == 0 else b""

    def max_array_size(self) -> int:
        """The site's MaxArraySize (array indices go up to MaxArraySize - 1), asked once."""
        if self._max_array_size is None:
            text = self.run(["scontrol", "show", "config"]).stdout
            m = re.search(r"^\s*MaxArraySize\s*=\s*(\d+)", text, re.M)
            self._max_array_size = int(m.group(1)) if m else 1001  # Slurm's default
        return self._max_array_size

    def sbatch(self, argv: list[str]) -> str:
        """Submit (an ``sbatch --parsable`` argv): the job id."""
        out = self.run(argv).stdout.strip()
        job_id = out.split(";", 1)[0].strip()  # --parsable prints "id" or "id;cluster"
        if not _JOB_ID.match(job_id):
            raise SlurmError(f"sbatch printed {out!r}, not a job id")
        return job_id


def _write_local(path: str, data: bytes, mode: int = 0o640) -> None:
    """Write a job file atomically with plain file IO (job folders are local or shared POSIX paths)."""
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp-{uuid.uuid4().hex[:8]}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class _JobFiles:
    """The run's files as the jobs layer reads and writes them (:class:`~airflow_curation.jobs.run.RunFiles`)."""

    def write(self, path: str, data: bytes, mode: int = 0o640) -> None:
        raise NotImplementedError

    def write_json(self, path: str, obj: dict) -> None:
        self.write(path, json.dumps(obj, indent=1, sort_keys=True).encode())


class _LocalFiles(_JobFiles):
    """Job files on a filesystem mounted here (local, or shared with the cluster)."""

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def write(self, path: str, data: bytes, mode: int = 0o640) -> None:
        _write_local(path, data, mode)

    def read_json(self, path: str) -> dict | None:
        """A JSON file, or None while it does not exist (or is not whole yet)."""
        try:
            with open(path, "rb") as f:
                return json.loads(f.read())
        except (FileNotFoundError, ValueError):
            return None

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def create_exclusive(self, path: str) -> bool:
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True

    def append(self, path: str, text: str) -> None:
        try:
            with open(path, "a") as f:
                f.write(text)
        except OSError:
            log.info("%s", text.strip())

    def remove(self, path: str) -> None:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass


class _RemoteFiles(_JobFiles):
    """Job files where the Slurm commands run, reached through ``commands`` (its SSH transport).
    Paths are positional parameters of fixed ``sh -c`` scripts: never part of the script text."""

    def __init__(self, commands: SlurmCommands) -> None:
        self.commands = commands

    def _sh(self, script: str, *args: str, data: bytes | None = None) -> subprocess.CompletedProcess:
        return self.commands.run_raw(["sh", "-c", script, "sh", *args], data)

    def makedirs(self, path: str) -> None:
        proc = self._sh('mkdir -p -- "$1"', path)
        if proc.returncode != 0:
            raise SlurmError(f"cannot create {path}: {proc.stderr.decode(errors='replace').strip()}")

    def write(self, path: str, data: bytes, mode: int = 0o640) -> None:
        # umask 077: the file is never readable by others, not even before its chmod (secrets.env).
        proc = self._sh(
            'umask 077 && tmp="$1.tmp.$$" && cat > "$tmp" && chmod "$2" "$tmp" && mv -f -- "$tmp" "$1"',
            path,
            format(mode, "o"),
            data=data,
        )
        if proc.returncode != 0:
            raise SlurmError(f"cannot write {path}: {proc.stderr.decode(errors='replace').strip()}")

    def read_json(self, path: str) -> dict | None:
        proc = self._sh('cat -- "$1"', path)
        if proc.returncode != 0:
            return None
        try:
            return json.loads(proc.stdout)
        except ValueError:
            return None

    def exists(self, path: str) -> bool:
        return self._sh('test -e "$1"', path).returncode == 0

    def create_exclusive(self, path: str) -> bool:
        return self._sh('set -C; : > "$1"', path).returncode == 0  # noclobber: O_EXCL

    def append(self, path: str, text: str) -> None:
        self._sh('cat >> "$1"', path, data=text.encode())

    def remove(self, path: str) -> None:
        proc = self._sh('rm -f -- "$1"', path)
        if proc.returncode != 0:
            raise SlurmError(f"cannot remove {path}: {proc.stderr.decode(errors='replace').strip()}")
