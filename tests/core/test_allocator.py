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


PAGES = (
    "import os, numpy; from numpy._core import multiarray; from airflow_curation.core.allocator import use_small_pages; "
    "before = multiarray._set_madvise_hugepage(True); multiarray._set_madvise_hugepage(before); "
    "got = use_small_pages(); again = use_small_pages(); print(int(before), int(got), int(again), "
    "os.environ.get('NUMPY_MADVISE_HUGEPAGE'))"
)


def _pages(env_value: str | None) -> list[str]:
    # a fresh process: numpy reads NUMPY_MADVISE_HUGEPAGE when it is imported, and the setting is process-wide
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    if env_value is not None:
        env["NUMPY_MADVISE_HUGEPAGE"] = env_value
    out = subprocess.run([sys.executable, "-c", PAGES], env=env, capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_numpy_huge_pages_are_turned_off_for_the_process_and_its_children():
    # numpy asks for them by default on a Linux kernel >= 4.6; after the call it does not, and processes started
    # later inherit that
    assert _pages(None)[1:] == ["0", "0", "0"]


def test_a_huge_page_choice_in_the_environment_is_kept():
    assert _pages("1") == ["1", "1", "1", "1"]
    assert _pages("0") == ["0", "0", "0", "0"]
