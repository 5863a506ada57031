"""One storage layer for every stage: fsspec URLs (local folders, ``s3://``, ``gs://``...).

Writes are atomic from a reader's point of view: on a local filesystem we write a temporary file and
rename it; on object stores an object appears whole when its upload completes, so we write the final
key directly and let checkpoint records (written last) define "done".
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import functools
import io
import json
import os
import posixpath
import socket
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import IO, Any

import fsspec
import pyarrow as pa
from fsspec.core import url_to_fs

from airflow_curation.core import storage_map
from airflow_curation.core.credentials import STORAGE_OPTIONS_PREFIX
from airflow_curation.core.faults import fault_point

ENV_PREFIX = STORAGE_OPTIONS_PREFIX  # a credential: see core/credentials.py
# Which options a URL is opened with: the map in effect (storage_map.using), over the job's environment.
StorageMap = storage_map.StorageMap
using = storage_map.using
current_map = storage_map.current


def options_for(url: str) -> dict[str, Any]:
    """The fsspec options :func:`filesystem` uses for ``url``: those of the storage map in effect (every
    entry whose protocol or prefix covers ``url``, the longest winning)."""
    return storage_map.current().resolve(url)


class StorageCredentialsError(PermissionError):
    """An object store refused ``url`` for want of credentials; the message says which and where to put them."""

    def __init__(self, url: str, error: BaseException) -> None:
        self.url = url
        smap = storage_map.current()
        protocol = protocol_of(url)
        bucket = f"{protocol}://{url.split('://', 1)[1].split('/', 1)[0]}" if "://" in url else url
        keys = smap.keys_for(url)
        have = (
            f"options in effect from {', '.join(repr(k) for k in keys)} hold no key/secret"
            if keys
            else (f"no storage options cover it (configured: {', '.join(sorted(smap.entries)) or 'none'})")
        )
        where = smap.source or storage_map.ENV_SOURCE
        super().__init__(
            f"no credentials for {url} ({type(error).__name__}: {error}); {have}. Put `key` and `secret` "
            f"(and `endpoint_url` if not AWS) under {bucket!r}, or under {protocol!r} for every bucket, "
            f"in {where}"
        )


_CREDENTIAL_ERRORS = ("NoCredentialsError", "PartialCredentialsError", "NoAuthTokenError")


def _is_credentials_error(error: BaseException) -> bool:
    seen = 0
    e: BaseException | None = error
    while e is not None and seen < 8:
        if type(e).__name__ in _CREDENTIAL_ERRORS:
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


@contextlib.contextmanager
def explained(url: str) -> Iterator[None]:
    """Turn a store's "no credentials" inside the block into :class:`StorageCredentialsError` naming what is
    missing where (for code that uses a :func:`filesystem` directly)."""
    try:
        yield
    except StorageCredentialsError:
        raise
    except Exception as e:
        if _is_credentials_error(e):
            raise StorageCredentialsError(url, e) from e
        raise


def _explained(fn):
    """:func:`explained` around a function whose first argument is the URL."""

    @functools.wraps(fn)
    def wrapper(url: str, *args: Any, **kwargs: Any) -> Any:
        with explained(url):
            return fn(url, *args, **kwargs)

    return wrapper


protocol_of = storage_map.protocol_of


def filesystem(url: str, options: Mapping[str, Any] | None = None) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem for ``url`` and the path inside it.

    :param url: a local path or an fsspec URL.
    :param options: fsspec options for this call, used as given; ``None``: :func:`options_for` ``(url)``.
    """
    options = dict(options_for(url) if options is None else options)
    if not is_local(url):
        # Other processes (jobs, sensors) write the lake: a cached listing would hide their checkpoints.
        options.setdefault("use_listings_cache", False)
    fs, path = url_to_fs(url, **options)
    return fs, path


def is_local(url: str) -> bool:
    return protocol_of(url) in ("file", "local")


def join(base: str, *parts: str) -> str:
    if "://" in base:
        protocol, rest = base.split("://", 1)
        return f"{protocol}://{posixpath.join(rest, *parts)}"
    return os.path.join(base, *parts)


@_explained
def exists(url: str) -> bool:
    fs, path = filesystem(url)
    return fs.exists(path)


