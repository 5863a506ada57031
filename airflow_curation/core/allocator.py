"""Arrow's memory pool for stages that stream large batches through one process, and numpy's page size.

pyarrow's default pool (mimalloc in the wheels) hands the pages of freed buffers back to the OS and
faults fresh ones in for the next batch; with transparent huge pages each fault zeroes 2 MiB. A
preprocess process on 120 MB of text spent ~1 CPU s of its ~3.5-4.6 in ``clear_page_erms`` that way
(``perf``; benchmarks/RESULTS.md, "Speed goals"); the C library's allocator reuses the freed memory of
one batch for the next, and the same run took 0.3-0.5 s of system time.

numpy asks the kernel for transparent huge pages on every array of 4 MB or more (``madvise``), so each large array
a stage allocates (a batch's columns, a spill's sort order and gathered columns, a partition's rows) faults in
and zeroes 2 MiB at a time, and again after it is freed. On this project's machines that was most of a stage's
system time, and it varies with the machine's memory: on 371.6 MB of text in one file, preprocess 2.05 CPU s of
median system time with it and 0.62 without, dedup 2.80 and 0.56 (user time the same; 1.29x and 1.39x less CPU in
all), where small units (arrays under numpy's 4 MB threshold) and ingest show no difference (benchmarks/RESULTS.md,
*numpy's huge pages*). The mechanism is the VM's: its balloon reports free 2 MiB blocks to the host, which takes
them back, so a fresh huge page faults on the host too (RESULTS.md, *What the system CPU of reading a lake is*);
numpy's large arrays are freed and allocated whole, which makes such blocks all the time, while small pages are
mostly reused by the C library. On a machine without free page reporting the request costs little either way
(user time did not move here). :func:`use_small_pages` turns it off for the process and the processes it starts,
unless ``NUMPY_MADVISE_HUGEPAGE`` (numpy's own setting, read when numpy is imported) chose otherwise.
"""

from __future__ import annotations

import os

POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"  # Arrow's own override: a pool named there is left as it is
HUGEPAGE_ENV = "NUMPY_MADVISE_HUGEPAGE"  # numpy's own: "0" or "1", read at its import; a choice there is kept


def use_system_allocator() -> str:
    """Make the C library's allocator Arrow's default pool for this process, unless ``ARROW_DEFAULT_MEMORY_POOL``
    names one. Buffers allocated before keep their pool; safe to call again.

    :returns: the backend name of the default pool now (``"system"``, or the one the environment chose).
    """
    import pyarrow as pa

    if not os.environ.get(POOL_ENV) and pa.default_memory_pool().backend_name != "system":
        pa.set_memory_pool(pa.system_memory_pool())
    return pa.default_memory_pool().backend_name


def use_small_pages() -> bool:
    """numpy's arrays on the kernel's usual pages in this process, and in the processes it starts from now on (a
    LocalCluster's workers, a pool's), unless ``NUMPY_MADVISE_HUGEPAGE`` is set: then numpy followed it at import
    and it is left as it is. Safe to call again.

    :returns: whether numpy asks for huge pages now.
    """
    try:
        from numpy._core import multiarray
    except ImportError:  # numpy 1.x
        from numpy.core import multiarray

    if os.environ.get(HUGEPAGE_ENV) is None:
        os.environ[HUGEPAGE_ENV] = "0"
        multiarray._set_madvise_hugepage(False)
    enabled = multiarray._set_madvise_hugepage(False)  # returns the setting it replaces: read, then put back
    multiarray._set_madvise_hugepage(enabled)
    return bool(enabled)
