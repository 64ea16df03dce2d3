"""Live exporters: every node's four exporters as ``/metrics`` endpoints on 127.0.0.1, time-compressed.

Addressing: node ``i`` (0-based, in name order) and exporter ``x`` (0 node_exporter, 1 dcgm-exporter,
2 all-smi, 3 Backend.AI agent) listen on ``base_port + 4*i + x``; ``GET /`` on any port lists the
map. Simulated time runs ``speed`` times faster than wall time from the run's start; at the end
the last step is served. A scrape that names its data time (``DATA_TIME_HEADER``, sent by
peerwatch's own scraper on a compressed clock) gets that time's step. A target that the run has
down answers 503; a node that is unreachable closes connections without an answer. With
``push_url``, each step is also pushed to VictoriaMetrics' ``/api/v1/import/prometheus`` with
simulated timestamps.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import numpy as np

from peerwatch.model import SeriesKey
from peerwatch.promtext import escape_help, format_value
from peerwatch.simulate.exposition import series_text
from peerwatch.simulate.recording import Simulation
from peerwatch.simulate.targets import EXPORTERS
from peerwatch.sources.scrape import DATA_TIME_HEADER

DATA_HEADER = DATA_TIME_HEADER.lower().encode()


@dataclass
class _Target:
    """The series of one (node, exporter): per family its header and rows."""

    families: list[tuple[str, list[str], np.ndarray, np.ndarray | None]] = field(default_factory=list)


class LiveCluster:
    """Pre-computed series of a simulation, rendered per target and step on demand."""

    def __init__(self, sim: Simulation, speed: float = 10.0, base_port: int = 20000) -> None:
        self.sim, self.speed, self.base_port = sim, speed, base_port
        self.t0 = time.monotonic()
        x = len(EXPORTERS)
        self.targets = [[_Target() for _ in range(x)] for _ in range(sim.layout.n)]
        for ss in sim.series():
            if ss.exporter < 0:
                continue  # `up` is Prometheus' own, not an exporter's
            header = f"# HELP {ss.name} {escape_help(ss.help)}\n# TYPE {ss.name} {ss.mtype}\n"
            rows: dict[int, list[int]] = {}
            for s, n in enumerate(ss.nodes.tolist()):
                rows.setdefault(n, []).append(s)
            for n, idx in rows.items():
                keys = [series_text(SeriesKey(ss.name, self._own(ss.labels[s]))) for s in idx]
                present = None if ss.present is None else ss.present[idx]
                self.targets[n][ss.exporter].families.append((header, keys, ss.values[idx], present))

    @staticmethod
    def _own(labels: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
        """Labels as the exporter itself exposes them: Prometheus adds instance/job when it scrapes."""
        own = [(k, v) for k, v in labels if k not in ("instance", "job", "service_group")]
        return tuple(sorted(("instance", v) if k == "exported_instance" else (k, v) for k, v in own))

    def step(self, now: float | None = None) -> int:
        """The simulated step at wall time ``now``."""
        elapsed = ((time.monotonic() if now is None else now) - self.t0) * self.speed
        return int(min(self.sim.grid.steps - 1, max(0, elapsed // self.sim.grid.step)))

    def step_for(self, request: bytes) -> int:
        """The step a scrape asks for: its ``DATA_TIME_HEADER`` (peerwatch's own scraper on a compressed
        clock), else the step of the moment (Prometheus, curl)."""
        for line in request.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == DATA_HEADER:
                try:
                    ts = float(value)
                except ValueError:
                    break
                grid = self.sim.grid
                return int(min(grid.steps - 1, max(0, (ts - grid.start) // grid.step)))
        return self.step()

    def port(self, node: int, exporter: int) -> int:
        return self.base_port + len(EXPORTERS) * node + exporter

    def render(self, node: int, exporter: int, k: int) -> str | None:
        """The target's exposition at step ``k``; None when it is down at that step."""
        if not self.sim.schedule.ok[node, exporter, k]:
            return None
        parts = []
        for header, keys, values, present in self.targets[node][exporter].families:
            lines = [
                f"{key} {format_value(v)}"
                for key, v, p in zip(
                    keys,
                    values[:, k].tolist(),
                    [True] * len(keys) if present is None else present[:, k].tolist(),
                    strict=True,
                )
                if p
            ]
            if lines:
                parts.append(header + "\n".join(lines) + "\n")
        return "".join(parts)

    def index(self) -> str:
        rows = [
            f"{self.sim.layout.names[n]} {EXPORTERS[x].job} http://127.0.0.1:{self.port(n, x)}/metrics"
            for n in range(self.sim.layout.n)
            for x in range(len(EXPORTERS))
        ]
        return "\n".join(rows) + "\n"

    async def _handle(
        self, node: int, exporter: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            request = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.close()
            return
        k = self.step_for(request)
        path = request.split(b" ", 2)[1] if request.count(b" ") >= 2 else b"/"
        if not self.sim.schedule.ok[node, :, k].any():  # the whole node is unreachable
            writer.close()
            return
        body = self.index() if path == b"/" else self.render(node, exporter, k)
        status = "200 OK" if body is not None else "503 Service Unavailable"
        data = (body or "exporter unavailable\n").encode()
        head = f"HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {len(data)}\r\n"
        writer.write(head.encode() + b"Connection: close\r\n\r\n" + data)
        try:
            await writer.drain()
        finally:
            writer.close()

    async def run(self, stop: asyncio.Event, push_url: str | None = None) -> None:
        """Listen on every target's port until ``stop`` is set."""
        servers = []
        for n in range(self.sim.layout.n):
            for x in range(len(EXPORTERS)):
                handler = self._handler(n, x)
                servers.append(await asyncio.start_server(handler, "127.0.0.1", self.port(n, x)))
        pusher = asyncio.create_task(self._push(push_url, stop)) if push_url else None
        await stop.wait()
        for srv in servers:
            srv.close()
        if pusher is not None:
            await pusher

    def _handler(self, n: int, x: int) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        return lambda r, w: self._handle(n, x, r, w)

    async def _push(self, url: str, stop: asyncio.Event) -> None:
        import httpx

        sent = -1
        async with httpx.AsyncClient(timeout=10.0) as client:
            while not stop.is_set():
                k = self.step()
                if k != sent:
                    ms = int(self.sim.grid.times[k] * 1000)
                    body = "".join(
                        "".join(f"{line} {ms}\n" for line in text.splitlines() if line and not line.startswith("#"))
                        for n in range(self.sim.layout.n)
                        for x in range(len(EXPORTERS))
                        if (text := self.render(n, x, k)) is not None
                    )
                    await client.post(url.rstrip("/") + "/api/v1/import/prometheus", content=body.encode())
                    sent = k
                await asyncio.sleep(min(1.0, self.sim.grid.step / self.speed / 2))


def serve_in_thread(live: LiveCluster, push_url: str | None = None) -> tuple[threading.Thread, Callable[[], None]]:
    """Run the exporters on a background thread; returns the thread and a function that stops it."""
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    ready = threading.Event()

    def main() -> None:
        asyncio.set_event_loop(loop)

        async def go() -> None:
            task = asyncio.create_task(live.run(stop, push_url))
            await asyncio.sleep(0)
            ready.set()
            await task

        loop.run_until_complete(go())
        loop.close()

    thread = threading.Thread(target=main, name="peerwatch-simulate-serve", daemon=True)
    thread.start()
    ready.wait(10)

    def halt() -> None:
        loop.call_soon_threadsafe(stop.set)

    return thread, halt


def serve_forever(
    sim: Simulation, speed: float, base_port: int, push_url: str | None, echo: Callable[[str], None]
) -> None:
    """Serve until interrupted (Ctrl-C)."""
    live = LiveCluster(sim, speed, base_port)
    last = live.port(sim.layout.n - 1, len(EXPORTERS) - 1)
    echo(
        f"serving {sim.layout.n} nodes x {len(EXPORTERS)} exporters on 127.0.0.1:{base_port}-{last} at {speed}x; "
        f"port = {base_port} + 4*node_index + exporter (0 node, 1 dcgm, 2 all-smi, 3 backend.ai)"
    )
    thread, stop = serve_in_thread(live, push_url)
    try:
        while thread.is_alive():
            thread.join(0.5)
    except KeyboardInterrupt:
        stop()
        thread.join(5)
