"""numba for the compiled kernels, loaded without the SciPy import its CPU target makes for nothing here.

numba's array-math registry (loaded on a process's first kernel call) probes for BLAS by importing
``scipy.linalg`` (0.3-0.6 CPU-seconds per worker process), for ``np.dot`` and ``np.linalg`` inside kernels,
which no kernel of this package uses. That registry is imported here with ``scipy.linalg`` hidden, so the
probe fails at once; ``scipy.linalg`` stays importable afterwards. Kernel modules import numba from here.

:func:`kernel_caches` says, for every kernel compiled with ``cache=True``, whether this process loaded it
from numba's on-disk cache or compiled it (``curation warm``: a task whose kernels are not cached compiles
them, 8.5-11 CPU-s a stage process: benchmarks/RESULTS.md, *Compiled kernels*).

numba reads and writes its cache only in a folder it can write to, so a cache built into an image is of no
use to a container whose root filesystem is read-only (this project's Kubernetes pods): it would compile in
every pod. ``CURATION_KERNEL_CACHE`` names such a prebuilt cache; on import, before numba, its files are
copied into ``NUMBA_CACHE_DIR`` (a writable folder: the pod's ``/tmp``) where that lacks them, ~4 MB
(docs/backends/kubernetes.md, *Compiled kernels*).
"""

from __future__ import annotations

import importlib
import logging
import os
import shutil
import sys
from typing import NamedTuple

SEED_ENV = "CURATION_KERNEL_CACHE"


def seed_cache(seed: str | None = None, target: str | None = None) -> int:
    """Copy the prebuilt kernel cache ``seed`` (default ``$CURATION_KERNEL_CACHE``) into ``target`` (default
    ``$NUMBA_CACHE_DIR``), file by file where the target lacks one, each written to a temporary name and
    renamed (worker processes of one pod may seed at once); returns the files copied."""
    seed = seed or os.environ.get(SEED_ENV)
    target = target or os.environ.get("NUMBA_CACHE_DIR")
    if not seed or not target or not os.path.isdir(seed) or os.path.realpath(seed) == os.path.realpath(target):
        return 0
    copied = 0
    for root, _, files in os.walk(seed):
        dest = os.path.join(target, os.path.relpath(root, seed))
        os.makedirs(dest, exist_ok=True)
        for name in files:
            out = os.path.join(dest, name)
            if os.path.exists(out):
                continue
            tmp = f"{out}.{os.getpid()}.tmp"
            shutil.copyfile(os.path.join(root, name), tmp)
            os.replace(tmp, out)
            copied += 1
    return copied


try:
    seed_cache()
except OSError as e:  # a cache that cannot be seeded costs a compile, never the task
    import warnings

    warnings.warn(f"kernel cache not seeded from ${SEED_ENV}: {e}; the kernels compile in this process", stacklevel=1)

import numba  # noqa: E402  (after the seed: nothing of numba's reads the cache folder before a kernel loads)
import numba.extending  # noqa: E402
from numba.cpython.unsafe.numbers import trailing_zeros  # noqa: E402, F401  (for the kernels: LLVM's cttz)


def _load_without_blas_probe() -> None:
    if "numba.np.arraymath" in sys.modules or "scipy.linalg" in sys.modules:
        return  # loaded already, or SciPy's linear algebra is in the process anyway: nothing to save
    sys.modules["scipy.linalg"] = None  # type: ignore[assignment]  # makes "import scipy.linalg" fail fast
    try:
        import numba.np.arraymath  # noqa: F401
    finally:
        del sys.modules["scipy.linalg"]


_load_without_blas_probe()


def _load_without_cffi() -> None:
    """numba's typing context (built on a process's first kernel call) imports its CFFI support, which imports
    ``cffi`` and builds an ``FFI()`` (its C parser: ~45 ms of every worker's start) for typing CFFI functions,
    which no kernel of this package calls. Imported here with ``cffi`` hidden, it records CFFI as unsupported;
    ``cffi`` stays importable afterwards."""
    if "numba.core.typing.cffi_utils" in sys.modules or "cffi" in sys.modules:
        return
    sys.modules["cffi"] = None  # type: ignore[assignment]
    try:
        import numba.core.typing.cffi_utils  # noqa: F401
    finally:
        del sys.modules["cffi"]


_load_without_cffi()


@numba.extending.intrinsic
def prefetch(typingctx, arr, idx):
    """``prefetch(arr, i)`` inside a kernel: the CPU starts loading ``arr[i]`` into its caches and goes on (LLVM's
    ``prefetch``: a read, kept close, data). A loop over a table larger than the cache that knows its slots some
    iterations ahead overlaps their misses this way instead of waiting on each in turn. ``i`` must be in range."""
    from llvmlite import ir
    from numba.core import cgutils

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]], wraparound=False)
        i32, i8p = ir.IntType(32), ir.IntType(8).as_pointer()
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), "llvm.prefetch.p0"
        )
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return numba.types.void(arr, idx), codegen


