"""core.allocator: Arrow's default pool becomes the C library's, unless the environment chose one."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa

CHECK = (
    "import pyarrow as pa; from airflow_curation.core.allocator import use_system_allocator; "
    "before = pa.default_memory_pool().backend_name; got = use_system_allocator(); again = use_system_allocator(); "
    "buf = pa.allocate_buffer(1 << 20); print(before, got, again, pa.default_memory_pool().backend_name)"
)


def _run(env_pool: str | None) -> list[str]:
    # a fresh process: the default pool is process-wide, and this one's tests share it
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if env_pool:
        env["ARROW_DEFAULT_MEMORY_POOL"] = env_pool
    out = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_default_pool_becomes_system():
    _, got, again, now = _run(None)
    assert got == again == now == "system"


def test_pool_named_by_environment_is_kept():
    # the wheels build mimalloc and jemalloc where they can; the one this pyarrow has stays the default
    name = next(b for b in ("mimalloc", "jemalloc") if _has_pool(b))
    assert _run(name) == [name] * 4


def _has_pool(name: str) -> bool:
    try:
        getattr(pa, f"{name}_memory_pool")()
    except (NotImplementedError, AttributeError, pa.ArrowNotImplementedError):
        return False
    return True
