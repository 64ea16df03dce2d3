"""deploy/alertmanager/peerwatch.yml: valid for amtool, routes as documented, and its inhibit rules
working in a real Alertmanager on alerts as peerwatch sends them."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from alertmanager import Alertmanager, start_alertmanager
from peerwatch.alarms.delivery import iso
from services import require_binary

pytestmark = pytest.mark.services
CONFIG = Path(__file__).resolve().parents[1] / "deploy" / "alertmanager" / "peerwatch.yml"


def amtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([require_binary("amtool"), *args], capture_output=True, text=True, timeout=30)


def test_amtool_checks_the_config() -> None:
    done = amtool("check-config", str(CONFIG))
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("labels", "receiver"),
    [
        (["alertname=PeerwatchAlarm", "severity=critical", "node=gpu001"], "oncall-page"),
        (["alertname=PeerwatchAlarm", "severity=warning", "node=gpu001"], "oncall-chat"),
        (["alertname=PeerwatchBlind", "severity=critical", "instance=pw:8080"], "oncall-page"),
        (["alertname=PeerwatchSinkErrors", "severity=warning", "instance=pw:8080"], "oncall-chat"),
    ],
)
def test_routes(labels: list[str], receiver: str) -> None:
    done = amtool("config", "routes", "test", f"--config.file={CONFIG}", *labels)
    assert done.returncode == 0 and done.stdout.split() == [receiver], done.stdout + done.stderr


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Alertmanager]:
    """A real Alertmanager running the shipped configuration, its receivers pointed at a local hook."""
    text = re.sub(r"url: http://\S+", "url: {url}", CONFIG.read_text())
    am, hook = start_alertmanager(tmp_path_factory.mktemp("am-shipped"), text)
    try:
        yield am
    finally:
        am.service.stop()
        hook.shutdown()


def alarm(node: str, diagnosis: str, severity: str, ident: str) -> dict[str, Any]:
    """An alert as peerwatch's Alertmanager sink sends one."""
    now = time.time()
    labels = {"alertname": "PeerwatchAlarm", "cluster": "a", "node": node, "component": "gpu/1"}
    labels |= {"diagnosis": diagnosis, "severity": severity, "alarm_id": ident}
    return {"labels": labels, "startsAt": iso(now - 60), "endsAt": iso(now + 600)}


def test_an_unreachable_node_inhibits_its_other_alarms(shipped: Alertmanager) -> None:
    alerts = [
        alarm("gpu001", "node_unreachable", "critical", "a1"),
        alarm("gpu001", "nvlink", "critical", "a2"),  # the same node: a consequence
        alarm("gpu002", "nvlink", "critical", "a3"),  # another node: its own fault
    ]
    httpx.post(f"{shipped.url}/api/v2/alerts", json=alerts, timeout=5.0).raise_for_status()

    def states() -> dict[str, str] | None:
        got = {a["labels"]["alarm_id"]: a["status"]["state"] for a in shipped.alerts()}
        return got if len(got) == 3 and "unprocessed" not in got.values() else None

    assert shipped.wait("the alerts processed", states) == {"a1": "active", "a2": "suppressed", "a3": "active"}
