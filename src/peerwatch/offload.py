"""A detector run in a child process, so that ``analyze`` judges on two cores.

The peer detector is over half of judging a recording; in a child it scores chunk k while the
engine frames chunk k+1 and runs the other detectors. The child is started with the detector and
keeps the detector's state, so only each chunk's context goes out and its findings come back:
the same calls in the same order as in one process, hence the same findings.

A context is mostly numbers, but pickling its series keys, node names and families every chunk
cost as much as the peer detector saved (0.6 s out and 0.6 s in per 120-step chunk of the 63-node
reference): each of those immutable parts crosses once and is named by its id after that.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import pickle
import queue
import threading
import traceback
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

from peerwatch.model import Finding

if TYPE_CHECKING:
    from peerwatch.detect.context import Context
    from peerwatch.engine import Detector

OFFLOADED = ("peer",)  # the detectors worth a core of their own, heaviest first (docs/benchmarks.md)


class DetectorFailed(RuntimeError):
    """The detector raised in its child process; the message carries the child's traceback."""


class RemoteDetector:
    """``submit(ctx)`` sends a chunk to the child, ``result()`` waits for its findings."""

    def __init__(self, detector: Detector) -> None:
        self.name = detector.name
        # Not fork: the CLI's spinner is a thread, and a fork taken while it holds a lock can hang.
        methods = multiprocessing.get_all_start_methods()
        mp = (
            multiprocessing.get_context("forkserver")
            if "forkserver" in methods
            else multiprocessing.get_context("spawn")
        )
        self._conn, child = mp.Pipe()
        self._proc = mp.Process(target=_serve, args=(detector, child), name=f"peerwatch-{self.name}", daemon=True)
        self._proc.start()
        child.close()
        self._sent: dict[int, object] = {}  # id -> the object, kept alive so that its id stays its own
        # A chunk is ~60 MB: a thread writes it to the pipe while the child still judges the last one,
        # so the engine goes on with the next chunk instead of waiting for the child to read.
        self._outbox: queue.Queue[bytes] = queue.Queue()
        self._writer = threading.Thread(target=self._write, name=f"peerwatch-{self.name}-writer", daemon=True)
        self._writer.start()

    def _write(self) -> None:
        while data := self._outbox.get():
            try:
                self._conn.send_bytes(data)
            except OSError:  # the child is gone: result() says so
                return

    def submit(self, ctx: Context) -> None:
        new = {id(o): o for o in _lasting(ctx) if id(o) not in self._sent}
        self._sent.update(new)
        buf = io.BytesIO()
        pickler = pickle.Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL)
        sent = self._sent
        pickler.persistent_id = lambda o: id(o) if id(o) in sent and id(o) not in new else None  # type: ignore[method-assign]
        pickler.dump((new, ctx))
        self._outbox.put(buf.getvalue())

    def result(self) -> list[Finding]:
        try:
            ok, payload = self._conn.recv()
        except (EOFError, OSError):
            raise DetectorFailed(
                f"the {self.name} detector's process ended (exit code {self._proc.exitcode})"
            ) from None
        if not ok:
            raise DetectorFailed(f"the {self.name} detector failed in its process:\n{payload}")
        return list(payload)

    def close(self) -> None:
        self._outbox.put(b"")
        self._writer.join(timeout=5)
        with contextlib.suppress(OSError):
            self._conn.send_bytes(b"")
        self._proc.join(timeout=5)
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join()
        self._conn.close()


def _lasting(ctx: Context) -> Iterator[object]:
    """The parts of a context that stay the same object from chunk to chunk while the rows do."""
    yield ctx.nodes
    yield ctx.roles
    for s in ctx.series:
        yield from (s.family, s.components, s.frame.keys, s.frame.nodes)


def _serve(detector: Detector, conn: Connection) -> None:
    state = None
    seen: dict[int, object] = {}
    while data := conn.recv_bytes():
        unpickler = pickle.Unpickler(io.BytesIO(data))
        unpickler.persistent_load = seen.__getitem__  # type: ignore[method-assign]
        new, ctx = unpickler.load()
        seen.update(new)
        try:
            found, state = detector.scan(ctx, state)
        except Exception:  # sent to the parent, which raises it there
            conn.send((False, traceback.format_exc()))
            return
        conn.send((True, found))
