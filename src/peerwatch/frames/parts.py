"""One large recording read on several cores.

A plain VictoriaMetrics export is cut at line starts into one part per process
(``sources/replay.line_cuts``). This process reads the first part onto its grid while child processes
read the others onto grids of their own; each child's grid is then taken in, in file order
(``FrameBuilder.absorb``), as if this process had read it: the same series in the same order, the
same samples, conflicts and problems (line numbers are the file's). Where a series budget would have
left some of a part's series out, that part is read here instead, so that the budget keeps the
first series read, as in one process.

Reading is about a third of ``analyze``'s time on the 63-node reference recording, and an export
cannot be judged while it is read: series come one after another, so the first chunk of steps is
complete only at the end of the file.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, replace
from multiprocessing import resource_tracker
from multiprocessing.shared_memory import SharedMemory
from pathlib import Path

import numpy as np

from peerwatch.children import start_context
from peerwatch.frames import FrameBuilder, Part
from peerwatch.model import ProblemLog, SeriesBlock
from peerwatch.series_budget import SeriesBudget
from peerwatch.sources.inputs import InputBudget, input_kind
from peerwatch.sources.replay import GZIP_MAGIC, detect_format, line_cuts, read_recording

log = logging.getLogger(__name__)
MIN_BYTES = 64 << 20  # a smaller file: a child's start (~0.5 s by forkserver) costs about what it saves
# A child's part, to this process's: this process reads the file's head first and takes the child's
# grid in after. Equal parts kept it waiting ~3 s of a 7-s read of the 63-node reference (forkserver,
# grids then pickled); with 0.67 the two end within ~0.5 s of each other. Forked children (which start
# at once) read it as fast with 0.67, 0.8 or 0.9 (3 runs each).
CHILD_SHARE = 0.67
HEAD_BYTES = 1 << 20
SHM = "/dev/shm"  # where Linux keeps shared memory; containers often give it 64 MB


def file_parts(inputs: Sequence[str], jobs: int) -> tuple[Path, list[int]] | None:
    """The file and its cuts when ``inputs`` is one plain JSON-lines export worth reading in ``jobs``
    processes; None otherwise (several inputs, text, gzip, a URL, a small file)."""
    if jobs < 2 or len(inputs) != 1 or input_kind(inputs[0]) != "file":
        return None
    path = Path(inputs[0])
    try:
        if not path.is_file() or path.stat().st_size < MIN_BYTES:
            return None
        with path.open("rb") as f:
            head = f.read(HEAD_BYTES)
        if head.startswith(GZIP_MAGIC) or detect_format(head) != "vm-jsonl":
            return None
        cuts = line_cuts(path, [1.0] + [CHILD_SHARE] * (jobs - 1))
    except OSError:
        return None  # the one-process reader says what is wrong with the file
    return (path, cuts) if len(cuts) > 2 else None


def read_parts(
    path: Path,
    cuts: list[int],
    problems: ProblemLog,
    budget: SeriesBudget,
    builder_for: Callable[[list[SeriesBlock]], FrameBuilder],
    node: str | None = None,
    head: int = 1,
) -> FrameBuilder:
    """The file read part by part onto one builder, parts after the one being read when the builder
    is made (from the first ``head`` blocks, by ``builder_for``) read by child processes."""
    gate = InputBudget(str(path), budget, problems)
    spans = list(itertools.pairwise(cuts))
    futures: dict[int, Future[Shared]] = {}
    reading = 0
    builder: FrameBuilder | None = None

    def parts() -> Iterator[SeriesBlock]:
        nonlocal reading
        for i, span in enumerate(spans):
            reading = i
            with _result(futures.pop(i, None), path) as got:
                taken = got is not None and builder is not None and builder.absorb(got, gate.kept)
            if not taken:
                yield from read_recording(path, problems, node, part=span)

    blocks = gate.within(parts())
    first = list(itertools.islice(blocks, head))
    builder = builder_for(first)
    later = range(reading + 1, len(spans))
    if not later:
        return builder.add_all(itertools.chain(first, blocks))
    # Started first, so that forked children share it: a tracker of a child's own would find the
    # part's shared memory never unlinked by that child, try to, and warn of a leak at its end.
    resource_tracker.ensure_running()
    with ProcessPoolExecutor(len(later), mp_context=start_context()) as pool:
        for i in later:
            futures[i] = pool.submit(read_part, path, spans[i], builder.step, builder.latest, budget, node)
        try:
            return builder.add_all(itertools.chain(first, blocks))
        finally:
            for f in futures.values():
                f.cancel()


@contextlib.contextmanager
def _result(future: Future[Shared] | None, path: Path) -> Iterator[Part | None]:
    """A child's part, its grids read in place from shared memory, which is freed on leaving."""
    if future is None:
        yield None
        return
    try:
        shared = future.result()
        memory = SharedMemory(shared.name)
    except Exception as exc:  # a child that failed or died: its part is read here, as in one process
        log.warning("%s: a part read in a child process failed (%s); reading it here", path, exc)
        yield None
        return
    try:
        yield shared.attached(memory)
    finally:
        shared.detach()
        memory.close()
        memory.unlink()


