"""Keep a long-running server's memory near its working size (glibc's allocator).

glibc gives threads that allocate their own malloc arenas (up to eight per core) and seldom hands
their free memory back: with turns run by Gradio's worker threads one after another, a server grew
by ~500 MiB over 40 preview turns and kept it after every game had ended
(`benchmarks/load_test.py`). Capping the arenas at start-up and trimming after each turn keeps it
within a few percent of its warmed-up size. Both are no-ops where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

M_ARENA_MAX = -8
"""glibc's `mallopt` parameter for the number of malloc arenas."""
MALLOC_ARENAS = 2


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def limit_malloc_arenas(count: int = MALLOC_ARENAS) -> bool:
    """Cap glibc's malloc arenas for threads started from now on; whether it could."""
    libc = _glibc()
    return bool(libc and libc.mallopt(M_ARENA_MAX, count))


def release_free_memory() -> bool:
    """Hand the allocator's free pages back to the system; whether any were released."""
    libc = _glibc()
    return bool(libc and libc.malloc_trim(0))
