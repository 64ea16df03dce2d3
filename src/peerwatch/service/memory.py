"""Keeping a long-running service's memory to what it holds.

Each step allocates and frees arrays of a few hundred kilobytes to a few megabytes. glibc's malloc
raises its mmap threshold as such blocks are freed, after which they come from the heap, which
fragments and is not given back: at 250 simulated nodes the service held 0.57 GB more than its
state after 45 steps with the default, 0.40 GB with a fixed threshold (benchmarks/bench_serve.py).
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_MMAP_THRESHOLD = -3  # mallopt parameter (malloc.h)
THRESHOLD = 64 * 1024


def return_freed_memory() -> bool:
    """Fix glibc's mmap threshold so that large blocks always go back to the system when freed.
    False where the C library is not glibc (nothing changes)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, THRESHOLD))
