"""``peerwatch demo`` end to end: simulator exporters scraped live, an alarm via the API, a clean Ctrl-C."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from services import free_port


def _get(url: str) -> Any:
    try:
        resp = httpx.get(url, timeout=5.0)
    except httpx.TransportError:
        return None
    return resp.json() if resp.status_code == 200 else None


def test_demo_raises_the_fault_alarm_and_stops_cleanly(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "demo.log"
    argv = [sys.executable, "-m", "peerwatch.service", "demo", "--port", str(port), "--speed", "45", "--nodes", "8"]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 45
        alarm = None
        while alarm is None:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"no nvlink alarm on gpu005 in 45 s:\n{log.read_text()}"
            alarms = (_get(f"{url}/api/v1/alarms") or {}).get("alarms", [])
            # The diagnosis settles within the first minutes of an alarm (cause first, symptoms later).
            alarm = next((a for a in alarms if a["node"] == "gpu005" and a["diagnosis"] == "nvlink"), None)
            time.sleep(0.5)
        assert alarm["diagnosis"] == "nvlink" and alarm["component"] == "gpu/3", alarm
        assert not [a for a in alarms if a["node"] not in ("gpu005", "peerwatch")], alarms

        # The printed token acknowledges it; without it the API refuses.
        token = re.search(r"token\s+(\S+)", log.read_text())
        assert token is not None, log.read_text()
        ack = f"{url}/api/v1/alarms/{alarm['id']}/acknowledge"
        assert httpx.post(ack, json={"by": "newcomer"}).status_code == 401
        done = httpx.post(ack, json={"by": "newcomer"}, headers={"Authorization": f"Bearer {token.group(1)}"})
        assert done.status_code == 200 and done.json()["status"] == "acknowledged", done.text
        nodes = {n["node"]: n for n in _get(f"{url}/api/v1/nodes")["nodes"]}
        assert nodes["gpu005"]["status"] == "alarm" and nodes["gpu008"]["spare"] == "available"
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(20)
    text = log.read_text()
    assert (
        code == 0 and re.search(r"(ALARM|update)  +gpu005 gpu/3: nvlink", text) and "peerwatch demo stopped" in text
    ), text
    assert "Traceback" not in text, text
