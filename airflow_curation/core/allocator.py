"""Arrow's memory pool for stages that stream large batches through one process.

pyarrow's default pool (mimalloc in the wheels) hands the pages of freed buffers back to the OS and
faults fresh ones in for the next batch; with transparent huge pages each fault zeroes 2 MiB. A
preprocess process on 120 MB of text spent ~1 CPU s of its ~3.5-4.6 in ``clear_page_erms`` that way
(``perf``; benchmarks/RESULTS.md, "Speed goals"); the C library's allocator reuses the freed memory of
one batch for the next, and the same run took 0.3-0.5 s of system time.
"""

from __future__ import annotations

import os

import pyarrow as pa

POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"  # Arrow's own override: a pool named there is left as it is


def use_system_allocator() -> str:
    """Make the C library's allocator Arrow's default pool for this process, unless ``ARROW_DEFAULT_MEMORY_POOL``
    names one. Buffers allocated before keep their pool; safe to call again.

    :returns: the backend name of the default pool now (``"system"``, or the one the environment chose).
    """
    if not os.environ.get(POOL_ENV) and pa.default_memory_pool().backend_name != "system":
        pa.set_memory_pool(pa.system_memory_pool())
    return pa.default_memory_pool().backend_name
