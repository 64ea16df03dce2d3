"""A synthetic live service of 1,000 nodes for the dashboard: its store, scores, groups and judged frames.

Shared by tests/test_dashboard_pages.py (what the pages show) and benchmarks/bench_dashboard.py
(how fast they answer).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from peerwatch.alarms.store import StepChanges, StoredAlarm
from peerwatch.catalog.load import Catalog
from peerwatch.detect.workload import WorkloadGroup
from peerwatch.engine import kind_by_catalog
from peerwatch.frames import FrameBuilder
from peerwatch.model import Alarm, Evidence, SeriesBlock, SeriesKey
from peerwatch.service import Service, config_from_dict
from peerwatch.service.clock import Clock
from peerwatch.service.metrics import Health

NODES, SPARES, GPUS, STEPS, STEP = 1000, 50, 8, 120, 30.0
LIGHT = 50  # nodes before the spares that run another job
END = 1_764_460_800.0


def name(i: int) -> str:
    return f"gpu{i:04d}"


def _buffer_blocks(rng: np.random.Generator) -> Iterator[SeriesBlock]:
    """An hour of three families on every node: a load gauge, GPU temperatures and an interrupt counter."""
    ts = END - STEP * np.arange(STEPS)[::-1] - 3.0
    for i in range(NODES):
        node = name(i)
        base = {"instance": f"{node}:9100", "job": "node-exporter"}
        load = 20 + rng.normal(0, 1, STEPS) + (30 * (ts > END - 900) if i == 7 else 0)
        yield SeriesBlock(SeriesKey.of("node_load1", base), ts, load, "gauge")
        yield SeriesBlock(
            SeriesKey.of("node_intr_total", base), ts, np.cumsum(rng.uniform(9e3, 1.1e4, STEPS)), "counter"
        )
        for g in range(GPUS):
            labels = {"Hostname": node, "gpu": str(g), "instance": f"{node}:9400", "job": "dcgm-exporter"}
            temp = 60 + rng.normal(0, 0.5, STEPS) + (15 if (i, g) == (7, 3) else 0)
            yield SeriesBlock(SeriesKey.of("DCGM_FI_DEV_GPU_TEMP", labels), ts, temp, "gauge")


def _alarm(i: int, k: int, open_: bool) -> StoredAlarm:
    node = name(i)
    ts = END - 3600 * (k + 1) - 30 * i
    ident = hashlib.sha1(f"{node}|{ts}".encode()).hexdigest()[:12]
    evidence = (
        Evidence("DCGM_FI_DEV_GPU_TEMP", (("Hostname", node), ("gpu", "3")), 75.0, 60.0, 30.0, "75 vs peers 60"),
        Evidence("node_load1", (("instance", f"{node}:9100"),), 50.0, 20.0, 12.0, "50 vs peers 20"),
        Evidence("DCGM_FI_DEV_XID_ERRORS", (("Hostname", node), ("gpu", "3")), 79.0, None, None, "XID 79"),
    )
    alarm = Alarm(ident, ts, node, "gpu/3", "thermal_throttle", "critical", 30.0, "swap", evidence, ts + 300,
                  None if open_ else ts + 1800)  # fmt: skip
    return StoredAlarm(alarm, 1.0, None if open_ else "engine", None if open_ else 2.0)


def big_service(state: Path) -> Service:
    """1,000 nodes (50 spares), 300 alarms of which 50 open, scores on every node, an hour of judged frames."""
    raw = {
        "source": {"tsdb": {"url": "http://127.0.0.1:1"}},
        "store": {"sqlite": str(state / "s.sqlite")},
        "window": "1h",
        "spares": [name(i) for i in range(NODES - SPARES, NODES)],
        "api": {"token": "t"},
    }
    service = Service(config_from_dict(raw), clock=Clock(start=END, origin=time.time()))
    rows = [_alarm(i, k, open_=k == 0 and i % 9 == 0) for k in range(2) for i in range(0, 450, 3)]
    service.store.commit(StepChanges(rows, tuple(name(i) for i in range(NODES - SPARES)), END, END))
    rng = np.random.default_rng(5)
    scores = {}
    for i in range(NODES - SPARES):
        for g in range(GPUS):
            scores[(name(i), f"gpu/{g}", "DCGM_FI_DEV_GPU_TEMP")] = float(rng.gamma(1.0, 1.5))
        scores[(name(i), "ib/mlx5_0:1", "node_infiniband_port_data_received_bytes_total")] = float(rng.gamma(1.0))
        scores[(name(i), "node", "node_load1")] = float(rng.gamma(1.0, 2.0))
    scores[(name(7), "gpu/3", "DCGM_FI_DEV_GPU_TEMP")] = 30.0
    busy = WorkloadGroup(1, 3, NODES - SPARES - LIGHT, "busy")
    light, idle = WorkloadGroup(2, 3, LIGHT, "other job"), WorkloadGroup(3, 3, SPARES, "idle")
    groups = {name(i): busy if i < NODES - SPARES - LIGHT else light for i in range(NODES - SPARES)}
    groups.update((name(i), idle) for i in range(NODES - SPARES, NODES))
    service.health = Health(scores=scores, groups=groups)
    catalog = Catalog.default()  # what the evaluations would have left for the plots and the catalogue page
    builder = FrameBuilder(30.0, kind_of=kind_by_catalog(catalog), node_labels_for=catalog.node_labels, now=END)
    service.evaluator.history.add(builder.add_all(_buffer_blocks(rng)).build())
    service.evaluated_until = END
    return service


def pages(service: Service) -> dict[str, str]:
    """Each page's URL (the alarm page: an open alarm's)."""
    open_id = service.store.alarms(open_only=True, node=name(0))[0].id
    return {
        "cluster": "/dashboard/",
        "alarms": "/dashboard/alarms",
        "alarm": f"/dashboard/alarms/{open_id}",
        "node": f"/dashboard/nodes/{name(7)}",
        "spares": "/dashboard/spares",
        "catalog": "/dashboard/catalog",
    }