@_explained
def size(url: str) -> int:
    fs, path = filesystem(url)
    return int(fs.size(path))


# Fields of an object store's listing that change whenever the object is written again (S3 and its
# kin: ETag, VersionId; GCS: generation; Azure: etag): what identifies one version of an object.
_VERSION_KEYS = ("ETag", "etag", "VersionId", "version_id", "generation")


@_explained
def stat(url: str) -> tuple[int, str | None]:
    """``url``'s size and its *stamp*: a string that changes whenever the file is written again, or None
    where the filesystem gives none.

    Local files: inode, ctime and mtime in ns (a rename or any write changes ctime, which ``touch`` cannot
    set back); object stores: the ETag, version id or generation their listing returns. One stat or HEAD.
    A checkpoint records the stamp of each output at write time, so that a rerun whose outputs still carry
    theirs skips without re-hashing them (see :meth:`~airflow_curation.core.checkpoint.CheckpointRecord.files_intact`).
    """
    if is_local(url):
        st = os.stat(local_path(url))
        return st.st_size, f"ino={st.st_ino} ctime={st.st_ctime_ns} mtime={st.st_mtime_ns}"
    fs, path = filesystem(url)
    info = fs.info(path)
    found = [f"{k}={info[k]}" for k in _VERSION_KEYS if info.get(k) not in (None, "")]
    return int(info["size"]), (" ".join(found) or None)


def makedirs(url: str) -> None:
    if is_local(url):
        fs, path = filesystem(url)
        fs.makedirs(path, exist_ok=True)
    # Object stores have no directories.


@_explained
def listdir(url: str) -> list[str]:
    """Full URLs of the files directly under ``url`` (empty when it does not exist), sorted."""
    fs, path = filesystem(url)
    try:
        entries = fs.ls(path, detail=True)
    except FileNotFoundError:
        return []
    names = sorted(e["name"] for e in entries if e.get("type") == "file")
    return [_unstrip(url, path, n) for n in names]


def _unstrip(url: str, path: str, name: str) -> str:
    if "://" in url and not is_local(url):
        return f"{protocol_of(url)}://{name}"
    return name


# Files whose whole content a unit already fetched (and verified: core/integrity.py), URL -> buffer: opening
# one of them inside :func:`holding` reads that buffer, not the file again.
_HELD: contextvars.ContextVar[Mapping[str, pa.Buffer]] = contextvars.ContextVar("curation_held_files", default={})


@contextlib.contextmanager
def holding(buffers: Mapping[str, pa.Buffer]) -> Iterator[None]:
    """Within the block (this thread's context), :func:`open_read` and :func:`open_arrow` of a URL in
    ``buffers`` return a reader over its buffer: the bytes fetched once serve every later parse of the file.

    :param buffers: URL -> the file's whole content, as :func:`fetch` returns it.
    """
    token = _HELD.set({**_HELD.get(), **buffers})
    try:
        yield
    finally:
        _HELD.reset(token)


def held(url: str) -> pa.Buffer | None:
    """The buffer :func:`holding` holds for ``url`` here, or None."""
    return _HELD.get().get(url)


@_explained
def fetch(url: str) -> pa.Buffer:
    """The whole of ``url`` in one sequential read: on an object store one GET of the object (no HEAD, no
    footer then column-chunk ranged GETs); a local file memory-mapped (its pages are the page cache's, read
    from disk once however often they are parsed). The caller holds the whole file while it uses the buffer.

    :raises FileNotFoundError: ``url`` does not exist.
    """
    if is_local(url):
        with pa.memory_map(local_path(url), "r") as m:
            return m.read_buffer()  # the mapping outlives the file object while the buffer lives
    fs, path = filesystem(url)
    # s3fs would HEAD the object first and split one past its block size into concurrent ranged GETs: one
    # GET instead (a node runs several units side by side, which fill its bandwidth with one stream each).
    options = {"max_concurrency": 1} if protocol_of(url) in ("s3", "s3a") else {}
    return pa.py_buffer(fs.cat_file(path, **options))


@_explained
def open_read(url: str, mode: str = "rb") -> IO:
    buffer = held(url) if mode == "rb" else None
    if buffer is not None:
        return pa.BufferReader(buffer)
    fs, path = filesystem(url)
    return fs.open(path, mode)


