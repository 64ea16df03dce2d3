"""End to end: the simulator's live exporters pushed into a real VictoriaMetrics, ``peerwatch serve``
reading it, a real Alertmanager receiving; the server is killed with SIGKILL mid-run and restarted.

The run is time-compressed (60x) on a replay clock shared by the simulator and the server. The
alarms the server keeps must be exactly those the offline engine finds in the same data: the
restart must neither lose nor duplicate one, and Alertmanager must hear of each once (an escalation
updates the alert; it does not page again).
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from alertmanager import Alertmanager, alertmanager  # noqa: F401
from peerwatch.engine import analyze_frames, load_frames
from peerwatch.service.demo import free_range
from peerwatch.simulate import FaultRequest, Scenario, Simulation, default_spec, simulate
from peerwatch.simulate.serve import LiveCluster, serve_in_thread
from services import VictoriaMetrics, free_port, start_victoria_metrics

SPEED = 60.0
TOKEN = "s3cret-token"
pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def vm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VictoriaMetrics]:
    """A VictoriaMetrics of this module's own: the server reads every series in it."""
    server = start_victoria_metrics(tmp_path_factory.mktemp("vm-live"))
    try:
        yield server
    finally:
        server.service.stop()


@pytest.fixture(scope="module")
def sim() -> Simulation:
    fault = FaultRequest("nvlink_xid", node="gpu003", gpu=2, at=0.5)  # precursor from ~9 min, XID at 30 min
    return simulate(Scenario("live", default_spec(10), hours=1.0, seed=2, faults=(fault,)))


class Server:
    """``python -m peerwatch.service serve`` in a subprocess."""

    def __init__(self, config: Path, port: int, log: Path) -> None:
        self.config, self.url, self.log = config, f"http://127.0.0.1:{port}", log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            argv = [sys.executable, "-m", "peerwatch.service", "serve", "--config", str(self.config)]
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ})
        self.wait("the API to answer", lambda: self.get("/healthz") is not None, 30)

    def get(self, path: str) -> Any:
        try:
            resp = httpx.get(self.url + path, timeout=5.0)
        except httpx.TransportError:
            return None
        return resp.json() if resp.status_code == 200 else None

    def alarms(self) -> list[dict[str, Any]]:
        return list((self.get("/api/v1/alarms") or {}).get("alarms", []))

    def wait(self, what: str, check: Callable[[], Any], timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc is not None and self.proc.poll() is None, f"server exited:\n{self.log.read_text()[-3000:]}"
            got = check()
            if got:
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} not seen after {timeout}s; server log:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.25)

    def kill(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        self.proc.wait(15)


@pytest.fixture
def running(sim: Simulation, vm: VictoriaMetrics, alertmanager: Alertmanager, tmp_path: Path) -> Iterator[Server]:  # noqa: F811
    live = LiveCluster(sim, SPEED, free_range(4 * sim.layout.n))
    origin = time.time() - (time.monotonic() - live.t0)
    _, stop_exporters = serve_in_thread(live, push_url=vm.url)
    with httpx.Client() as client:  # data first: a server started on an empty TSDB is rightly blind
        vm.wait_visible(client, "node_load1", 15.0)
    port = free_port()
    config = {
        "source": {"tsdb": {"url": vm.url, "kind": "victoriametrics", "delay": "2m"}},
        "step": "30s",
        "window": "1h",
        "stale_steps": 8,
        "store": {"sqlite": "state.sqlite"},
        "alertmanager": {"url": alertmanager.url, "resend_interval": "5s"},
        "api": {"listen": f"127.0.0.1:{port}", "token": TOKEN},
        "clock": {"start": sim.grid.start, "speed": SPEED, "origin": origin},
    }
    path = tmp_path / "peerwatch.yaml"
    path.write_text(yaml.safe_dump(config))
    server = Server(path, port, tmp_path / "serve.log")
    server.start()
    try:
        yield server
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.kill(signal.SIGTERM)
        stop_exporters()


def test_kill_9_and_restart_lose_and_duplicate_nothing(
    running: Server,
    sim: Simulation,
    vm: VictoriaMetrics,
    alertmanager: Alertmanager,  # noqa: F811
) -> None:
    fault = sim.faults[0]
    assert fault.failure_ts is not None

    # The precursor (the agent's task count) opens an alarm before the XID.
    first = running.wait(
        "a precursor alarm on gpu003", lambda: [a for a in running.alarms() if a["node"] == "gpu003"], 40
    )[0]
    assert first["ts"] < fault.failure_ts and first["diagnosis"] == "nvlink" and first["status"] == "open"
    active = alertmanager.wait(
        "the alert", lambda: [a for a in alertmanager.alerts() if a["labels"]["alarm_id"] == first["id"]]
    )
    labels = active[0]["labels"]
    assert (labels["node"], labels["component"], labels["diagnosis"]) == ("gpu003", first["component"], "nvlink")
    assert labels["severity"] == first["severity"] and "evidence" in active[0]["annotations"]

    running.kill(signal.SIGKILL)
    running.start()

    # The XID is the same fault: the precursor's alarm goes on (escalated in place where its view
    # changed), never resolved and re-opened.
    def past_failure() -> list[dict[str, Any]]:
        until = running.get("/healthz").get("evaluated_until") or 0.0
        return running.alarms() if until >= fault.failure_ts + 120 else []

    alarms = running.wait("the steps after the failure judged", past_failure, 40)
    health = running.get("/healthz")
    assert health["status"] == "ok", health
    running.kill(signal.SIGTERM)

    assert not [a for a in alarms if a["node"] == "peerwatch"], "the source was never blind"
    mine = [a for a in alarms if a["node"] == "gpu003"]
    assert [(a["id"], a["ts"], a["resolved_ts"]) for a in mine] == [(first["id"], first["ts"], None)], mine
    spans: dict[str, list[tuple[float, float]]] = {}
    for a in alarms:
        spans.setdefault(a["node"], []).append((a["ts"], a["resolved_ts"] or float("inf")))
    for node, periods in spans.items():
        periods.sort()
        assert all(b[0] >= a[1] for a, b in itertools.pairwise(periods)), (node, periods)

    # Exactly what the offline engine finds in the same data up to the last evaluated step.
    until = health["evaluated_until"]
    frames = load_frames([vm.url], start=sim.grid.start - 1, end=until, now=until)
    offline = {(a.node, a.ts) for a in analyze_frames(frames)}
    assert {(a["node"], a["ts"]) for a in alarms} == offline

    # Alertmanager heard of the alarm once, firing, and holds it still: no second page for the XID.
    assert len(alertmanager.notified(first["id"], "firing")) == 1
    assert not alertmanager.notified(first["id"], "resolved")
    assert first["id"] in {a["labels"]["alarm_id"] for a in alertmanager.alerts()}
