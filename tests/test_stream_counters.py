"""Counters, states and the cluster scanned in chunks: what they carry from one chunk to the next.

The conformance cases (test_detectors.py) hold one family each; these hold the rest (raw counter
values with missed scrapes, discards, XIDs, interfaces, PCIe, throttling, a baseline longer than
its window), and rows or whole frames that appear only in a later chunk.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from framekit import make_frame
from peerwatch.catalog.load import Catalog
from peerwatch.detect.cluster import ClusterDetector
from peerwatch.detect.context import Context, Series
from peerwatch.detect.counters import CounterDetector
from peerwatch.detect.states import StateDetector
from peerwatch.engine import Detector, context_of
from peerwatch.frames import Frame
from peerwatch.model import Finding, FloatArray
from streamkit import assert_chunk_invariant

START, STEP, NODES = 1_764_460_800.0, 30.0, 12
UTIL = "DCGM_FI_DEV_GPU_UTIL"
ECC = "peerwatch_agent_gpu_ecc_uncorrected_volatile"  # a gauge: raw counter values, not rates
DROPS = "node_network_receive_drop_total"
SYMBOLS = "node_infiniband_symbol_error_total"
XID = "DCGM_FI_DEV_XID_ERRORS"
UP = "node_network_up"
GEN, WIDTH = "DCGM_FI_DEV_PCIE_LINK_GEN", "DCGM_FI_DEV_PCIE_LINK_WIDTH"
THROTTLE = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"
REQUESTS = "node_mountstats_nfs_operations_requests_total"
RTT = "node_mountstats_nfs_operations_response_time_seconds_total"


def gpus(count: int = 8) -> list[dict[str, str]]:
    return [
        {"Hostname": f"gpu{n:02d}", "gpu": str(g), "instance": f"gpu{n:02d}:9400"}
        for g in range(count)
        for n in range(NODES)
    ]  # GPU ``count - 1`` of every node last: the rows that appear later


def ports(devices: list[str], **labels: str) -> list[dict[str, str]]:
    return [{"instance": f"gpu{n:02d}:9100", "device": d, **labels} for d in devices for n in range(NODES)]


def framed(name: str, rows: list[dict[str, str]], values: FloatArray, kind: str = "gauge") -> Frame:
    return make_frame(name, rows, values, START, STEP, kind)  # type: ignore[arg-type]


def holed(frames: dict[str, Frame], holes: float) -> dict[str, Frame]:
    rng = np.random.default_rng(9)
    for f in frames.values():
        f.values[rng.random(f.values.shape) < holes] = np.nan
    return frames


def counter_frames(holes: float, steps: int = 90) -> dict[str, Frame]:
    rng = np.random.default_rng(4)
    util = framed(UTIL, gpus(), 97 + rng.normal(0, 1, (NODES * 8, steps)))
    # Raw ECC totals: random rare increments, and a GPU whose errors pile up from step 40.
    ecc = np.cumsum(rng.random((NODES * 8, steps)) < 0.01, axis=1).astype(float)
    ecc[7, 40:] += np.arange(steps - 40) // 3
    drops = np.zeros((NODES * 2, steps))
    drops[4, 5::9] = 1 / STEP  # a habit of its own
    drops[5, 50:66:2] = 3 / STEP  # a burst
    drops[:, 45] = 1 / STEP  # every node at once: shared
    symbols = (rng.random((NODES * 3, steps)) < 0.03) / STEP
    symbols[NODES + 2, 30::3] = 2 / STEP
    return holed(
        {
            UTIL: util,
            ECC: framed(ECC, gpus(), ecc),
            DROPS: framed(DROPS, ports(["direct0", "direct1"]), drops, "rate"),
            SYMBOLS: framed(SYMBOLS, ports(["mlx5_0", "mlx5_1", "mlx5_2"], port="1"), symbols, "rate"),
        },
        holes,
    )


def state_frames(holes: float, steps: int = 90) -> dict[str, Frame]:
    rng = np.random.default_rng(5)
    n = NODES * 9  # 9 GPUs a node (the 9th appears later)
    util = 97 + rng.normal(0, 1, (n, steps))
    util[2::NODES, 10:25] = 3.0  # gpu02 idle a while: its GPUs lower their PCIe gen
    xid = np.zeros((n + 1, steps))
    xid[1 + 2 * NODES, 30:] = 79  # after missed scrapes: still a change from the last value seen
    xid[1 + 2 * NODES, 27:30] = np.nan
    xid[3 + 1 * NODES, 20:] = 13  # the application's XID: no finding
    xid[3 + 1 * NODES, 60:] = 48
    xid[n, :] = np.nan  # newer exporters: a series per XID, here appearing at step 40
    xid[n, 40:] = 48
    up = np.ones((NODES * 4, steps))
    up[6, 50:] = 0.0  # direct0 of gpu06 goes down
    up[NODES : 3 * NODES] = 0.0  # veths and lo: up and down, never watched
    up[NODES + 1, 20:60] = 1.0
    up[2 * NODES + 3, 10:30] = 1.0
    up[NODES * 3 + 4, 70:] = 0.0  # direct1 of gpu04 (a port that appears later) goes down
    gen = np.full((n, steps), 5.0)
    gen[2::NODES, 10:25] = 3.0
    gen[8, 35:] = 4.0
    width = np.full((n, steps), 16.0)
    width[9 + 7 * NODES, 45:] = 8.0
    width[np.arange(n) != 9 + 7 * NODES, 70:] = np.nan  # its peers silent: its own best so far still counts
    throttle = np.zeros((n, steps))
    throttle[10 + 4 * NODES, 30::3] = 0x40  # thermal, again and again
    throttle[:, 60:63] = 0x80  # a power brake on every GPU: the workload
    throttle[11 + 5 * NODES, [70, 72]] = 0x08
    xid_rows = [*gpus(9), {"Hostname": "gpu05", "gpu": "6", "instance": "gpu05:9400", "err_code": "48"}]
    return holed(
        {
            UTIL: framed(UTIL, gpus(9), util),
            XID: framed(XID, xid_rows, xid),
            UP: framed(UP, ports(["direct0", "veth1a2b", "lo", "direct1"]), up),
            GEN: framed(GEN, gpus(9), gen),
            WIDTH: framed(WIDTH, gpus(9), width),
            THROTTLE: framed(THROTTLE, gpus(9), throttle),
        },
        holes,
    )


def nfs_frames(holes: float, steps: int = 400) -> dict[str, Frame]:
    """READ and WRITE on every client; the storage server slows 30-fold at step 330 (3x at 150: benign)."""
    rng = np.random.default_rng(6)
    rows = [
        {"instance": f"gpu{n:02d}:9100", "export": "nfs1:/data", "operation": op, "mountaddr": "10.0.0.1"}
        for op in ("READ", "WRITE")
        for n in range(NODES)
    ]
    req = 100 + rng.normal(0, 2, (2 * NODES, steps))
    rtt = req * 0.002 * (1 + rng.normal(0, 0.05, req.shape))
    rtt[:, 150:160] *= 3
    rtt[:, 330:] *= 30
    util = framed(UTIL, gpus(), 97 + rng.normal(0, 1, (NODES * 8, steps)))
    return holed(
        {UTIL: util, REQUESTS: framed(REQUESTS, rows, req, "rate"), RTT: framed(RTT, rows, rtt, "rate")}, holes
    )


def without_last_rows(ctx: Context, extra: Mapping[str, int]) -> Context:
    """``ctx`` without the last ``extra[frame]`` rows of frames (a frame left with none is left out)."""

    def head(s: Series) -> Series:
        n = s.values.shape[0] - extra.get(s.frame.name, 0)
        f = s.frame
        frame = replace(f, keys=f.keys[:n], nodes=f.nodes[:n], values=f.values[:n], last_seen=f.last_seen[:n])
        return Series(frame, s.family, s.node_index[:n], s.components[:n], s.peer_key[:n])

    kept = (head(s) for s in ctx.series if extra.get(s.frame.name, 0) < s.values.shape[0])
    return replace(ctx, series=tuple(kept))


class AppearingLater:
    """``scanner`` whose first chunk of a chunked run lacks the last rows of some frames: they appear after it."""

    def __init__(self, scanner: Detector, extra: Mapping[str, int], steps: int) -> None:
        self.scanner, self.extra, self.steps = scanner, extra, steps

    def scan(self, ctx: Context, state: Any) -> tuple[list[Finding], Any]:
        first_chunk = state is None and ctx.steps < self.steps
        return self.scanner.scan(without_last_rows(ctx, self.extra) if first_chunk else ctx, state)


def context(frames: dict[str, Frame], silent_until: Mapping[str, int] | None = None, cut: int = 0) -> Context:
    """Frames on one context; the last ``silent_until[frame]`` rows silent before step ``cut``."""
    for name, rows in (silent_until or {}).items():
        frames[name].values[-rows:, :cut] = np.nan
    return context_of(frames, Catalog.default())


@pytest.mark.parametrize("holes", [0.0, 0.1])
def test_counters_scanned_step_by_step_find_what_one_scan_finds(holes: float) -> None:
    ctx = context(counter_frames(holes))
    assert assert_chunk_invariant(CounterDetector(), ctx, [5, 19, 20, 21, 44, 46]) > 0
    assert_chunk_invariant(CounterDetector(), ctx, range(1, ctx.steps))
    found = CounterDetector().scan(ctx, None)[0]
    assert {f.signal for f in found} >= {ECC, DROPS, SYMBOLS}


@pytest.mark.parametrize("cut", [12, 40])
def test_counter_rows_and_frames_that_appear_later(cut: int) -> None:
    extra = {SYMBOLS: NODES, DROPS: 2 * NODES}  # a new IB port on every node; the drops frame altogether
    ctx = context(counter_frames(0.0), extra, cut)
    scanner = AppearingLater(CounterDetector(), extra, ctx.steps)
    assert assert_chunk_invariant(scanner, ctx, range(cut, ctx.steps)) > 0


@pytest.mark.parametrize("holes", [0.0, 0.1])
def test_states_scanned_step_by_step_find_what_one_scan_finds(holes: float) -> None:
    ctx = context(state_frames(holes))
    assert assert_chunk_invariant(StateDetector(), ctx, [2, 3, 20, 31, 50]) > 0
    assert_chunk_invariant(StateDetector(), ctx, range(1, ctx.steps))
    if not holes:
        found = {(f.node, f.hint) for f in StateDetector().scan(ctx, None)[0]}
        assert found == {
            ("gpu01", "gpu_fallen_off_bus"),
            ("gpu03", "ecc_hbm"),
            ("gpu05", "ecc_hbm"),
            ("gpu04", "nic_dropout"),
            ("gpu06", "nic_dropout"),
            ("gpu08", "pcie_downgrade"),
            ("gpu09", "pcie_downgrade"),
            ("gpu10", "thermal_throttle"),
            ("gpu11", "power_throttle"),
        }


def test_state_rows_that_appear_later() -> None:
    cut = 40  # the XID series appearing at 40 is news in both
    extra = {XID: 1, UP: NODES, UTIL: NODES, GEN: NODES, WIDTH: NODES, THROTTLE: NODES}
    ctx = context(state_frames(0.0), extra, cut)
    scanner = AppearingLater(StateDetector(), extra, ctx.steps)
    assert_chunk_invariant(scanner, ctx, range(cut, ctx.steps))
    later = {(f.node, f.component, f.signal) for f in StateDetector().scan(ctx, None)[0]}
    assert {("gpu05", "gpu/6", "xid:48"), ("gpu04", "net/direct1", UP)} <= later


@pytest.mark.parametrize("holes", [0.0, 0.1])
def test_cluster_scanned_step_by_step_past_its_baseline_window(holes: float) -> None:
    ctx = context(nfs_frames(holes))
    assert assert_chunk_invariant(ClusterDetector(), ctx, [100, 259, 260, 261, 331]) > 0
    assert_chunk_invariant(ClusterDetector(), ctx, range(1, ctx.steps))
    assert min(f.ts for f in ClusterDetector().scan(ctx, None)[0]) >= START + 330 * STEP


@pytest.mark.parametrize(("extra", "cut"), [({REQUESTS: NODES, RTT: NODES}, 280), ({REQUESTS: 2 * NODES}, 100)])
def test_cluster_rows_and_frames_that_appear_later(extra: dict[str, int], cut: int) -> None:
    ctx = context(nfs_frames(0.0), extra, cut)  # WRITE appears late, or the request counts do
    scanner = AppearingLater(ClusterDetector(), extra, ctx.steps)
    assert assert_chunk_invariant(scanner, ctx, range(cut, ctx.steps)) > 0
