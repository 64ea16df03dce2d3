"""What a fault transform returns and the small helpers transforms share.

A transform (Merlion style) reads the latent signals and returns an :class:`Effect`: the changed
arrays, the XIDs the driver logged and the scrape targets that went down. It never changes its
input; :class:`Edit` copies each array once, on first write.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from peerwatch.model import FloatArray
from peerwatch.simulate.cluster import Layout
from peerwatch.simulate.faults import Fault
from peerwatch.simulate.signals import AnyArray, Signals, Xid
from peerwatch.simulate.targets import BoolArray, Grid


@dataclass(frozen=True, slots=True)
class Down:
    """A scrape target that stops answering: ``exporter`` None = every exporter of the node."""

    node: int
    exporter: int | None
    k0: int
    k1: int | None = None
    every: float = 1.0  # share of scrapes that fail in the window (1 = all)


@dataclass(frozen=True, slots=True)
class Effect:
    changes: dict[str, AnyArray]
    xids: tuple[Xid, ...] = ()
    downs: tuple[Down, ...] = ()


@dataclass(frozen=True, slots=True)
class Ctx:
    grid: Grid
    layout: Layout
    rng: np.random.Generator

    def window(self, start: float, end: float | None = None) -> BoolArray:
        """Steps in ``[start, end)`` (to the end of the run when ``end`` is None)."""
        times = self.grid.times
        return (times >= start) & (times < (np.inf if end is None else end))

    def ramp(self, start: float, end: float) -> FloatArray:
        """0 before ``start``, rising linearly to 1 at ``end``, 1 after."""
        return np.clip((self.grid.times - start) / max(end - start, 1e-9), 0.0, 1.0)

    def k(self, ts: float) -> int:
        return min(self.grid.index(ts), self.grid.steps - 1)

    def bursts(self, start: float, end: float, every_s: tuple[float, float], steps: int = 1) -> BoolArray:
        """Periodic short events (throttle clock drops, link flaps) at irregular intervals."""
        out = np.zeros(self.grid.steps, dtype=bool)
        ts = start + float(self.rng.uniform(0, every_s[0]))
        while ts < end:
            k = self.k(ts)
            out[k : k + steps] = True
            ts += float(self.rng.uniform(*every_s))
        return out & self.window(start, end)


class Edit:
    """Copy-on-write view of the signals for one transform."""

    def __init__(self, sig: Signals) -> None:
        self.sig = sig
        self.changes: dict[str, AnyArray] = {}

    def __getitem__(self, name: str) -> AnyArray:
        arr = self.changes.get(name)
        if arr is None:
            arr = self.changes[name] = np.array(self.sig[name], copy=True)
        return arr

    def effect(self, xids: tuple[Xid, ...] = (), downs: tuple[Down, ...] = ()) -> Effect:
        return Effect(self.changes, xids, downs)


Transform = Callable[[Signals, Fault, Ctx], Effect]


def poisson_steps(ctx: Ctx, rate_per_step: npt.ArrayLike) -> FloatArray:
    """Error counts per step with the given (possibly time-varying) mean."""
    lam = np.broadcast_to(np.asarray(rate_per_step, dtype=np.float64), (ctx.grid.steps,))
    return ctx.rng.poisson(lam).astype(np.float64)


def stall_node_host(e: Edit, n: int, on: BoolArray, ctx: Ctx) -> None:
    """The host side of a GPU/NVLink/bus fault seen in the field: interrupts fall from ~300K to
    70-100K per 30 s and runnable processes drop to about zero."""
    cnt = int(on.sum())
    e["intr"][n, on] = ctx.rng.uniform(70e3, 100e3, cnt) / 30.0
    e["procs_running"][n, on] = ctx.rng.choice([0.0, 0.0, 1.0], cnt)
