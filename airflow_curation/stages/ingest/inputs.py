"""Local input files for ingest: every entry under an input folder is either read or reported, never dropped.

fsspec lists links, FIFOs and sockets as "other", so they used to vanish from a run without a word, and
opening a FIFO blocks forever. Here the folder walk keeps every entry, and :func:`open_local` says why an
entry cannot be read (a quarantine note) or opens it without ever waiting on a FIFO. Object stores hold
only objects and keep fsspec's listing.
"""

from __future__ import annotations

import errno
import glob
import os
import stat
from typing import IO

from airflow_curation.stages.ingest.readers import Bad


def list_local(spec: str) -> dict[str, dict]:
    """Every non-hidden entry a local input names (a file, a folder walked recursively, or a glob), with
    the size and mtime that tell a changed file apart. Links to folders inside a folder are not followed
    (no loops, no file read twice); an input that names a link to a folder is."""
    if any(ch in spec for ch in "*?["):
        found: dict[str, dict] = {}
        for match in sorted(glob.glob(spec, recursive=True)):
            found.update(_entries(match))
        return found
    if not os.path.lexists(spec):
        raise FileNotFoundError(f"ingest: input {spec!r} does not exist")
    return _entries(spec)


def _entries(path: str) -> dict[str, dict]:
    if not os.path.isdir(path):
        return {path: _info(path)}
    found: dict[str, dict] = {}
    folders = [path]
    while folders:
        folder = folders.pop()
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except OSError:
            found[folder] = _info(folder)  # open_local says why it cannot be listed
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_dir(follow_symlinks=False):
                folders.append(entry.path)
            else:
                found[entry.path] = _info(entry.path)
    return found


def link_outside(path: str, inputs: list[str]) -> Bad | None:
    """A note for an entry found in an input folder (or by a glob) that a link takes outside that folder:
    such a link is not followed, since whoever can drop a link into a shared input folder could otherwise
    make the job copy any file it can read (its credentials, ``/proc/self/environ``) into the lake. An
    input that names the path itself is read, links and all; a link that stays inside is read."""
    here = os.path.abspath(path)
    if not os.path.isfile(here):
        return None  # not a regular file (a folder, a dangling link...): open_local says what it is
    folders = []
    for spec in inputs:
        if "://" in spec and not spec.startswith("file://"):
            continue
        given = os.path.abspath(spec.removeprefix("file://"))
        if here == given:
            return None  # named: the caller chose it
        folder = _walked_folder(given)
        if folder and _within(here, folder):
            folders.append(folder)
    if not folders:
        return None
    target = os.path.realpath(here)
    if any(_within(target, os.path.realpath(f)) for f in folders):
        return None
    return Bad(
        0,
        "file",
        "link_outside_input",
        f"a link to {target!r}, outside the input folder {folders[0]!r}: not followed (name it as an input to read it)",
        rows=0,
    )


def _within(path: str, folder: str) -> bool:
    return path.startswith(folder.rstrip("/") + "/")


def _walked_folder(spec: str) -> str | None:
    """The folder whose entries ``spec`` lists: the folder itself, or a glob's fixed leading folders."""
    if any(ch in spec for ch in "*?["):
        fixed = spec[: min(spec.index(ch) for ch in "*?[" if ch in spec)]
        return fixed.rsplit("/", 1)[0] or "/"
    return spec if os.path.isdir(spec) else None


def _info(path: str) -> dict:
    try:
        st = os.stat(path)
    except OSError:  # a dangling link or a loop: its own mtime still tells a change apart
        st = os.lstat(path)
    return {"size": st.st_size, "mtime": st.st_mtime}


def open_local(path: str) -> tuple[IO[bytes], int] | Bad:
    """(binary file, size) for a regular file, or a file-level :class:`Bad` (no rows) saying why not."""
    problem = _classify(path)
    if problem is None:
        try:
            # Non-blocking: should a FIFO have taken the file's place since it was classified, opening it
            # must not wait for a writer.
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as e:
            problem = _os_error(path, e)
        else:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode):
                os.set_blocking(fd, True)
                return os.fdopen(fd, "rb"), st.st_size
            os.close(fd)
            problem = ("not_a_regular_file", f"a {_kind(st.st_mode)}, not a regular file")
    return Bad(0, "file", *problem, rows=0)


def _classify(path: str) -> tuple[str, str] | None:
    try:
        st = os.stat(path)
    except OSError as e:
        return _os_error(path, e)
    if stat.S_ISREG(st.st_mode):
        return None
    if stat.S_ISDIR(st.st_mode):
        if os.path.islink(path):
            return "not_a_regular_file", "a link to a folder: not followed (name the folder as an input to read it)"
        try:
            os.listdir(path)
        except OSError as e:
            return "unreadable_input", f"cannot list the folder: {e}"
        return "not_a_regular_file", "a folder"
    return "not_a_regular_file", f"a {_kind(st.st_mode)}, not a regular file"


def _os_error(path: str, e: OSError) -> tuple[str, str]:
    if e.errno == errno.ELOOP:
        return "symlink_loop", f"too many levels of symbolic links: {e}"
    if e.errno in (errno.ENOENT, errno.ENOTDIR) and os.path.islink(path):
        return "dangling_link", f"the link points to {os.readlink(path)!r}, which does not exist"
    if e.errno == errno.ENXIO:  # a socket
        return "not_a_regular_file", f"cannot be opened as a file: {e}"
    return "unreadable_input", f"cannot open: {e}"


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISDIR, "folder"),
    ):
        if test(mode):
            return name
    return "special file"
