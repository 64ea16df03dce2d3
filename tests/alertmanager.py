"""A real Alertmanager for tests, with a webhook receiver that records every notification it sends.

Started by hand on a free loopback port with ``--cluster.listen-address=`` empty (it binds nothing
else), its storage under a temporary folder, and stopped by PID. Notifications are grouped per
``alarm_id`` with one-second waits, and resolved ones are sent too, so a test sees both.

Test modules import the fixture::

    from alertmanager import alertmanager  # noqa: F401
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from services import Service, require_binary, start_service

CONFIG = """\
route:
  receiver: hook
  group_by: [alarm_id]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs:
      - url: {url}
        send_resolved: true
"""


@dataclass
class Alertmanager:
    """A running Alertmanager and the notifications its webhook receiver got."""

    service: Service
    notifications: list[dict[str, Any]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.service.url

    def alerts(self) -> list[dict[str, Any]]:
        """``GET /api/v2/alerts``: the alerts Alertmanager holds as active (resolved ones are left out)."""
        resp = httpx.get(f"{self.url}/api/v2/alerts", timeout=5.0)
        resp.raise_for_status()
        return list(resp.json())

    def notified(self, alarm_id: str, status: str) -> list[dict[str, Any]]:
        """Webhook notifications of ``status`` (firing|resolved) that carried ``alarm_id``."""
        return [
            alert
            for n in list(self.notifications)
            for alert in n.get("alerts", [])
            if alert.get("status") == status and alert.get("labels", {}).get("alarm_id") == alarm_id
        ]

    def wait(self, what: str, check: Callable[[], Any], timeout: float = 30.0) -> Any:
        """Poll ``check`` until it returns something truthy."""
        deadline = time.monotonic() + timeout
        while True:
            got = check()
            if got:
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"alertmanager: {what} not seen after {timeout}s:\n{self.service.log_tail()}")
            time.sleep(0.2)


def _receiver(store: list[dict[str, Any]]) -> ThreadingHTTPServer:
    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            store.append(json.loads(body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def start_alertmanager(workdir: Path, config_text: str = CONFIG) -> tuple[Alertmanager, ThreadingHTTPServer]:
    """An Alertmanager with ``config_text`` (``{url}`` in it: the recording webhook receiver's URL)."""
    binary = require_binary("prometheus-alertmanager")
    notifications: list[dict[str, Any]] = []
    hook = _receiver(notifications)
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "alertmanager.yml"
    config.write_text(config_text.replace("{url}", f"http://127.0.0.1:{hook.server_address[1]}/hook"))
    argv = [
        binary,
        f"--config.file={config}",
        f"--storage.path={workdir / 'data'}",
        "--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
        "--log.level=warn",
    ]
    return Alertmanager(start_service("alertmanager", argv, "/-/ready", workdir), notifications), hook


@pytest.fixture(scope="module")
def alertmanager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Alertmanager]:
    """An Alertmanager for the module, its webhook notifications recorded."""
    am, hook = start_alertmanager(tmp_path_factory.mktemp("alertmanager"))
    try:
        yield am
    finally:
        am.service.stop()
        hook.shutdown()
