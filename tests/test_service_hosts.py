"""The Host-header allow-list (issue 18.6): a name outside it is answered 421 before the API sees the
request, so a DNS-rebinding page cannot read the unauthenticated API; addresses and allowed names pass."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from peerwatch.service import Service, config_from_dict
from peerwatch.service.app import create_app
from peerwatch.service.clock import Clock
from peerwatch.service.config import ApiConfig
from peerwatch.service.hosts import AllowedHosts, HostGuard, allowed_hosts

TSDB = {"source": {"tsdb": {"url": "http://127.0.0.1:1"}}}


@pytest.mark.parametrize(
    ("host", "ok"),
    [
        ("localhost:8080", True),
        ("LOCALHOST.", True),
        ("127.0.0.1:8080", True),
        ("[::1]:8080", True),
        ("10.1.2.3", True),  # any address: it cannot be rebound
        ("peerwatch.example.com", True),  # api.url's host
        ("pw.internal:9000", True),  # api.listen's host
        ("evil.example", False),
        ("localhost.evil.example", False),
        ("127.0.0.1.nip.io", False),
        ("", False),
    ],
)
def test_the_default_list(host: str, ok: bool) -> None:
    api = ApiConfig(listen="pw.internal:9000", url="https://peerwatch.example.com/pw")
    assert allowed_hosts(api).permits(host) is ok


def test_the_default_knows_this_machine_and_a_setting_replaces_it() -> None:
    assert allowed_hosts(ApiConfig()).permits(f"{socket.gethostname()}:8080")
    chosen = allowed_hosts(ApiConfig(allowed_hosts=["*.corp.example", "grafana-proxy"]))
    assert chosen.permits("pw.corp.example") and chosen.permits("grafana-proxy:80")
    assert not chosen.permits("localhost") and not chosen.permits("corp.example.evil")
    assert AllowedHosts.of(["*"]).permits("anything.at.all")


def test_a_foreign_host_gets_421_and_reaches_nothing(tmp_path: Path) -> None:
    raw = {**TSDB, "store": {"sqlite": str(tmp_path / "s.sqlite")}}
    service = Service(config_from_dict(raw), clock=Clock(start=1.7e9, origin=time.time()))
    app = HostGuard(create_app(service, run=False), allowed_hosts(service.config.api))
    with TestClient(app, base_url="http://127.0.0.1:8080") as client:
        assert client.get("/api/v1/alarms").status_code == 200
        assert client.get("/api/v1/alarms", headers={"Host": "localhost:8080"}).status_code == 200
        rebound = client.get("/api/v1/alarms", headers={"Host": "attacker.example:8080"})
        assert rebound.status_code == 421
        assert rebound.json() == {
            "error": "this peerwatch does not answer for host 'attacker.example:8080' (setting api.allowed_hosts)",
            "status": 421,
        }
        assert "alarms" not in rebound.text
    service.store.close()


def test_serve_guards_the_real_server(tmp_path: Path) -> None:
    """``peerwatch serve`` wraps its app in the guard: the live server answers 421 for a foreign name."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "pw.yaml"
    config.write_text(
        "source:\n  tsdb: {url: 'http://127.0.0.1:1', timeout: 1s}\n"
        f"store: {{sqlite: {tmp_path / 's.sqlite'}}}\napi: {{listen: '127.0.0.1:{port}'}}\n"
    )
    cmd = [sys.executable, "-m", "peerwatch", "serve", "--config", str(config), "--log-level", "error"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}/api/v1/alarms"
        deadline = time.monotonic() + 60
        while True:
            try:
                first = httpx.get(url, timeout=2)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
                time.sleep(0.2)
        assert first.status_code == 200
        assert httpx.get(url, headers={"Host": "rebind.example"}, timeout=5).status_code == 421
        assert httpx.get(url, headers={"Host": f"localhost:{port}"}, timeout=5).status_code == 200
    finally:
        proc.terminate()
        proc.wait(30)
