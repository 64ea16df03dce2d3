"""TSDBClient against a real VictoriaMetrics and a real Prometheus holding the same data.

The data look like dcgm-exporter's: 3 nodes x 2 GPUs, a gauge, a 3-decimal gauge and a counter
with a reset, 2 h at 30 s, each target with its own phase, a few ms of jitter and missed scrapes.
Values are ones VictoriaMetrics stores exactly (it keeps decimal mantissas, not float bits).
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pytest

from peerwatch.model import SeriesBlock, SeriesKey
from peerwatch.sources.tsdb import TSDBClient, TSDBError, VMFormat
from peerwatch.sources.tsdb_plan import split_selector, time_windows, with_matcher
from services import Service, StartError, VictoriaMetrics, free_port, require_binary, start_service

pytestmark = pytest.mark.services

T0_MS = 1_700_000_000_000
STEP_MS = 30_000
STEPS = 240  # 2 h
START, END = T0_MS / 1000.0, (T0_MS + STEPS * STEP_MS) / 1000.0
SELECTOR = '{__name__=~"DCGM_.*",dataset="pwtest"}'
Expected = dict[SeriesKey, tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]


def make_dataset() -> Expected:
    """Series key -> (timestamps in ms, values), deterministic."""
    rng = np.random.default_rng(20241130)
    out: Expected = {}
    for n, node in enumerate(["gpu01", "gpu02", "gpu03"]):
        host_label = "hostname" if n == 2 else "Hostname"  # newer dcgm-exporter on one node
        phase = 1_000 + n * 7_311
        for gpu in range(2):
            jitter = rng.integers(-4, 5, STEPS)
            ts = T0_MS + phase + np.arange(STEPS) * STEP_MS + jitter
            keep = np.ones(STEPS, dtype=bool)
            keep[[37, 38]] = n != 0  # gpu01 missed two scrapes
            labels = {
                "gpu": str(gpu),
                "UUID": f"GPU-{n:02d}{gpu:02d}-a",
                host_label: node,
                "instance": f"{node}:9400",
                "job": "dcgm",
                "dataset": "pwtest",
            }
            temp = rng.integers(40, 80, STEPS).astype(np.float64)
            power = np.round(rng.uniform(80.0, 400.0, STEPS), 3)
            energy = np.cumsum(rng.integers(1_000, 9_000, STEPS)).astype(np.float64) + 1e9
            if (n, gpu) == (1, 1):
                energy[150:] -= energy[149]  # counter reset (driver reload)
            temp_keep = keep.copy()
            if (n, gpu) == (2, 0):
                temp_keep[200] = False
            for name, values, k in [
                ("DCGM_FI_DEV_GPU_TEMP", temp, temp_keep),
                ("DCGM_FI_DEV_POWER_USAGE", power, keep),
                ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", energy, keep),
            ]:
                out[SeriesKey.of(name, labels)] = (ts[k], values[k])
    return out


DATASET = make_dataset()
# Samples on window edges and one ms either side: a read split into 60 s windows must see each once.
EDGES = SeriesKey.of("pwtest_edges", {"dataset": "pwtest"})
EDGES_MS = np.array(sorted({T0_MS + k * 60_000 + d for k in range(11) for d in (-1, 0, 1)} - {T0_MS - 1}))
EDGE_DATA: Expected = {EDGES: (EDGES_MS, np.arange(len(EDGES_MS), dtype=np.float64))}


def vm_jsonl(data: Expected) -> list[bytes]:
    return [
        orjson.dumps({"metric": {"__name__": k.name, **k.label_dict()}, "values": v.tolist(), "timestamps": t.tolist()})
        for k, (t, v) in data.items()
    ]


def openmetrics(data: Expected) -> str:
    lines: list[str] = []
    for key, (ts, values) in data.items():
        series = str(key)
        lines.extend(
            f"{series} {_om(v)} {t // 1000}.{t % 1000:03d}" for t, v in zip(ts.tolist(), values.tolist(), strict=True)
        )
    return "\n".join([*lines, "# EOF", ""])


def _om(value: float) -> str:
    """OpenMetrics spelling of a float: repr is shortest round-trip, except for NaN and infinities."""
    return {"nan": "NaN", "inf": "+Inf", "-inf": "-Inf"}.get(repr(value), repr(value))


def collect(blocks: Iterator[SeriesBlock]) -> Expected:
    """Blocks joined per series (a split read gives several per series), checking time order."""
    parts: dict[SeriesKey, list[SeriesBlock]] = {}
    for b in blocks:
        parts.setdefault(b.key, []).append(b)
    out: Expected = {}
    for key, bs in parts.items():
        ts_ms = np.rint(np.concatenate([b.timestamps for b in bs]) * 1000).astype(np.int64)
        assert np.all(np.diff(ts_ms) > 0), f"{key}: samples out of order or repeated"
        out[key] = (ts_ms, np.concatenate([b.values for b in bs]))
    return out


def assert_exact(got: Expected, want: Expected) -> None:
    assert set(got) == set(want), f"missing {set(want) - set(got)}; extra {set(got) - set(want)}"
    for key, (ts, values) in want.items():
        assert np.array_equal(got[key][0], ts), f"{key}: timestamps differ"
        assert got[key][1].tobytes() == values.tobytes(), f"{key}: values differ"


@pytest.fixture(scope="module")
def vm(victoria_metrics: VictoriaMetrics) -> VictoriaMetrics:
    victoria_metrics.import_jsonl(vm_jsonl({**DATASET, **EDGE_DATA}), probe=SELECTOR)
    return victoria_metrics


SPECIAL = SeriesKey.of("pwtest_special", {"dataset": "pwtest"})


@pytest.fixture(scope="module")
def prom(prometheus_factory: Callable[..., Service]) -> Service:
    special_ts = np.array([T0_MS + 5, T0_MS + 30_005, T0_MS + 60_005])
    text = openmetrics({**DATASET, **EDGE_DATA, SPECIAL: (special_ts, np.array([np.nan, np.inf, -np.inf]))})
    return prometheus_factory(text, name="prometheus-tsdb")


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_victoria_read_is_exact(vm: VictoriaMetrics, fmt: VMFormat) -> None:
    with TSDBClient(vm.url, vm_format=fmt) as client:
        assert client.kind == "victoriametrics"
        got = collect(client.read([SELECTOR], START, END))
        assert not client.problems, list(client.problems)
    assert_exact(got, DATASET)


def test_prometheus_read_is_exact(prom: Service) -> None:
    with TSDBClient(prom.url) as client:
        assert client.kind == "prometheus"
        got = collect(client.read([SELECTOR], START, END))
        assert not client.problems, list(client.problems)
    assert_exact(got, DATASET)


# 2: by UUID, then by __name__ regexes; 6: by __name__; 13: by hostname, absent ("") or not.
@pytest.mark.parametrize("max_series", [2, 6, 13])
@pytest.mark.parametrize("server", ["vm-csv", "vm-json", "prometheus"])
def test_split_read_by_time_and_series_is_exact(
    vm: VictoriaMetrics, prom: Service, server: str, max_series: int
) -> None:
    url = prom.url if server == "prometheus" else vm.url
    fmt: VMFormat = "json" if server == "vm-json" else "csv"
    # 1001 s windows fall anywhere between samples; 18 series, at most max_series per request.
    with TSDBClient(url, window=1001.0, max_series=max_series, vm_format=fmt) as split:
        got = collect(split.read([SELECTOR], START, END))
        assert not split.problems, list(split.problems)
    plan = split_selector(SELECTOR, [{"__name__": k.name, **k.label_dict()} for k in DATASET], max_series)
    assert len(plan) > 1 and all(len(group) <= max_series for _, group in plan)
    assert split.requests == 2 + len(plan) * 8  # kind, series, then each selector in 8 windows
    assert_exact(got, DATASET)


def test_read_bounds_are_inclusive(vm: VictoriaMetrics, prom: Service) -> None:
    key = next(iter(DATASET))
    ts, values = DATASET[key]
    sel = f'{key.name}{{UUID="{key.get("UUID")}"}}'
    for url in (vm.url, prom.url):
        with TSDBClient(url, window=60.0) as client:
            got = collect(client.read([sel], ts[3] / 1000, ts[10] / 1000))
        assert np.array_equal(got[key][0], ts[3:11]), url
        assert got[key][1].tobytes() == values[3:11].tobytes(), url


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_samples_on_window_edges_come_once(vm: VictoriaMetrics, prom: Service, fmt: VMFormat) -> None:
    for url in (vm.url, prom.url):
        with TSDBClient(url, window=60.0, vm_format=fmt) as client:
            got = collect(client.read(["pwtest_edges"], START, START + 600))
        assert_exact(got, {EDGES: (EDGES_MS[:-1], EDGE_DATA[EDGES][1][:-1])})


def test_prometheus_special_values(prom: Service) -> None:
    with TSDBClient(prom.url) as client:
        got = collect(client.read(['pwtest_special{dataset="pwtest"}'], START, END))
    values = got[SPECIAL][1]
    assert np.isnan(values[0]) and values[1] == np.inf and values[2] == -np.inf


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_victoria_infinities(vm: VictoriaMetrics, fmt: VMFormat) -> None:
    # VictoriaMetrics drops NaN on import, and writes +Inf unquoted (not JSON) in its JSON export.
    key = SeriesKey.of("pwtest_inf", {"dataset": "pwtest"})
    body = "".join(f"{key} {v} {T0_MS + i * STEP_MS}\n" for i, v in enumerate(["1.5", "+Inf", "-Inf"]))
    assert httpx.post(f"{vm.url}/api/v1/import/prometheus", content=body).status_code == 204
    with httpx.Client() as http:
        vm.wait_visible(http, "pwtest_inf", timeout=15)
    with TSDBClient(vm.url, vm_format=fmt) as client:
        got = collect(client.read(["pwtest_inf"], START, END))
        assert not client.problems, list(client.problems)
    assert got[key][1].tolist() == [1.5, np.inf, -np.inf]


@pytest.mark.parametrize("which", ["vm", "prometheus"])
def test_metadata_and_promql(vm: VictoriaMetrics, prom: Service, which: str) -> None:
    url = vm.url if which == "vm" else prom.url
    with TSDBClient(url) as client:
        assert {"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE"} <= set(client.metric_names())
        assert client.label_values("instance", 'DCGM_FI_DEV_GPU_TEMP{dataset="pwtest"}') == [
            "gpu01:9400",
            "gpu02:9400",
            "gpu03:9400",
        ]
        series = client.series('DCGM_FI_DEV_GPU_TEMP{dataset="pwtest"}', START, END)
        assert sorted(series, key=str) == sorted((k for k in DATASET if k.name == "DCGM_FI_DEV_GPU_TEMP"), key=str)
        at = START + 3600
        vector = client.query('count(DCGM_FI_DEV_GPU_TEMP{dataset="pwtest"})', at)
        assert [b.values.tolist() for b in vector] == [[6.0]]
        assert vector[0].timestamps.tolist() == [at]
        matrix = client.query_range('max(DCGM_FI_DEV_GPU_TEMP{dataset="pwtest"})', START + 60, START + 600, 60)
        assert len(matrix) == 1 and len(matrix[0]) == 10
        assert client.query("scalar(vector(2.5))", at)[0].values.tolist() == [2.5]


@pytest.mark.parametrize("which", ["vm", "prometheus"])
def test_malformed_matcher_names_the_query(vm: VictoriaMetrics, prom: Service, which: str) -> None:
    url = vm.url if which == "vm" else prom.url
    with TSDBClient(url, backoff=0.01) as client:
        with pytest.raises(TSDBError) as err:
            client.query('DCGM_FI_DEV_GPU_TEMP{gpu="0"', START)
        assert 'DCGM_FI_DEV_GPU_TEMP{gpu="0"' in str(err.value) and url in str(err.value)
        assert err.value.status in (400, 422) and client.requests == 1  # not retried
        # In a read, the bad selector is a problem and the good one still arrives.
        got = collect(client.read(['DCGM_FI_DEV_GPU_TEMP{gpu="0"', SELECTOR], START, END))
        assert_exact(got, DATASET)
        assert [p for p in client.problems if 'DCGM_FI_DEV_GPU_TEMP{gpu="0"' in p.where], list(client.problems)


def test_unreachable_url_fails_fast_naming_it() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    t = time.monotonic()
    with TSDBClient(url, retries=2, backoff=0.01, timeout=2.0) as client, pytest.raises(TSDBError) as err:
        client.query("up", START)
    assert time.monotonic() - t < 2.0
    assert url in str(err.value) and "up" in str(err.value) and "3 attempts" in str(err.value)
    assert client.requests == 3
    with TSDBClient(url, retries=1, backoff=0.01) as client, pytest.raises(TSDBError, match="detect server kind"):
        list(client.read([SELECTOR], START, END))


class FaultServer:
    """A loopback HTTP server for fault injection: ``respond(n, path)`` gives (status, body) for the
    n-th request (1-based); status 0 passes the request through to ``upstream``."""

    def __init__(self, respond: Callable[[int, str], tuple[int, bytes]], upstream: str = "") -> None:
        self.paths: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.paths.append(self.path)
                status, body = respond(len(outer.paths), self.path)
                if status == 0:
                    resp = httpx.get(upstream + self.path)
                    status, body = resp.status_code, resp.content
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


VECTOR = orjson.dumps(
    {
        "status": "success",
        "data": {"resultType": "vector", "result": [{"metric": {"__name__": "up"}, "value": [1.5, "1"]}]},
    }
)


@pytest.mark.parametrize("first", [500, 503, 429])
def test_retry_after_server_error(first: int) -> None:
    server = FaultServer(lambda n, _: (first, b"overloaded") if n == 1 else (200, VECTOR))
    try:
        with TSDBClient(server.url, kind="prometheus", backoff=0.01) as client:
            blocks = client.query("up", 1.5)
        assert [(b.key.name, b.values.tolist()) for b in blocks] == [("up", [1.0])]
        assert len(server.paths) == 2
    finally:
        server.close()


def test_persistent_error_gives_up_with_the_server_words() -> None:
    server = FaultServer(lambda n, _: (500, b"disk on fire"))
    try:
        client = TSDBClient(server.url, kind="prometheus", retries=2, backoff=0.01)
        with client, pytest.raises(TSDBError, match=r"up: HTTP 500: disk on fire \(after 3 attempts\)") as err:
            client.query("up", 1.5)
        assert server.url in str(err.value) and len(server.paths) == 3
    finally:
        server.close()


def test_failed_chunk_is_a_problem_and_the_rest_arrive(vm: VictoriaMetrics) -> None:
    window = time_windows(T0_MS, T0_MS + STEPS * STEP_MS, 1800_000)[1]
    bad_start = f"start={window[0] // 1000}.000"

    server = FaultServer(lambda n, path: (503, b"") if bad_start in path else (0, b""), upstream=vm.url)
    try:
        with TSDBClient(server.url, window=1800.0, retries=1, backoff=0.01) as client:
            got = collect(client.read([SELECTOR], START, END))
        assert len(client.problems) == 1 and "HTTP 503" in next(iter(client.problems)).message
        outside = {k: (t < window[0]) | (t >= window[1]) for k, (t, _) in DATASET.items()}
        assert_exact(got, {k: (t[outside[k]], v[outside[k]]) for k, (t, v) in DATASET.items()})
    finally:
        server.close()


def test_split_selector_covers_every_series_once() -> None:
    series = [{"__name__": k.name, **k.label_dict()} for k in DATASET]
    for max_series in (1, 2, 3, 5, 7, 100):
        parts = split_selector(SELECTOR, series, max_series)
        members = [s for _, group in parts for s in group]
        assert sorted(map(str, members)) == sorted(map(str, series))
        assert all(len(group) <= max_series for _, group in parts)
        assert len(parts) == 1 if max_series >= len(series) else len(parts) > 1


@pytest.mark.parametrize(
    ("selector", "want"),
    [
        ("up", 'up{a="x\\"y"}'),
        ("up{}", 'up{a="x\\"y"}'),
        ('{job="j",}', '{job="j",a="x\\"y"}'),
        ('up{re=~"a{2}"}', 'up{re=~"a{2}",a="x\\"y"}'),
    ],
)
def test_with_matcher(selector: str, want: str) -> None:
    assert with_matcher(selector, "a", "=", 'x"y') == want


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"url": "127.0.0.1:8428"}, "must start with http"),
        ({"window": 0.0}, "window > 0"),
        ({"max_series": 0}, "max_series > 0"),
        ({"vm_format": "xml"}, "vm_format"),
    ],
)
def test_bad_settings_are_rejected(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        TSDBClient(**{"url": "http://127.0.0.1:1", **kwargs})


def test_time_windows_cover_the_range_once() -> None:
    assert time_windows(0, 10, 4) == [(0, 4), (4, 8), (8, 11)]
    assert time_windows(5, 5, 100) == [(5, 6)]
    with pytest.raises(ValueError, match="before start"):
        time_windows(10, 0, 4)


def test_missing_binary_fails_with_the_setup_hint() -> None:
    with pytest.raises(pytest.fail.Exception, match=r"scripts/setup\.sh --services"):
        require_binary("peerwatch-no-such-service")


def test_service_that_dies_at_start_shows_its_log(tmp_path: Path) -> None:
    binary = require_binary("victoria-metrics")
    with pytest.raises(StartError, match=r"(?s)exited with .*its log:.*no-such-flag"):
        start_service(
            "victoria-metrics", [binary, "-no-such-flag", "-httpListenAddr=127.0.0.1:{port}"], "/health", tmp_path
        )
