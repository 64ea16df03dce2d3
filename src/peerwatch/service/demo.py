"""``peerwatch demo``: a simulated cluster's live exporters, the service scraping them, and the API.

Embedded defaults only: 16 nodes, 20x time, an NVLink fault whose precursor (the scheduler agent's
task count climbing) starts about 10 cluster minutes in and whose XID comes at 30; the first
alarm opens well within three wall minutes. State goes to a temporary folder unless told otherwise.
"""

from __future__ import annotations

import secrets
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from peerwatch.service.clock import Clock
from peerwatch.service.config import ServiceConfig, config_from_dict
from peerwatch.service.runner import Service
from peerwatch.simulate import FaultRequest, Scenario, Simulation, default_spec, simulate
from peerwatch.simulate.families import target_labels
from peerwatch.simulate.serve import LiveCluster, serve_in_thread
from peerwatch.simulate.targets import EXPORTERS

FAULT_NODE, FAULT_GPU = "gpu005", 3
FAILURE_MINUTES = 30.0
DEMO_HOURS = 4.0
SHARED_NODES = 3


@dataclass(frozen=True)
class DemoSettings:
    port: int = 8080
    nodes: int = 16
    speed: float = 20.0
    seed: int = 2
    base_port: int = 0  # 0: the first free range from 20000
    state: Path | None = None
    alertmanager: str | None = None


@dataclass
class Demo:
    """A running simulator and the configuration of the service that watches it."""

    sim: Simulation
    live: LiveCluster
    config: ServiceConfig
    clock: Clock
    stop_exporters: Callable[[], None]

    def story(self) -> str:
        """What will happen, in wall time."""
        fault = self.sim.faults[0]
        start, speed = self.sim.grid.start, self.live.speed
        onset = (fault.onset_ts - start) / speed
        fail = ((fault.failure_ts or fault.end_ts) - start) / speed
        return (
            f"{self.sim.layout.n} simulated DGX B200 nodes at {speed:g}x; an NVLink fault on {fault.node} "
            f"{fault.component}: first signs after ~{onset:.0f}s, the GPU fails after ~{fail:.0f}s."
        )


def free_range(count: int, start: int = 20000, stop: int = 60000) -> int:
    """The first port from which ``count`` consecutive loopback ports are free."""
    base = start
    while base + count < stop:
        for offset in range(count):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind(("127.0.0.1", base + offset))
                except OSError:
                    base += offset + 1
                    break
        else:
            return base
    raise RuntimeError(f"no {count} consecutive free ports between {start} and {stop}")


def demo_scenario(nodes: int, seed: int) -> Scenario:
    fault = FaultRequest("nvlink_xid", node=FAULT_NODE, gpu=FAULT_GPU, at=FAILURE_MINUTES / 60.0 / DEMO_HOURS)
    return Scenario("demo", default_spec(nodes), hours=DEMO_HOURS, seed=seed, faults=(fault,))


def start_demo(settings: DemoSettings, state: Path) -> Demo:
    """Start the simulator's exporters and build the service configuration that scrapes them."""
    sim = simulate(demo_scenario(settings.nodes, settings.seed))
    base = settings.base_port or free_range(len(EXPORTERS) * sim.layout.n)
    live = LiveCluster(sim, settings.speed, base)
    origin = time.time() - (time.monotonic() - live.t0)  # wall time of the simulation's first step
    _, stop = serve_in_thread(live)
    targets = [
        {
            "url": f"http://127.0.0.1:{live.port(n, x)}/metrics",
            "job": exporter.job,
            "labels": target_labels(exporter, sim.layout.names[n]),
        }
        for n in range(sim.layout.n)
        for x, exporter in enumerate(EXPORTERS)
    ]
    raw: dict[str, object] = {
        "source": {"scrape": {"targets": targets, "timeout": "5s"}},
        "step": "30s",
        "window": "1h",
        "store": {"sqlite": str(state / "peerwatch.sqlite")},
        "api": {"listen": f"127.0.0.1:{settings.port}", "token": secrets.token_urlsafe(16)},
        "spares": [sim.layout.names[i] for i in sim.layout.spares],
        "clock": {"start": sim.grid.start, "speed": settings.speed, "origin": origin},
    }
    if settings.alertmanager:
        raw["alertmanager"] = {"url": settings.alertmanager, "resend_interval": "10s"}
    config = config_from_dict(raw, "demo defaults")
    assert config.clock is not None
    clock = Clock(config.clock.start, origin, settings.speed)
    return Demo(sim, live, config, clock, stop)


def narrate(service: Service, echo: Callable[[str], None], stop: threading.Event, threshold: float = 6.0) -> None:
    """Print signals as they first cross ``threshold`` and alarms as they open and resolve, every
    second until ``stop``, and once more then (nothing already stored goes untold)."""
    seen_signals: set[tuple[str, str]] = set()
    states: dict[str, tuple[bool, str, str, str]] = {}
    start = service.clock.start
    while True:
        stopping = stop.wait(1.0)
        strong = [(k, v) for k, v in sorted(service.health.scores.items()) if v >= threshold]
        spread = Counter(metric for (_, _, metric), _ in strong)
        for (node, component, metric), score in strong:
            # A metric strong on several nodes at once is the cluster moving together, not a suspect.
            if spread[metric] < SHARED_NODES and (node, metric) not in seen_signals:
                seen_signals.add((node, metric))
                echo(f"[{_minute(service.clock.now(), start)}] signal  {node} {component} {metric}: score {score:.1f}")
        for s in reversed(service.store.alarms(limit=50)):
            a = s.alarm
            state = (s.open, a.component, a.diagnosis, a.severity)
            before = states.get(s.id)
            states[s.id] = state
            if before == state or (before is None and not s.open):
                continue
            verb = "resolved " if not s.open else "ALARM    " if before is None else "update   "
            when = a.ts if before is None else a.resolved_ts or a.updated_ts
            echo(
                f"[{_minute(when, start)}] {verb}{a.node} {a.component}: {a.diagnosis} ({a.severity}, {a.action}) "
                f"id {a.id}"
            )
        if stopping:
            return


def _minute(ts: float, start: float) -> str:
    return f"cluster t+{(ts - start) / 60:5.1f} min"
