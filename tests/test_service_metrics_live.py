"""``/metrics`` stays valid exposition through a live evaluation: every body passes ``promtool check metrics``.

The demo (the simulator's exporters scraped live, the engine judging each step, an NVLink fault
alarmed) runs in a subprocess; ``/metrics`` is scraped over and over while it evaluates, until the
alarm is open, and each distinct body goes through the real promtool.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from services import free_port, require_binary

MIN_BODIES = 60
OPEN_NVLINK = re.compile(r'^peerwatch_open_alarms\{diagnosis="nvlink",severity="\w+"\} 1$', re.MULTILINE)


def promtool_check(promtool: str, body: str) -> str | None:
    """promtool's complaint about ``body`` (None: valid, lint included)."""
    done = subprocess.run([promtool, "check", "metrics"], input=body.encode(), capture_output=True, timeout=30)
    return None if done.returncode == 0 else (done.stdout + done.stderr).decode()


def test_every_metrics_body_during_a_live_evaluation_passes_promtool(tmp_path: Path) -> None:
    promtool = require_binary("promtool")
    port = free_port()
    log = tmp_path / "demo.log"
    argv = [sys.executable, "-m", "peerwatch.service", "demo", "--port", str(port), "--speed", "45", "--nodes", "8"]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    bodies: list[str] = []
    alarmed = False
    try:
        deadline = time.monotonic() + 120
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10.0) as client:
            while not (alarmed and len(bodies) >= MIN_BODIES):
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, f"{len(bodies)} bodies, alarmed {alarmed}:\n{log.read_text()}"
                try:
                    resp = client.get("/metrics")
                except httpx.TransportError:
                    time.sleep(0.2)
                    continue
                assert resp.status_code == 200, resp.text
                bodies.append(resp.text)
                alarmed = alarmed or OPEN_NVLINK.search(resp.text) is not None
                time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(20)

    distinct = list(dict.fromkeys(bodies))
    problems = {i: p for i, body in enumerate(distinct) if (p := promtool_check(promtool, body)) is not None}
    assert not problems, f"{len(problems)} of {len(distinct)} bodies rejected: {next(iter(problems.values()))}"
    last: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(distinct[-1]):
        for sample in family.samples:
            last.setdefault(sample.name, []).append(sample.value)
    assert last["peerwatch_evaluations_total"][0] > 10  # judged through the run, not just at its start
    assert last["peerwatch_anomaly_score"] and last["peerwatch_node_risk"] and last["peerwatch_build_info"] == [1]
    assert len(distinct) >= 10  # the values changed between scrapes: a live run
