"""Every injected fault leaves its signal in the recording, where the field saw it; without the fault it does not.

Each kind runs alone on a 12-node cluster; the same seed without faults is the negative control. A
signal "shows" when the faulty entity leaves the range of its peers (nodes in the job at that step)
by more than a few peer MADs in two steps or more, or vanishes for several scrapes while they report.
"""

from __future__ import annotations

import warnings
from functools import cache

import numpy as np
import pytest

from peerwatch.frames import Frame, FrameBuilder
from peerwatch.model import SeriesKey
from peerwatch.simulate import KINDS, FaultRequest, Scenario, Simulation, default_spec, simulate
from peerwatch.simulate.events import QUIET, Benign
from peerwatch.simulate.faults import Fault
from peerwatch.simulate.rates import mttf_hours

DEBUG = False
GAUGE_COUNTERS = {"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"}
UNTYPED_COUNTERS = ("node_vmstat_", "node_netstat_Tcp_")
SIGNALS = sorted({m for k in KINDS.values() for m in k.signals})
KIND_NAMES = sorted(KINDS)


def _kind_of(name: str, declared: str | None, _values: object = None) -> str:
    if name in GAUGE_COUNTERS:
        return "gauge"
    if declared == "counter" or name.startswith(UNTYPED_COUNTERS):
        return "rate"
    return "gauge"


def _hours(kind: str) -> float:
    return {"ecc_hbm": 3.0, "ecc_slow_remap": 4.0}.get(kind, 1.5)


@cache
def _run(kind: str | None, hours: float) -> tuple[Simulation, dict[str, Frame]]:
    faults = (FaultRequest(kind, at=0.55),) if kind else ()
    sim = simulate(Scenario("faults", default_spec(12), hours=hours, seed=11, faults=faults, benign=Benign()))
    builder = FrameBuilder(30.0, kind_of=_kind_of, now=sim.grid.end)  # type: ignore[arg-type]
    frames = builder.add_all(sim.blocks(set(SIGNALS))).build()
    return sim, frames


def _rows(frame: Frame, fault: Fault, node: str) -> np.ndarray:
    comp = fault.component
    out = []
    for i, key in enumerate(frame.keys):
        if frame.nodes[i] != node:
            continue
        labels = key.label_dict()
        if comp.startswith("gpu/") and labels.get("gpu_index", labels.get("gpu")) not in (None, comp[4:]):
            continue
        if comp.startswith("ib/") and labels.get("device") not in (None, comp[3:].split(":")[0]):
            continue
        if frame.name == "up" and fault.kind == "gsp_timeout" and not labels["instance"].endswith(":9400"):
            continue
        out.append(i)
    return np.asarray(out, dtype=np.int64)


def _shows(sim: Simulation, frames: dict[str, Frame], fault: Fault, metric: str) -> bool:
    frame = frames[metric]
    times = frame.timestamps
    end = fault.failure_ts if fault.failure_ts is not None else fault.end_ts
    win = (times >= fault.onset_ts - 60) & (times <= end + 300)  # vanishing shows just after a failure
    if fault.node == "cluster":  # every node's values rise together, far beyond their own past
        vals = frame.values[:, win]
        before = frame.values[:, times < fault.onset_ts - 300]
        return bool(np.nanmedian(vals) > 5 * np.nanmedian(before))
    k = np.clip(np.rint((times - sim.grid.start) / sim.grid.step).astype(int), 0, sim.grid.steps - 1)
    steps = 0
    for i in _rows(frame, fault, fault.node):
        entity = _entity(frame.keys[i])
        peers = [j for j, n in enumerate(frame.nodes) if n != fault.node and _entity(frame.keys[j]) == entity]
        if not peers:
            continue
        member = sim.src.act.member[[sim.layout.index(frame.nodes[j]) for j in peers]][:, k]
        pv = np.where(member, frame.values[peers], np.nan)[:, win]
        if np.isnan(pv).all():
            continue
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            lo, hi, med = np.nanmin(pv, axis=0), np.nanmax(pv, axis=0), np.nanmedian(pv, axis=0)
            mad = np.nanmedian(np.abs(pv - med))  # pooled over the window: ten peers give a noisy MAD per step
        finite = pv[np.isfinite(pv)]
        if frame.kind == "rate":
            floor = 0.5 / sim.grid.step  # half an event per scrape
        elif np.all(finite == np.round(finite)):
            floor = 0.5 if metric == "up" else 1.0  # integer gauges move by whole units
        else:
            floor = 1e-9
        margin = 3 * 1.4826 * mad + 0.05 * np.abs(med) + floor
        mv = frame.values[i, win]
        outside = (mv > hi + margin) | (mv < lo - margin)
        vanished = np.isnan(mv) & ~np.isnan(med)
        run = np.convolve(vanished.astype(int), np.ones(4, dtype=int), mode="valid")  # missed scrapes come alone
        if bool((run == 4).any()):
            return True
        steps = max(steps, int(outside.sum()))
        if DEBUG:
            print(
                metric, frame.keys[i], np.flatnonzero(outside)[:20], mv[outside][:5], hi[outside][:5], lo[outside][:5]
            )
    return steps >= (2 if frame.kind == "rate" else 3)  # error counters rarely move at all when healthy


