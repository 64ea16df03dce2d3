"""scrape() against a real node_exporter, all-smi's real output served locally, and broken targets."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from peerwatch.model import SeriesBlock, SeriesKey
from peerwatch.sources.scrape import ScrapeResult, Target, scrape
from services import Service, free_port


class TextServer:
    """A loopback HTTP server answering every GET with ``respond()`` -> (status, body), after ``delay`` s."""

    def __init__(self, respond: Callable[[], tuple[int, bytes]], delay: float = 0.0) -> None:
        self.hits = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.hits += 1
                time.sleep(delay)
                status, body = respond()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}/metrics"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[..., TextServer]]:
    servers: list[TextServer] = []

    def start(body: bytes, status: int = 200, delay: float = 0.0) -> TextServer:
        servers.append(TextServer(lambda: (status, body), delay))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def by_name(result: ScrapeResult) -> dict[str, list[SeriesBlock]]:
    out: dict[str, list[SeriesBlock]] = {}
    for b in result.blocks:
        out.setdefault(b.key.name, []).append(b)
    return out


def health(result: ScrapeResult, name: str, instance: str) -> float:
    (block,) = [b for b in result.blocks if b.key.name == name and b.key.get("instance") == instance]
    assert len(block) == 1
    return float(block.values[0])


@pytest.mark.services
def test_node_exporter(node_exporter: Service) -> None:
    before = time.time()
    result = scrape([Target(node_exporter.url + "/metrics", job="node")])
    instance = node_exporter.url.removeprefix("http://")
    assert not result.problems, list(result.problems)
    assert health(result, "up", instance) == 1.0
    assert 0.0 < health(result, "scrape_duration_seconds", instance) < 5.0
    names = by_name(result)
    assert {"node_cpu_seconds_total", "node_memory_MemTotal_bytes", "node_load1", "node_uname_info"} <= set(names)
    cpu = names["node_cpu_seconds_total"]
    assert all(b.mtype == "counter" for b in cpu) and {b.key.get("mode") for b in cpu} >= {"idle", "user", "system"}
    (mem,) = names["node_memory_MemTotal_bytes"]
    assert mem.mtype == "gauge" and mem.values[0] > 1e8
    assert health(result, "scrape_samples_scraped", instance) == sum(
        len(b) for b in result.blocks if not b.key.name.startswith(("up", "scrape_"))
    )
    for b in result.blocks:  # every series labelled and stamped with the scrape time
        assert b.key.get("instance") == instance and b.key.get("job") == "node", b.key
        assert before <= b.timestamps[0] <= time.time()
    assert result.targets[0].up and result.targets[0].error is None


def test_closed_port_is_down_with_a_problem() -> None:
    url = f"http://127.0.0.1:{free_port()}/metrics"
    t = time.monotonic()
    result = scrape([Target(url, job="dcgm")], timeout=2.0)
    assert time.monotonic() - t < 2.0
    instance = url.removeprefix("http://").removesuffix("/metrics")
    assert health(result, "up", instance) == 0.0
    assert health(result, "scrape_samples_scraped", instance) == 0.0
    assert [p.where for p in result.problems] == [url]
    assert "ConnectError" in next(iter(result.problems)).message
    assert {b.key.name for b in result.blocks} == {"up", "scrape_duration_seconds", "scrape_samples_scraped"}


@pytest.mark.parametrize(
    ("status", "body", "why"),
    [
        (200, b"<html><body>Not metrics</body></html>\n<p>oops</p>\n", "not a metrics exposition"),
        (200, b"\x00\xff\x13binary{{{\n", "not a metrics exposition"),
        (404, b"404 page not found\n", "HTTP 404"),
        (500, b"boom", "HTTP 500"),
    ],
)
def test_garbage_is_down_with_a_problem(serve: Callable[..., TextServer], status: int, body: bytes, why: str) -> None:
    server = serve(body, status)
    result = scrape([Target(server.url)])
    assert health(result, "up", f"127.0.0.1:{server.port}") == 0.0
    assert any(why in p.message for p in result.problems), list(result.problems)
    assert result.targets[0].error is not None and why in result.targets[0].error


def test_all_smi_sample_parses_cleanly(serve: Callable[..., TextServer], shared_data: Path) -> None:
    text = (shared_data / "all-smi" / "sample-metrics-docker-cpu-only.prom").read_bytes()
    lines = [line for line in text.decode().splitlines() if line.strip() and not line.startswith("#")]
    server = serve(text)
    result = scrape([Target(server.url, job="all-smi", labels={"cluster": "c1"})])
    assert not result.problems, list(result.problems)
    instance = f"127.0.0.1:{server.port}"
    assert health(result, "up", instance) == 1.0
    assert health(result, "scrape_samples_scraped", instance) == len(lines)
    (cores,) = [
        b
        for b in result.blocks
        if b.key.name == "all_smi_cpu_core_count" and b.key.get("exported_instance") == "a8416cc9eadf"
    ]
    assert cores.values.tolist() == [3.0] and cores.mtype == "gauge"
    # all-smi's own instance label kept as exported_instance; empty cpu_model dropped, as Prometheus does.
    assert cores.key == SeriesKey.of(
        "all_smi_cpu_core_count",
        {
            "exported_instance": "a8416cc9eadf",
            "hostname": "a8416cc9eadf",
            "index": "0",
            "instance": instance,
            "job": "all-smi",
            "cluster": "c1",
        },
    )


def test_target_labels_and_own_timestamps(serve: Callable[..., TextServer]) -> None:
    body = (
        b"# TYPE x counter\n"
        b'x_total{job="inner",instance="in:1",exported_instance="older"} 5 1700000000123\n'
        b'x_total{cluster="own"} 7\n'
    )
    server = serve(body)
    result = scrape([Target(server.url, job="outer", labels={"cluster": "c1"})])
    assert not result.problems, list(result.problems)
    blocks = {b.key: b for b in result.blocks if b.key.name == "x_total"}
    instance = f"127.0.0.1:{server.port}"
    first = SeriesKey.of(
        "x_total",
        {
            "job": "outer",
            "exported_job": "inner",
            "instance": instance,
            "exported_instance": "older",  # the exposed label keeps its name, as in Prometheus;
            "exported_exported_instance": "in:1",  # the clashing one takes the first free name
            "cluster": "c1",
        },
    )
    second = SeriesKey.of("x_total", {"job": "outer", "instance": instance, "cluster": "c1", "exported_cluster": "own"})
    assert set(blocks) == {first, second}
    assert blocks[first].timestamps.tolist() == [1700000000.123] and blocks[first].mtype == "counter"
    assert blocks[second].timestamps[0] == result.targets[0].timestamp


@pytest.mark.services
def test_many_targets_concurrently(serve: Callable[..., TextServer], node_exporter: Service) -> None:
    slow = [serve(f'slow_metric{{n="{i}"}} {i}\n'.encode(), delay=0.5) for i in range(8)]
    closed = f"http://127.0.0.1:{free_port()}/metrics"
    targets = [
        *(Target(s.url, job="slow") for s in slow),
        Target(closed, job="gone"),
        Target(node_exporter.url + "/metrics", job="node"),
    ]
    t = time.monotonic()
    result = scrape(targets, timeout=5.0, concurrency=16)
    elapsed = time.monotonic() - t
    assert elapsed < 2.0, f"8 targets of 0.5 s each took {elapsed:.2f} s: not concurrent"
    assert [r.target for r in result.targets] == targets  # in target order
    assert [r.up for r in result.targets] == [True] * 8 + [False, True]
    values = sorted(b.values[0] for b in result.blocks if b.key.name == "slow_metric")
    assert values == [float(i) for i in range(8)]
    assert all(s.hits == 1 for s in slow)
    assert [p.where for p in result.problems] == [closed]


def test_no_targets() -> None:
    result = scrape([])
    assert result.blocks == [] and result.targets == [] and not result.problems


@pytest.mark.parametrize(
    ("url", "instance"),
    [
        ("http://gpu01:9400/metrics", "gpu01:9400"),
        ("http://gpu01/metrics", "gpu01:80"),
        ("https://gpu01/metrics", "gpu01:443"),
        ("http://[::1]:9100/metrics", "[::1]:9100"),
    ],
)
def test_instance_of_url(url: str, instance: str) -> None:
    assert Target(url).instance() == instance
    assert Target(url, labels={"instance": "named"}).target_labels() == {"instance": "named"}
