"""States: a particular value is the signal (a new XID, a link that went down, a PCIe link below its peers).

A state is judged by change within the data seen, never by its value alone: an XID recorded
months ago, or a port that was never cabled, is not news. A GPU's PCIe generation counts only
while the GPU is busy, because idle GPUs lower it to save power.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from peerwatch.detect.context import Context, Series, interface_type
from peerwatch.detect.counters import recent_count, recurrence_score
from peerwatch.detect.findings import emit
from peerwatch.diagnose.xid import xid_meaning
from peerwatch.frames import previous_values
from peerwatch.model import BoolArray, Evidence, Finding, FloatArray

XID_FAMILIES = ("DCGM_FI_DEV_XID_ERRORS", "dcgm_xid_errors")
# family -> (healthy value, hint, score)
LINK_STATES = {
    "node_infiniband_state_id": (4.0, "ib_link", 12.0),  # 4: ACTIVE
    "node_infiniband_physical_state_id": (5.0, "ib_link", 12.0),  # 5: LinkUp
    "node_network_up": (1.0, "nic_dropout", 10.0),
    "node_network_carrier": (1.0, "nic_dropout", 10.0),
}
PCIE = {
    "DCGM_FI_DEV_PCIE_LINK_GEN": "gen",
    "DCGM_FI_DEV_PCIE_LINK_WIDTH": "width",
    "all_smi_gpu_pcie_gen_current": "gen",
    "all_smi_gpu_pcie_width_current": "width",
}
# clock throttle / event reason bits (NVML): which count as thermal and which as power
THROTTLE_FAMILIES = ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS")
THERMAL_BITS = 0x20 | 0x40  # SW thermal slowdown, HW thermal slowdown
POWER_BITS = 0x80 | 0x08  # HW power brake, HW slowdown
BUSY_UTIL = 20.0


@dataclass(frozen=True)
class StateSettings:
    report: float = 4.0
    shared: float = 0.2  # a throttle reason shared by this share of peers is the workload, not a fault
    history: int = 20  # steps over which recurring throttling adds up


def _was(v: FloatArray, value: float) -> BoolArray:
    """Whether the series held ``value`` at some earlier step."""
    seen = np.nan_to_num(v, nan=-1e300) == value
    return np.logical_or.accumulate(seen, axis=1)


class StateDetector:
    name = "state"

    def __init__(self, settings: StateSettings | None = None) -> None:
        self.settings = settings or StateSettings()

    def detect(self, ctx: Context) -> list[Finding]:
        by_name = ctx.by_name()
        out: list[Finding] = []
        for name in XID_FAMILIES:
            if name in by_name:
                out.extend(self._xid(ctx, by_name[name]))
        for name, (healthy, hint, score) in LINK_STATES.items():
            if name in by_name:
                out.extend(self._link(ctx, by_name[name], healthy, hint, score))
        util = by_name.get("DCGM_FI_DEV_GPU_UTIL") or by_name.get("all_smi_gpu_utilization")
        for name, what in PCIE.items():
            if name in by_name:
                out.extend(self._pcie(ctx, by_name[name], what, util))
        for name in THROTTLE_FAMILIES:
            if name in by_name:
                out.extend(self._throttle(ctx, by_name[name]))
        return out

    def _xid(self, ctx: Context, s: Series) -> list[Finding]:
        v = s.values
        prev = previous_values(v)
        first = np.argmax(~np.isnan(v), axis=1)
        # A new XID: the value changed, or a new series (newer exporters: one per err_code) appeared mid-window.
        appeared = (np.arange(v.shape[1])[None, :] == first[:, None]) & (first[:, None] > 2)
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

    def _link(self, ctx: Context, s: Series, healthy: float, hint: str, score: float) -> list[Finding]:
        v = s.values

        if s.family.entity_labels and s.frame.name.startswith("node_network_"):
            keep = np.array(
                [interface_type(c.removeprefix("net/")) not in ("container", "loopback") for c in s.components]
            )
            if not keep.any():
                return []
        else:
            keep = np.ones(v.shape[0], dtype=bool)
        down = keep[:, None] & ~np.isnan(v) & (v != healthy) & _was(v, healthy)
        return emit(
            ctx,
            s,
            np.where(down, score, 0.0),
            None,
            None,
            self.settings.report,
            self.name,
            f"(healthy: {healthy:g}); now",
            hint,
        )

    def _pcie(self, ctx: Context, s: Series, what: str, util: Series | None) -> list[Finding]:
        v = s.values
        usual = np.fmax.accumulate(np.nan_to_num(v, nan=0.0), axis=1)  # the link's best so far
        with np.errstate(all="ignore"):
            peers = np.nanmax(v, axis=0)
        best = np.fmax(usual, peers)
        low = ~np.isnan(v) & (v < best)
        if what == "gen":
            busy = _busy(ctx, s, util)
            low &= busy
        score = np.where(low, 4.0 + 4.0 * (1.0 - v / np.where(best > 0, best, 1.0)), 0.0)
        return emit(ctx, s, score, best, None, self.settings.report, self.name, f"PCIe {what}; best", "pcie_downgrade")

    def _throttle(self, ctx: Context, s: Series) -> list[Finding]:
        bits = np.nan_to_num(s.values, nan=0.0).astype(np.int64)
        out = []
        for mask, hint in ((THERMAL_BITS, "thermal_throttle"), (POWER_BITS, "power_throttle")):
            on = (bits & mask) != 0
            share = on.mean(axis=0) if on.shape[0] else np.zeros(on.shape[1])
            # Throttling comes and goes (periodic clock drops): score how often it happened lately.
            mine = on & (share < self.settings.shared)[None, :]
            score = recurrence_score(recent_count(mine, self.settings.history))
            out.extend(emit(ctx, s, score, None, None, self.settings.report, self.name, "throttle reasons", hint))
        return out


def _busy(ctx: Context, s: Series, util: Series | None) -> BoolArray:
    """Whether each GPU series' GPU is busy at each step (unknown counts as not busy)."""
    if util is None:
        return np.zeros(s.values.shape, dtype=bool)
    index = {(int(n), c): r for r, (n, c) in enumerate(zip(util.node_index, util.components, strict=True))}
    rows = np.array([index.get((int(n), c), -1) for n, c in zip(s.node_index, s.components, strict=True)])
    u = np.where(rows[:, None] >= 0, util.values[np.maximum(rows, 0)], np.nan)
    return np.nan_to_num(u, nan=0.0) >= BUSY_UTIL
