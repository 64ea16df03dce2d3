"""States: a particular value is the signal (a new XID, a link that went down, a PCIe link below its peers).

A state is judged by change within the data seen, never by its value alone: an XID recorded
months ago, or a port that was never cabled, is not news. A link that leaves its healthy state is
a hard failure, scored sure so the policy opens at once (an IB port that goes down stays down: the
job dies within seconds of it). A GPU's PCIe link is judged against what it can do (its own
``*_MAX_*`` field where the exporter has it) or else what most GPUs of the same model report,
never against the best value seen anywhere: one impossible reading must not make every other
link look downgraded. Its generation counts only while the GPU is busy, because idle GPUs lower
it to save power.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from dataclasses import dataclass, field

import numpy as np

from peerwatch.detect.cluster import RowMatch, match_rows
from peerwatch.detect.context import Context, IntArray, Series, interface_type
from peerwatch.detect.counters import carried_previous, carried_recent_count, recurrence_score
from peerwatch.detect.findings import emit
from peerwatch.detect.stream import grow
from peerwatch.model import BoolArray, Evidence, Finding, FloatArray
from peerwatch.xid_catalog import xid_meaning

# The families read are the catalogue's roles (catalog/roles.toml).
# role -> (healthy value, hint)
LINK_STATES = {
    "ib_port_state": (4.0, "ib_link"),  # 4: ACTIVE
    "ib_physical_state": (5.0, "ib_link"),  # 5: LinkUp
    "network_up": (1.0, "nic_dropout"),
    "network_carrier": (1.0, "nic_dropout"),
}
INTERFACE_ROLES = frozenset({"network_up", "network_carrier"})  # per interface: virtual ones are not watched
# role -> (what, the role of the link's own capability, read from the same exporter where it has one)
PCIE = {"pcie_generation": ("gen", "pcie_max_generation"), "pcie_width": ("width", "pcie_max_width")}
# Values a GPU's PCIe link can report: generations 1-7; widths x1 to x16 (no GPU has a wider link).
PCIE_POSSIBLE = {"gen": frozenset(range(1, 8)), "width": frozenset({1, 2, 4, 8, 16})}
PCIE_VALUES = max(max(v) for v in PCIE_POSSIBLE.values()) + 1  # bins of the running counts of possible values
MODEL_LABELS = ("modelName", "model_name", "gpu_model", "model")
# clock throttle / event reason bits (NVML, role throttle_reasons): which count as thermal and which as power
THERMAL_BITS = 0x20 | 0x40  # SW thermal slowdown, HW thermal slowdown
POWER_BITS = 0x80 | 0x08  # HW power brake, HW slowdown
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StateSettings:
    report: float = 4.0  # scores below are not findings
    # An IB port's or NIC's link that left its healthy state (having had it): a hard failure, sure
    # (at least the policy's immediate 15) so that it is alarmed at once.
    link_down: float = 16.0
    shared: float = 0.2  # a throttle reason shared by this share of peers is the workload, not a fault
    history: int = 20  # steps over which recurring throttling adds up
    busy_util: float = 20.0  # [%] GPU utilisation from which a lower PCIe generation counts (idle GPUs save power)


@dataclass
class StateMemory:
    """Steps scanned since the run's start and, by frame name: each XID row's last present value and
    first present step, whether each link row was ever healthy and is watched at all, the PCIe values
    counted per GPU model, each PCIe row's model, utilisation and capability rows, each throttle
    reason's flags over the last steps, and the PCIe rows whose impossible value was already said."""

    steps: int = 0
    xid_last: dict[str, FloatArray] = field(default_factory=dict)
    xid_first: dict[str, IntArray] = field(default_factory=dict)  # -1: never present
    was_healthy: dict[str, BoolArray] = field(default_factory=dict)
    watched: dict[str, BoolArray] = field(default_factory=dict)
    pcie_counts: dict[str, FloatArray] = field(default_factory=dict)  # (models, values) counts so far
    pcie_models: dict[str, IntArray] = field(default_factory=dict)  # each row's model id
    model_ids: dict[str, int] = field(default_factory=dict)
    util_rows: dict[str, RowMatch] = field(default_factory=dict)
    cap_rows: dict[str, RowMatch] = field(default_factory=dict)
    throttled: dict[tuple[str, int], BoolArray] = field(default_factory=dict)  # (frame, bits): last history-1 steps
    pcie_noted: dict[str, set[int]] = field(default_factory=dict)  # rows whose impossible value was said

    def copy(self) -> StateMemory:
        """A copy whose dicts can take new arrays without touching this one's (arrays are never changed in place)."""
        return StateMemory(
            self.steps,
            dict(self.xid_last),
            dict(self.xid_first),
            dict(self.was_healthy),
            dict(self.watched),
            dict(self.pcie_counts),
            dict(self.pcie_models),
            dict(self.model_ids),
            dict(self.util_rows),
            dict(self.cap_rows),
            dict(self.throttled),
            {k: set(v) for k, v in self.pcie_noted.items()},
        )