@dataclass(frozen=True)
class Shared:
    """A child's part with its grids in shared memory: pickled, the 270 MB of a half of the
    reference recording took ~1.5 s to cross and held this process's GIL while it read."""

    part: Part  # the rows' grids left empty
    name: str  # of the shared memory
    layout: list[tuple[int, tuple[int, ...], str]]  # offset, shape and type of each family's vals, offs

    @staticmethod
    def share(part: Part) -> Shared:
        grids = [a for rows in part.rows.values() for a in (rows.vals, rows.offs)]
        size = max(1, sum(a.nbytes for a in grids))
        free = _shm_free()
        if free is not None and free < size:  # writing past a full /dev/shm kills the process (SIGBUS)
            raise MemoryError(f"{SHM} has {free >> 20} MB free, a part's grid needs {size >> 20} MB")
        memory = SharedMemory(create=True, size=size)
        layout, at = [], 0
        for a in grids:
            np.ndarray(a.shape, a.dtype, buffer=memory.buf, offset=at)[...] = a
            layout.append((at, a.shape, a.dtype.str))
            at += a.nbytes
        for rows in part.rows.values():
            rows.vals, rows.offs = rows.vals[:0, :0], rows.offs[:0, :0]
        memory.close()  # the parent frees it
        return Shared(part, memory.name, layout)

    def attached(self, memory: SharedMemory) -> Part:
        grids = iter(self.layout)
        for rows in self.part.rows.values():
            rows.vals, rows.offs = (
                np.ndarray(shape, dtype, buffer=memory.buf, offset=at)
                for at, shape, dtype in itertools.islice(grids, 2)
            )
        return self.part

    def detach(self) -> None:
        """Drop the views into the memory, so that it can be closed."""
        for rows in self.part.rows.values():
            rows.vals, rows.offs = rows.vals[:0, :0].copy(), rows.offs[:0, :0].copy()


def read_part(
    path: Path, span: tuple[int, int], step: float, latest: float, budget: SeriesBudget, node: str | None
) -> Shared:
    """In a child process: one part of the file on a grid of its own, with its problems (kept for
    the parent to report, not logged here) and whether a budget left any series out."""
    logging.disable(logging.CRITICAL)
    problems = ProblemLog()
    builder = FrameBuilder(step, problems=problems, budget=budget)
    builder.latest = latest
    gate = InputBudget(str(path), budget, problems)
    builder.add_all(gate.within(read_recording(path, problems, node, part=span)))
    part = builder.part()
    return Shared.share(replace(part, dropped=part.dropped or bool(gate.over)))


def _shm_free() -> int | None:
    try:
        st = os.statvfs(SHM)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize
