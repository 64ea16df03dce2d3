"""A detector judged partly in a child process, so that ``analyze`` judges on two cores.

The peer detector is about half of judging a recording. Its families are shared out once: most go to
a child, which scores them for chunk k while the engine frames chunk k+1 and runs the other
detectors and the rest of the families (so that both processes have about as much to do). The child
is started with the detector and keeps the state of its families, so only each chunk's context goes
out (for a ``FamilyDetector``, only the series it judges) and its findings come back: each family
sees the same calls in the same order as in one process, and the findings merged in the series'
order are those of one process.

A context is mostly numbers, but pickling its series keys, node names and families every chunk
cost as much as the peer detector saved (0.6 s out and 0.6 s in per 120-step chunk of the 63-node
reference): each of those immutable parts crosses once and is named by its id after that (a
``_Ref`` put in its place before pickling: pickle's ``persistent_id`` called Python for each of the
1.4 M objects of the first chunk, 0.67 s).
"""

from __future__ import annotations

import contextlib
import pickle
import queue
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from peerwatch.children import start_context
from peerwatch.detect.stream import FamilyDetector
from peerwatch.model import Finding

if TYPE_CHECKING:
    from peerwatch.detect.context import Context, Series
    from peerwatch.detect.stream import Detector

OFFLOADED = ("peer",)  # the detectors worth a core of their own, heaviest first (docs/benchmarks.md)
# Of an offloaded detector's cells, the share judged in the engine's own process, which also frames
# and runs every other detector. With none, the engine waited 1.5 s for the child on the 63-node
# reference (cProfile), with 0.10 half that; 0.2 and 0.3 judged it no faster (3 runs each).
LOCAL_SHARE = 0.10


def _every(s: Series) -> bool:
    return True


class DetectorFailed(RuntimeError):
    """The detector raised in its child process; the message carries the child's traceback."""


class RemoteDetector:
    """``submit(ctx)`` sends a chunk to the child, ``result()`` waits for its findings."""

    def __init__(self, detector: Detector) -> None:
        self.name = detector.name
        self.judges = detector.judges if isinstance(detector, FamilyDetector) else _every
        mp = start_context()
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
        # ~40 % of the 63-node reference's series are not the peer detector's
        ctx = replace(ctx, series=tuple(filter(self.judges, ctx.series)))
        new: dict[int, object] = {}

        def ref(o: object) -> _Ref:
            if id(o) not in self._sent:
                self._sent[id(o)] = new[id(o)] = o
            return _Ref(id(o))

        self._outbox.put(pickle.dumps((new, _swapped(ctx, ref)), protocol=pickle.HIGHEST_PROTOCOL))

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


@dataclass(frozen=True)
class _Ref:
    """A part of a context already sent, by its id in the sending process."""

    key: int


def _swapped(ctx: Context, swap: Callable[[Any], Any]) -> Context:
    """``ctx`` with ``swap`` applied to each part that stays the same object from chunk to chunk
    while the rows do: its nodes and roles, and each series' family, components, keys and nodes."""
    return replace(
        ctx,
        nodes=swap(ctx.nodes),
        roles=swap(ctx.roles),
        series=tuple(
            replace(
                s,
                family=swap(s.family),
                components=swap(s.components),
                frame=replace(s.frame, keys=swap(s.frame.keys), nodes=swap(s.frame.nodes)),
            )
            for s in ctx.series
        ),
    )


def _serve(detector: Detector, conn: Connection) -> None:
    state = None
    seen: dict[int, object] = {}
    while data := conn.recv_bytes():
        new, light = pickle.loads(data)
        seen.update(new)
        ctx = _swapped(light, lambda r: seen[r.key])
        try:
            found, state = detector.scan(ctx, state)
        except Exception:  # sent to the parent, which raises it there
            conn.send((False, traceback.format_exc()))
            return
        conn.send((True, found))


class SplitDetector:
    """A detector that judges each family apart and names it in its findings' ``signal`` (the peer
    detector), judged in two processes: at the first chunk this process keeps the smallest families
    up to ``local_share`` of the cells and the child takes the rest, for good (a family's state lives
    where it is judged; one first seen later goes to the child). ``begin`` sends the child its part
    and judges ours; ``finish`` merges the two in the series' order."""

    def __init__(self, detector: Detector, local_share: float = LOCAL_SHARE) -> None:
        self.name = detector.name
        self.local = detector
        self.remote = RemoteDetector(detector)
        self.local_share = local_share
        self.mine: frozenset[str] | None = None

    def begin(self, ctx: Context, state: Any) -> tuple[list[Finding], Any]:
        if self.mine is None:
            self.mine = _smallest(ctx, self.local_share, self.remote.judges)
        mine = self.mine
        self.remote.submit(replace(ctx, series=tuple(s for s in ctx.series if s.frame.name not in mine)))
        return self.local.scan(replace(ctx, series=tuple(s for s in ctx.series if s.frame.name in mine)), state)

    def finish(self, ctx: Context, ours: list[Finding]) -> list[Finding]:
        order = {s.frame.name: i for i, s in enumerate(ctx.series)}
        return sorted([*ours, *self.remote.result()], key=lambda f: order[f.signal])  # stable: rows stay in order

    def close(self) -> None:
        self.remote.close()


def _smallest(ctx: Context, share: float, judges: Callable[[Series], bool]) -> frozenset[str]:
    """The smallest families ``judges`` accepts whose cells add up to at most ``share`` of theirs."""
    sizes = sorted((s.values.size, s.frame.name) for s in ctx.series if judges(s))
    budget, total, out = share * sum(n for n, _ in sizes), 0, []
    for n, name in sizes:
        if total + n > budget:
            break
        total += n
        out.append(name)
    return frozenset(out)