DROP = {
    "instance",
    "hostname",
    "Hostname",
    "exported_instance",
    "UUID",
    "gpu",
    "gpu_uuid",
    "gpu_index",
    "pci_bus_id",
    "agent_id",
    "device_id",
    "err_code",
    "err_msg",
}


def _entity(key: SeriesKey) -> tuple[tuple[str, str], ...]:
    """The labels that say what an entity is, not where: GPU 3 of one node is a peer of any GPU of another."""
    out = []
    for k, v in key.labels:
        if k in DROP or (k == "device" and v.startswith(("nvidia", "mlx5_"))):
            continue
        out.append((k, v))
    return tuple(out)


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_every_fault_leaves_its_signal(kind: str) -> None:
    sim, frames = _run(kind, _hours(kind))
    fault = next(f for f in sim.faults if f.kind == kind)
    missing = [m for m in KINDS[kind].signals if not _shows(sim, frames, fault, m)]
    assert not missing, f"{kind} on {fault.node} {fault.component}: no signal in {missing}"


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_without_the_fault_the_signal_is_absent(kind: str) -> None:
    faulty, _ = _run(kind, _hours(kind))
    control, frames = _run(None, _hours(kind))
    fault = next(f for f in faulty.faults if f.kind == kind)
    shown = [m for m in KINDS[kind].signals if _shows(control, frames, fault, m)]
    assert not shown, f"{kind}: the fault-free run already shows {shown} on {fault.node}"


def test_faults_land_on_distinct_training_nodes_with_sane_times() -> None:
    ats = np.linspace(0.2, 0.8, len(KIND_NAMES))
    sim = simulate(
        Scenario(
            "all",
            default_spec(40),
            hours=1.0,
            seed=5,
            faults=tuple(FaultRequest(k, at=float(a)) for k, a in zip(KIND_NAMES, ats, strict=True)),
        )
    )
    nodes = [f.node for f in sim.faults if f.node != "cluster"]
    assert len(nodes) == len(set(nodes))
    assert set(nodes) <= set(sim.layout.names[: sim.layout.spec.training])
    for f in sim.faults:
        assert sim.grid.start <= f.onset_ts <= f.end_ts <= sim.grid.end
        assert (f.failure_ts is None) == (not KINDS[f.kind].hard)
        assert set(f.expected) <= set(KINDS[f.kind].expected) and f.expected  # a variant names one of them


def test_hard_failures_stall_the_job_and_swap_in_a_spare() -> None:
    sim = simulate(
        Scenario(
            "swap",
            default_spec(8),
            hours=1.0,
            seed=3,
            faults=(FaultRequest("gpu_fallen_off_bus", at=0.3),),
            benign=QUIET,
        )
    )
    fault = sim.faults[0]
    assert fault.failure_ts is not None
    stalls = [e for e in sim.events if e.kind == "stall"]
    restarts = [e for e in sim.events if e.kind == "restart"]
    assert stalls and restarts and stalls[0].start_ts > fault.failure_ts
    spare = sim.layout.index(sim.layout.names[sim.layout.spares[0]])
    act = sim.src.act
    k = sim.grid.index(restarts[0].end_ts + 400)
    assert act.member[spare, k] and not act.member[sim.layout.index(fault.node), k]


def test_mttf_table_is_reproduced_and_interpolated() -> None:
    assert mttf_hours(8) == pytest.approx(47.7 * 24)
    assert mttf_hours(1024) == pytest.approx(7.9)
    assert mttf_hours(256) > mttf_hours(480) > mttf_hours(1024)
    assert mttf_hours(4096) < 7.9


def test_unknown_fault_kind_is_rejected_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown fault kind 'nvlnk'.*nvlink_xid"):
        FaultRequest("nvlnk")