def read_parquet(url: str, columns: list[str] | None = None) -> pa.Table:
    """The Parquet file ``url`` (or ``columns`` of it) as one table, through ``ParquetFile`` and without Arrow's
    reader threads. Not ``pq.read_table``: through a Python (fsspec) file its dataset reader made the process
    abort at exit for a file of many row groups, about one time in six to two ("terminate called without an
    active exception", pyarrow 25), which a Slurm task or a pod reports as failed after its work is done; and
    it imports ``pyarrow.dataset``, with it pandas, into the process. A stage's unit is one core's work: the
    threads only added CPU."""
    import pyarrow.parquet as pq

    with open_read(url) as f:
        return pq.ParquetFile(f).read(columns=columns, use_threads=False)


def open_arrow(url: str) -> Any:
    """``url`` opened for pyarrow's readers: a native file where it is local (pyarrow then reads the disk
    with no Python file object in between: a small Parquet row group costs ~40% less to read), else the
    fsspec file. A local path is taken from the URL as it is, without fsspec: resolving the filesystem costs
    more than reading a spill file's small batch (dedup opens one per (partition, shard) pair). A file
    :func:`holding` holds is read from its buffer."""
    buffer = held(url)
    if buffer is not None:
        return pa.BufferReader(buffer)
    if is_local(url):
        return pa.OSFile(local_path(url), "rb")
    return open_read(url)


def local_path(url: str) -> str:
    """The OS path of a local ``url`` (a path, or a ``file://`` or ``local://`` URL)."""
    for prefix in ("file://", "local://"):
        if url.startswith(prefix):
            return url[len(prefix) :]
    return url


@_explained
def read_bytes(url: str) -> bytes:
    """The whole object in one read. Manifests and checkpoints are replaced while triggers poll them; on an
    object store one GET returns one whole version, where a file handle (HEAD, then ranged GETs pinned to
    the first ETag) fails with ``FileExpired`` when the object is replaced between the two."""
    fs, path = filesystem(url)
    return fs.cat_file(path)


def read_json(url: str) -> Any:
    return json.loads(read_bytes(url))


_TMP_MARK = ".tmp-"


def _host() -> str:
    """This host as temp-file names carry it ("-" separates the name's fields)."""
    return socket.gethostname().replace("-", "_") or "host"


