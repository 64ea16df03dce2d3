"""How ``analyze`` starts its child processes (frames/parts.py, offload.py)."""

from __future__ import annotations

import multiprocessing
import threading
from multiprocessing.context import ForkContext, ForkServerContext, SpawnContext


def start_context() -> ForkContext | ForkServerContext | SpawnContext:
    """fork while this process runs no other thread, else forkserver (spawn where neither exists).

    A forked child starts at once with every module loaded; forkserver's children import peerwatch
    afresh, ~0.7 s of CPU each on the 63-node reference while both cores are busy reading
    (docs/benchmarks.md). But a fork taken while another thread holds a lock (the CLI's spinner on a
    terminal, writing to stderr) can hang the child on that lock, so then the forkserver starts it.
    """
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    if "forkserver" in methods:
        return multiprocessing.get_context("forkserver")
    return multiprocessing.get_context("spawn")
