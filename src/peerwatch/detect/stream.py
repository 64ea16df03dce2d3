"""Scanning a run in chunks: each detector carries its own state from one chunk of steps to the next.

The engine is causal, so a run can be judged step by step (the live service) or in longer chunks
(``peerwatch analyze``, 120 steps at a time). Both call ``scan(ctx, state)`` on the steps they
have, with the state the last call returned (none for the first).
The contract that makes the two agree:

- consecutive chunks are contiguous steps of one grid (same step);
- a frame's rows (by name) in a later chunk begin with the earlier chunk's rows in the same
  order; new rows may follow, and a frame seen once stays (all NaN when silent). The same holds
  for ``ctx.nodes``. State arrays indexed by row or node grow with ``grow`` (new rows start fresh);
- findings of a chunk are for its own steps only;
- splitting a run anywhere gives the findings of one scan over the whole run (scores equal to
  rounding): tests check every detector with ``columns`` cuts.

Whatever depends only on earlier steps lives in the state: a tail of the last few steps where a
detector looks back a fixed number of steps, running totals where it looks back to the start.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np
import numpy.typing as npt

from peerwatch.detect.context import Context, Series

# grow lives with the frame store so the framer can use it without importing detect (no cycle).
from peerwatch.frames.frame_store import grow as grow
from peerwatch.model import Finding

A = TypeVar("A", bound=np.generic)


class Detector(Protocol):
    """Scores one chunk of steps after the chunks its state has seen; a whole run is one chunk with
    no state."""

    name: str

    def scan(self, ctx: Context, state: Any) -> tuple[list[Finding], Any]: ...


@runtime_checkable
class FamilyDetector(Detector, Protocol):
    """A detector that judges only the series ``judges`` accepts, each family apart from the others:
    a child process judging it is sent no others (offload.py)."""

    def judges(self, s: Series) -> bool: ...


def with_tail(tail: npt.NDArray[A] | None, chunk: npt.NDArray[A], fill: object) -> npt.NDArray[A]:
    """The last steps kept from earlier chunks (rows × k), then the chunk (rows × steps).

    Rows new in this chunk get ``fill`` for the tail's steps."""
    if tail is None or tail.shape[1] == 0:
        return chunk
    return np.concatenate([grow(tail, chunk.shape[0], fill), chunk], axis=1)


def keep_tail(x: npt.NDArray[A], steps: int) -> npt.NDArray[A]:
    """The last ``steps`` columns of ``x`` (a copy, so the chunk's arrays can be freed)."""
    return x[:, max(0, x.shape[1] - steps) :].copy()


def columns(ctx: Context, a: int, b: int) -> Context:
    """The steps ``a..b-1`` of ``ctx`` as a chunk (same rows and nodes)."""
    series = tuple(
        Series(
            frame=replace(s.frame, start=s.frame.start + a * s.frame.step, values=s.frame.values[:, a:b]),
            family=s.family,
            node_index=s.node_index,
            components=s.components,
            peer_key=s.peer_key,
        )
        for s in ctx.series
    )
    held = None if ctx.held is None else ctx.held[:, a:b]
    return replace(
        ctx, series=series, start=ctx.start + a * ctx.step, steps=b - a, groups=ctx.groups[:, a:b], held=held
    )