@numba.extending.intrinsic
def load_u64(typingctx, arr, idx):
    """``load_u64(data, i)`` inside a kernel: the 8 bytes ``data[i:i + 8]`` of a ``uint8`` array as one little-endian
    ``uint64`` (an unaligned load: one instruction where eight loads, shifts and ors would be many). The caller
    keeps ``i + 8 <= data.size``."""
    from llvmlite import ir
    from numba.core import cgutils

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]], wraparound=False)
        value = builder.load(builder.bitcast(ptr, ir.IntType(64).as_pointer()), align=1)
        return builder.bswap(value) if sys.byteorder == "big" else value  # data[i] the low byte either way

    return numba.types.uint64(arr, idx), codegen


# The core modules that define kernels with cache=True (a test checks the list against the sources).
KERNEL_MODULES = (
    "boilerplate",
    "compat_chars",
    "compat_kernel",
    "compat_split",
    "compat_vocab",
    "components",
    "lsh",
    "minhash",
    "ngram_match",
    "pairs",
    "signals",
    "xxh64",
)


class KernelCache(NamedTuple):
    """One cached kernel as this process found it: the signatures it loaded from the on-disk cache and
    those it compiled, where that cache is, and whether its index file is there (a compiled kernel whose
    index is missing could not be saved: the folder is not writable)."""

    name: str
    loaded: int
    compiled: int
    cache_path: str
    saved: bool


def kernel_caches(imported_only: bool = False) -> list[KernelCache]:
    """Every ``cache=True`` kernel of :data:`KERNEL_MODULES` but those always inlined (with ``imported_only``,
    of the modules this process has imported). A kernel this process did not call shows 0 loaded and 0
    compiled; so does one only called from a kernel loaded from the cache (its code is in the caller's)."""
    from numba.core.dispatcher import Dispatcher

    out = []
    for module_name in KERNEL_MODULES:
        if imported_only and f"airflow_curation.core.{module_name}" not in sys.modules:
            continue
        module = importlib.import_module(f"airflow_curation.core.{module_name}")
        for name, obj in sorted(vars(module).items()):
            cache = getattr(obj, "_cache", None)
            if not isinstance(obj, Dispatcher) or cache is None or not hasattr(cache, "_cache_file"):
                continue  # not a kernel, or one without cache=True (a NullCache)
            if obj.py_func.__module__ != module.__name__ or obj.targetoptions.get("inline") == "always":
                continue  # imported from another module; or always inlined into its callers, never cached alone
            stats = obj.stats
            out.append(
                KernelCache(
                    f"{module_name}.{name}",
                    sum(stats.cache_hits.values()),
                    sum(stats.cache_misses.values()),
                    stats.cache_path,
                    os.path.exists(cache._cache_file._index_path),
                )
            )
    return out


class CompileNotice(NamedTuple):
    compiled: int
    message: str | None
    warning: bool  # every process like this one will compile again


def compile_notice() -> CompileNotice:
    """The cached kernels this process compiled and what to tell a person about them: each compile is CPU
    time every task pays again unless the result is cached where the next process finds it. A stage process
    calls this as it ends (``curation``, the job entrypoint), where it has imported this module."""
    compiled = [k for k in kernel_caches(imported_only=True) if k.compiled]
    if not compiled:
        return CompileNotice(0, None, False)
    n, where = len(compiled), compiled[0].cache_path
    seed = os.environ.get(SEED_ENV)
    if seed:
        from llvmlite import binding

        cpu = numba.config.CPU_NAME or binding.get_host_cpu_name()
        return CompileNotice(
            n,
            (
                f"compiled {n} numba kernels that the prebuilt cache ${SEED_ENV}={seed} lacks for this CPU ({cpu}) "
                "or these argument types: "
                "every task on this node type pays that (8-11 CPU-s a stage process); warm the cache for it "
                "(`curation warm` on such a node, or with NUMBA_CPU_NAME/NUMBA_CPU_FEATURES: "
                "docs/backends/kubernetes.md, Compiled kernels)"
            ),
            True,
        )
    unsaved = [k.name for k in compiled if not k.saved]
    if unsaved:
        return CompileNotice(
            n,
            (
                f"compiled {n} numba kernels and could not cache {len(unsaved)} of them in {where} (not writable): "
                "every process pays that again (8-11 CPU-s a stage process); set NUMBA_CACHE_DIR to a writable "
                "folder, or CURATION_KERNEL_CACHE to a prebuilt cache (`curation warm`)"
            ),
            True,
        )
    return CompileNotice(
        n, f"compiled {n} numba kernels (cached in {where}: later processes on this CPU load them)", False
    )


def log_compiles(log: logging.Logger) -> int:
    """Log this process's :func:`compile_notice` (a warning where every such process compiles again);
    returns the kernels it compiled."""
    notice = compile_notice()
    if notice.message:
        log.log(logging.WARNING if notice.warning else logging.INFO, notice.message)
    return notice.compiled


__all__ = [
    "KERNEL_MODULES",
    "SEED_ENV",
    "CompileNotice",
    "KernelCache",
    "compile_notice",
    "kernel_caches",
    "log_compiles",
    "numba",
    "prefetch",
    "seed_cache",
]
