"""numba for the compiled kernels, loaded without the SciPy import its CPU target makes for nothing here.

numba's array-math registry (loaded on a process's first kernel call) probes for BLAS by importing
``scipy.linalg`` (0.3-0.6 CPU-seconds per worker process), for ``np.dot`` and ``np.linalg`` inside kernels,
which no kernel of this package uses. That registry is imported here with ``scipy.linalg`` hidden, so the
probe fails at once; ``scipy.linalg`` stays importable afterwards. Kernel modules import numba from here.
"""

from __future__ import annotations

import sys

import numba


def _load_without_blas_probe() -> None:
    if "numba.np.arraymath" in sys.modules or "scipy.linalg" in sys.modules:
        return  # loaded already, or SciPy's linear algebra is in the process anyway: nothing to save
    sys.modules["scipy.linalg"] = None  # type: ignore[assignment]  # makes "import scipy.linalg" fail fast
    try:
        import numba.np.arraymath  # noqa: F401
    finally:
        del sys.modules["scipy.linalg"]


_load_without_blas_probe()

__all__ = ["numba"]