def _was(v: FloatArray, value: float, before: BoolArray | None) -> BoolArray:
    """Whether the series held ``value`` at some earlier step (``before``: at some step before the chunk)."""
    seen = np.nan_to_num(v, nan=-1e300) == value
    was = np.logical_or.accumulate(seen, axis=1)
    if before is not None:
        was |= grow(before, v.shape[0], False)[:, None]
    return was


def _gpu(s: Series, r: int) -> Hashable:
    return int(s.node_index[r]), s.components[r]


class StateDetector:
    name = "state"

    def __init__(self, settings: StateSettings | None = None) -> None:
        self.settings = settings or StateSettings()

    def scan(self, ctx: Context, state: StateMemory | None) -> tuple[list[Finding], StateMemory]:
        # The methods read the past from ``mem`` and put the new past in its place.
        mem = state.copy() if state is not None else StateMemory()
        by_name = ctx.by_name()
        out: list[Finding] = []
        roles = ctx.roles
        for s in roles.present("xid", by_name):
            out.extend(self._xid(ctx, s, mem))
        for role, (healthy, hint) in LINK_STATES.items():
            for s in roles.present(role, by_name):
                out.extend(self._link(ctx, s, healthy, hint, role in INTERFACE_ROLES, mem))
        util = roles.first("gpu_utilization", by_name)
        for role, (what, cap_role) in PCIE.items():
            for s in roles.present(role, by_name):
                caps = roles.present(cap_role, by_name)
                cap = next((c for c in caps if c.family.exporter == s.family.exporter), None)
                out.extend(self._pcie(ctx, s, what, cap, util, mem))
        for s in roles.present("throttle_reasons", by_name):
            out.extend(self._throttle(ctx, s, mem))
        mem.steps += ctx.steps
        return out, mem

    def _xid(self, ctx: Context, s: Series, mem: StateMemory) -> list[Finding]:
        v, name = s.values, s.frame.name
        prev, mem.xid_last[name] = carried_previous(v, mem.xid_last.get(name))
        present = ~np.isnan(v)
        first = grow(mem.xid_first.get(name, np.zeros(0, dtype=np.int64)), v.shape[0], -1)
        first = np.where(first >= 0, first, np.where(present.any(axis=1), mem.steps + np.argmax(present, axis=1), -1))
        mem.xid_first[name] = first
        # A new XID: the value changed, or a new series (newer exporters: one per err_code) appeared mid-run.
        appeared = ((mem.steps + np.arange(v.shape[1]))[None, :] == first[:, None]) & (first[:, None] > 2)
        new = (v > 0) & ((~np.isnan(prev) & (v != prev)) | appeared)
        out = []
        for r, c in zip(*np.nonzero(new), strict=True):
            meaning = xid_meaning(int(v[r, c]))
            if meaning.diagnosis is None or s.node_index[r] < 0:
                continue
            out.append(
                Finding(
                    ts=float(ctx.timestamps[c]),
                    node=ctx.nodes[int(s.node_index[r])],
                    component=s.components[r],
                    detector=self.name,
                    signal=f"xid:{int(v[r, c])}",
                    score=meaning.score,
                    evidence=Evidence(
                        s.frame.name, s.frame.keys[r].labels, float(v[r, c]), note=f"XID {int(v[r, c])}: {meaning.text}"
                    ),
                    hint=meaning.diagnosis,
                )
            )
        return out

    def _link(
        self,
        ctx: Context,
        s: Series,
        healthy: float,
        hint: str,
        interfaces: bool,
        mem: StateMemory,
    ) -> list[Finding]:
        """``interfaces``: the family is per network interface (containers' and loopback are not watched)."""
        v, name = s.values, s.frame.name
        keep = mem.watched.get(name, np.zeros(0, dtype=bool))
        if keep.size < v.shape[0]:  # rows new to the run: is each an interface worth watching
            by_interface = bool(s.family.entity_labels) and interfaces
            more = [
                not by_interface or interface_type(c.removeprefix("net/")) not in ("container", "loopback")
                for c in s.components[keep.size :]
            ]
            keep = mem.watched[name] = np.concatenate([keep, np.array(more, dtype=bool)])
        was = _was(v, healthy, mem.was_healthy.get(name))
        mem.was_healthy[name] = was[:, -1].copy()
        down = keep[:, None] & ~np.isnan(v) & (v != healthy) & was
        return emit(
            ctx,
            s,
            np.where(down, self.settings.link_down, 0.0),
            None,
            None,
            self.settings.report,
            self.name,
            f"(healthy: {healthy:g}); now",
            hint,
        )

    def _pcie(
        self, ctx: Context, s: Series, what: str, cap: Series | None, util: Series | None, mem: StateMemory
    ) -> list[Finding]:
        v, name = s.values, s.frame.name
        possible = np.isin(np.nan_to_num(v, nan=-1.0), list(PCIE_POSSIBLE[what]))
        self._note_impossible(ctx, s, ~possible & ~np.isnan(v), what, mem)
        counted = possible & (_busy(s, util, mem, self.settings.busy_util) if what == "gen" else True)
        # What most links of the same model report (busy, for the generation), counted causally.
        models = self._models(s, mem)
        n_models = len(mem.model_ids)
        bins = np.where(counted, np.nan_to_num(v, nan=0.0), 0).astype(np.int64)
        hist = np.zeros((n_models, PCIE_VALUES, v.shape[1]))
        r, c = np.nonzero(counted)
        np.add.at(hist, (models[r], bins[r, c], c), 1.0)
        before = mem.pcie_counts.get(name, np.zeros((0, PCIE_VALUES)))
        before = grow(before, n_models, 0.0)
        running = before[:, :, None] + np.cumsum(hist, axis=2)
        mem.pcie_counts[name] = running[:, :, -1].copy()
        seen = running.sum(axis=1) > 0  # (models, steps)
        mode = np.where(seen, np.argmax(running, axis=1), np.nan)  # ties: the lower value
        expected = mode[models]
        if cap is not None:  # the link's own capability, where the exporter reports it
            match = mem.cap_rows[name] = match_rows(s, cap, _gpu, mem.cap_rows.get(name))
            rows = match.rows
            own = np.where(rows[:, None] >= 0, cap.values[np.maximum(rows, 0)], np.nan)
            own = np.where(np.isin(np.nan_to_num(own, nan=-1.0), list(PCIE_POSSIBLE[what])), own, np.nan)
            expected = np.where(np.isnan(own), expected, own)
        low = possible & (v < expected)
        if what == "gen":
            low &= counted
        score = np.where(low, 4.0 + 4.0 * (1.0 - v / np.where(expected > 0, expected, 1.0)), 0.0)
        label = f"PCIe {what}; expected"
        return emit(ctx, s, score, expected, None, self.settings.report, self.name, label, "pcie_downgrade")

    def _note_impossible(self, ctx: Context, s: Series, bad: BoolArray, what: str, mem: StateMemory) -> None:
        """A value no PCIe link can have is the exporter's or driver's problem: said once per series."""
        noted = mem.pcie_noted.setdefault(s.frame.name, set())
        for r in np.flatnonzero(bad.any(axis=1)):
            if int(r) not in noted and s.node_index[r] >= 0:
                noted.add(int(r))
                c = int(np.argmax(bad[r]))
                log.warning(
                    "%s %s: %s %g is no possible PCIe link %s (a data problem); not judged",
                    ctx.nodes[int(s.node_index[r])],
                    s.components[r],
                    s.frame.name,
                    s.values[r, c],
                    what,
                )

    def _models(self, s: Series, mem: StateMemory) -> IntArray:
        """Each row's GPU model id (rows new to the run looked up once)."""
        known = mem.pcie_models.get(s.frame.name, np.zeros(0, dtype=np.int64))
        rows = s.values.shape[0]
        if known.size < rows:
            more = []
            for key in s.frame.keys[known.size : rows]:
                labels = dict(key.labels)
                model = next((labels[m] for m in MODEL_LABELS if m in labels), "")
                more.append(mem.model_ids.setdefault(model, len(mem.model_ids)))
            known = mem.pcie_models[s.frame.name] = np.concatenate([known, np.array(more, dtype=np.int64)])
        return known

    def _throttle(self, ctx: Context, s: Series, mem: StateMemory) -> list[Finding]:
        bits = np.nan_to_num(s.values, nan=0.0).astype(np.int64)
        out = []
        for mask, hint in ((THERMAL_BITS, "thermal_throttle"), (POWER_BITS, "power_throttle")):
            on = (bits & mask) != 0
            share = on.mean(axis=0) if on.shape[0] else np.zeros(on.shape[1])
            # Throttling comes and goes (periodic clock drops): score how often it happened lately.
            mine = on & (share < self.settings.shared)[None, :]
            key = (s.frame.name, mask)
            recent, mem.throttled[key] = carried_recent_count(mem.throttled.get(key), mine, self.settings.history)
            score = recurrence_score(recent)
            out.extend(emit(ctx, s, score, None, None, self.settings.report, self.name, "throttle reasons", hint))
        return out


def _busy(s: Series, util: Series | None, mem: StateMemory, busy_util: float) -> BoolArray:
    """Whether each GPU series' GPU is busy at each step (unknown counts as not busy)."""
    if util is None:
        return np.zeros(s.values.shape, dtype=bool)
    match = mem.util_rows[s.frame.name] = match_rows(s, util, _gpu, mem.util_rows.get(s.frame.name))
    rows = match.rows
    u = np.where(rows[:, None] >= 0, util.values[np.maximum(rows, 0)], np.nan)
    return np.nan_to_num(u, nan=0.0) >= busy_util