def _temp_name(path: str) -> str:
    # Host and pid name the writer, so that a later run can tell a dead writer's leftovers from a live one's.
    host = _host()
    return os.path.join(
        os.path.dirname(path), f".{os.path.basename(path)}{_TMP_MARK}{host}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    )


def _writer_of(name: str) -> tuple[str, int] | None:
    """(host, pid) of a temp file written by :func:`atomic_open`, or None for any other name."""
    if not name.startswith(".") or _TMP_MARK not in name:
        return None
    parts = name.rsplit(_TMP_MARK, 1)[1].split("-")
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    return parts[0], int(parts[1])


def pid_alive(pid: int) -> bool:
    """Whether a process of this host has ``pid`` (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temps(url: str, max_age_s: float = 24 * 3600.0) -> list[str]:
    """Remove the temp files that :func:`atomic_open` left under the local folder ``url`` (recursively)
    when their writer died: written on this host by a pid that is gone, or older than ``max_age_s``
    (a writer on another host). A live writer's temp file is never touched. Returns what was removed.
    Object stores have no temp files (an aborted upload publishes nothing)."""
    if not is_local(url):
        return []
    _, root = filesystem(url)
    host = _host()
    removed = []
    now = time.time()
    for folder, _dirs, files in os.walk(root):
        for name in files:
            writer = _writer_of(name)
            if writer is None:
                continue
            path = os.path.join(folder, name)
            try:
                age = now - os.stat(path).st_mtime
            except FileNotFoundError:
                continue  # its writer renamed it meanwhile
            dead = writer[0] == host and not pid_alive(writer[1])
            if dead or age > max_age_s:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                    removed.append(path)
    return removed


_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)  # a write refused by the disk, not the data


@contextlib.contextmanager
def atomic_open(url: str, mode: str = "wb") -> Iterator[IO]:
    """Open ``url`` for writing so that readers see either nothing or the whole file."""
    fs, path = filesystem(url)
    if is_local(url):
        parent = os.path.dirname(path)
        os.makedirs(parent, exist_ok=True)
        tmp = _temp_name(path)
        try:
            with open(tmp, mode) as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            fault_point("storage.before_rename")
            os.replace(tmp, path)
        except BaseException as e:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            if isinstance(e, OSError) and e.errno in _FULL and e.filename is None:
                # a write's ENOSPC names no file: say which one (and so which disk) could not be written
                raise OSError(e.errno, e.strerror, url) from e
            raise
    else:
        # The object is published when the upload completes on close. Closing is what an fsspec file's
        # own context manager does even on error, which would publish a partial object: on error we
        # discard the upload (aborting a multipart one) and mark the file closed instead.
        raw = fs.open(path, "wb")
        f = raw if "b" in mode else io.TextIOWrapper(raw, encoding="utf-8")
        try:
            yield f
        except BaseException:
            discard = getattr(raw, "discard", None)
            if callable(discard):
                discard()
            with contextlib.suppress(AttributeError):  # fsspec buffered files: no upload on close/del
                raw.closed = True
            raise
        f.close()


def write_bytes(url: str, data: bytes) -> None:
    with atomic_open(url, "wb") as f:
        f.write(data)


def write_json(url: str, obj: Any) -> None:
    write_bytes(url, (json.dumps(obj, indent=1, sort_keys=True, default=str) + "\n").encode())


@_explained
def create_new(url: str, data: bytes) -> bool:
    """Write ``url`` only where nothing is: True when this call created it, False when a file was there.

    One step no other writer interleaves with, where the storage has one: locally the whole file is written
    under a temp name and linked into place (``link`` refuses an existing name, and a reader never sees a
    part); on S3 a conditional PUT (``If-None-Match: *``: AWS S3, MinIO and moto honour it). A store without
    conditional writes (one that ignores the header, one that answers 501, fsspec's generic filesystems)
    gets a look-then-write, which two writers can both pass: callers that must know read the file back."""
    fs, path = filesystem(url)
    if not is_local(url):
        try:
            fs.pipe_file(path, data, mode="create")
        except FileExistsError:
            return False
        except OSError as e:
            if e.errno != errno.ENOSYS:
                raise
            # A store that answers a conditional PUT with 501 NotImplemented: look, then write.
            if fs.exists(path):
                return False
            write_bytes(url, data)
        return True
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = _temp_name(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return True


def version(url: str) -> tuple | None:
    """What changes when a file is rewritten (size, time, ETag, inode), or None when it cannot be told (or the
    file is missing): what a reader keys a cache of the file's parsed content by."""
    try:
        fs, path = filesystem(url)
        info = fs.info(path)
    except (FileNotFoundError, OSError):
        return None
    stamp = (
        info.get("size"),
        info.get("mtime") or info.get("LastModified") or info.get("updated"),
        info.get("ETag") or info.get("etag"),
        info.get("ino"),
    )
    return stamp if any(v is not None for v in stamp[1:]) else None


@_explained
def remove(url: str) -> None:
    fs, path = filesystem(url)
    with contextlib.suppress(FileNotFoundError):
        fs.rm(path)


def list_files(spec: str, folder_suffix: str = "") -> dict[str, dict[str, Any]] | None:
    """The files a glob or a folder ``spec`` names (a folder's recursively, those whose name ends with
    ``folder_suffix``), as URLs of ``spec``'s kind with their fsspec info, sorted; hidden names and what is not
    a file left out. None when ``spec`` is neither a glob nor a folder (a file, or nothing there)."""
    fs, path = filesystem(spec)
    with explained(spec):
        if any(ch in path for ch in "*?["):
            found = fs.glob(path, detail=True)
        elif fs.isdir(path):
            found = {p: i for p, i in fs.find(path, detail=True).items() if p.endswith(folder_suffix)}
        else:
            return None
    prefix = "" if is_local(spec) else f"{protocol_of(spec)}://"
    return {
        prefix + p: info
        for p, info in sorted(found.items())
        if info.get("type") == "file" and not os.path.basename(p).startswith(".")
    }


@_explained
def glob(pattern: str) -> list[str]:
    fs, path = filesystem(pattern)
    return sorted(_unstrip(pattern, path, p) for p in fs.glob(path))
