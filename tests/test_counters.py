"""Error counters and drop counters: what counts as new, and how much."""

from __future__ import annotations

import numpy as np

from framekit import make_frame
from peerwatch.catalog.load import Catalog
from peerwatch.detect.counters import CounterDetector, CounterSettings, counter_scores
from peerwatch.engine import context_of
from peerwatch.frames import Frame

START, STEP, STEPS, NODES = 1_764_460_800.0, 30.0, 200, 12


def counter_frame(name: str, labels: dict[str, str], ticks: dict[int, list[int]]) -> Frame:
    """A counter per node (rates already, as frames hold them): ``ticks[node]`` = steps with one increment."""
    rows = [{"instance": f"gpu{n:02d}:9100", **labels} for n in range(NODES)]
    values = np.zeros((NODES, STEPS))
    for node, steps in ticks.items():
        values[node, steps] = 1.0 / STEP
    return make_frame(name, rows, values, START, STEP, "rate")


def best(frame: Frame, node: str) -> float:
    ctx = context_of({frame.name: frame}, Catalog.default())
    return max((f.score for f in CounterDetector().scan(ctx, None)[0] if f.node == node), default=0.0)


def test_three_symbol_errors_in_a_burst_open_but_dropped_packets_alone_never_do() -> None:
    burst = {3: [120, 124, 128]}
    ib = counter_frame("node_infiniband_symbol_error_total", {"device": "mlx5_0", "port": "1"}, burst)
    assert best(ib, "gpu03") >= 6  # the policy's counter_open
    drops = counter_frame("node_network_receive_drop_total", {"device": "direct0"}, burst)
    assert 2.5 <= best(drops, "gpu03") < 6
    many = counter_frame("node_network_receive_drop_total", {"device": "direct0"}, {3: list(range(120, 136, 2))})
    assert 2.5 <= best(many, "gpu03") < 6  # drops without errors or link changes are no dropout


def test_an_entity_that_always_ticked_is_judged_against_its_own_habit() -> None:
    habit = list(range(5, STEPS, 9))  # a tick every 9 steps, for hours: two in every window
    frame = counter_frame("node_infiniband_symbol_error_total", {"device": "mlx5_0", "port": "1"}, {4: habit})
    late = [
        f
        for f in CounterDetector().scan(context_of({frame.name: frame}, Catalog.default()), None)[0]
        if f.ts > START + 60 * STEP
    ]
    assert max((f.score for f in late), default=0.0) < 6
    faster = habit + list(range(150, 170, 2))  # its rate changes: news
    frame = counter_frame("node_infiniband_symbol_error_total", {"device": "mlx5_0", "port": "1"}, {4: faster})
    assert best(frame, "gpu04") >= 6


def test_nothing_is_scored_before_a_base_rate_is_known() -> None:
    up = np.zeros((4, 40))
    up[0, [3, 5, 7]] = 1.0
    score, _, _ = counter_scores(up, np.zeros(4, dtype=np.int64), CounterSettings())
    assert (score[:, :20] == 0).all()


def test_the_loopback_and_virtual_interfaces_are_not_watched() -> None:
    for device in ("lo", "veth1a2b3c", "docker0", "cni0", "flannel.1", "br-4f2a", "tun0", "vxlan.calico"):
        for name in ("node_network_receive_errs_total", "node_network_receive_drop_total"):
            frame = counter_frame(name, {"device": device}, {2: list(range(100, 130))})
            assert best(frame, "gpu02") == 0.0, (device, name)
