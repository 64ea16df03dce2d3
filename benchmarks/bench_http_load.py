"""How the HTTP API of a live ``peerwatch serve`` answers 50 concurrent clients while it evaluates.

    .venv/bin/python benchmarks/bench_http_load.py [--nodes 16] [--speed 20] [--clients 50]
        [--seconds 30] [--fresh] [--wrk]

A child process runs a simulated cluster's live exporters (the demo's scenario: DGX B200 nodes,
benign events, an NVLink fault; ``--speed`` simulated seconds per wall second, so a 30-s step
comes every 30/speed wall seconds) and writes the configuration of a service that scrapes them;
``peerwatch serve --config`` then runs as a process of its own, as in production. Once it has
evaluated a step, ``--clients`` clients (asyncio, a plain HTTP/1.1 client, each on its own
keep-alive connection, or a new connection per request with ``--fresh``) request the API's and the
dashboard's read endpoints in turn for ``--seconds``. Reported: requests per second, latency
percentiles (time to the whole response) overall and per endpoint, errors by kind (a reset
connection, a refused one, a timeout, a non-200 status), and how many steps the service
evaluated meanwhile (it must keep evaluating). ``--wrk``: also one ``wrk`` run per endpoint
(Debian's ``wrk``, if installed) with the same concurrency, as a check on the Python client.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter, defaultdict
from multiprocessing.synchronize import Event
from pathlib import Path

ENDPOINTS = (
    "/api/v1/alarms",
    "/api/v1/nodes",
    "/healthz",
    "/metrics",
    "/dashboard/",
    "/dashboard/alarms",
)


def exporters(nodes: int, speed: float, port: int, folder: Path, ready: Event, stop: Event) -> None:
    """Child: the simulated cluster's exporters, and the service's configuration written beside them."""
    import yaml

    from peerwatch.service.demo import DemoSettings, start_demo

    demo = start_demo(DemoSettings(port=port, nodes=nodes, speed=speed), folder)
    raw = demo.config.model_dump(mode="json", exclude_none=True)
    (folder / "peerwatch.yaml").write_text(yaml.safe_dump(raw))
    ready.set()
    stop.wait()
    demo.stop_exporters()


def fill_history(path: Path, alarms: int, nodes: list[str], before: float) -> None:
    """``alarms`` resolved alarms with evidence, spread over ``nodes`` in the 90 days before ``before``:
    the history a service gathers over months (the risk model, the alarm list and /metrics read it)."""
    from peerwatch.alarms.sqlite_store import SQLiteStore
    from peerwatch.alarms.store import StepChanges, StoredAlarm
    from peerwatch.model import Alarm, Evidence

    store = SQLiteStore(path)
    rows = []
    for i in range(alarms):
        ts = before - 90 * 86400 + i * (90 * 86400 / alarms)
        node = nodes[(i * 7) % len(nodes)]
        ev = tuple(
            Evidence("DCGM_FI_DEV_GPU_TEMP", (("gpu", str(g)), ("Hostname", node)), 80.0 + g, 60.0, 9.0 + g, "hot")
            for g in range(4)
        )
        alarm = Alarm(
            f"h{i:06d}", ts, node, "gpu/1", "thermal_throttle", "warning", 9.0, "watch", ev, ts + 600, ts + 900
        )
        rows.append(StoredAlarm(alarm, ts, "engine", ts + 900))
    store.commit(StepChanges(rows, tuple(nodes), before, None))
    store.close()


def health(port: int) -> dict[str, object]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as resp:
        body: dict[str, object] = json.loads(resp.read())
        return body


async def request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str, close: bool) -> int:
    """One GET on an open connection; the status. Reads the whole body (Content-Length or chunked)."""
    connection = "close" if close else "keep-alive"
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: {connection}\r\n\r\n".encode())
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    if "content-length" in headers:
        await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding") == "chunked":
        while True:
            size = int((await reader.readline()).strip() or b"0", 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    return status


async def client(
    port: int, until: float, fresh: bool, offset: int, out: dict[str, list[float]], errors: Counter[str]
) -> None:
    conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
    i = offset
    while time.perf_counter() < until:
        path = ENDPOINTS[i % len(ENDPOINTS)]
        i += 1
        t0 = time.perf_counter()
        try:
            if conn is None:
                conn = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 30)
            status = await asyncio.wait_for(request(*conn, path, fresh), 30)
            out[path].append(time.perf_counter() - t0)
            if status != 200:
                errors[f"HTTP {status}"] += 1
        except (ConnectionResetError, BrokenPipeError, asyncio.IncompleteReadError):
            errors["connection reset"] += 1
            conn = _close(conn)
        except ConnectionRefusedError:
            errors["connection refused"] += 1
            conn = _close(conn)
        except TimeoutError:
            errors["timeout (30 s)"] += 1
            conn = _close(conn)
        if fresh:
            conn = _close(conn)
    _close(conn)


def _close(conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None) -> None:
    if conn is not None:
        conn[1].close()
    return None


async def load(port: int, clients: int, seconds: float, fresh: bool) -> tuple[dict[str, list[float]], Counter[str]]:
    out: dict[str, list[float]] = defaultdict(list)
    errors: Counter[str] = Counter()
    until = time.perf_counter() + seconds
    await asyncio.gather(*(client(port, until, fresh, k, out, errors) for k in range(clients)))
    return out, errors


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000, method="inclusive")[int(q * 10) - 1] if len(values) > 1 else values[0]


def report(out: dict[str, list[float]], errors: Counter[str], seconds: float) -> dict[str, object]:
    every = [t for ts in out.values() for t in ts]
    rows = {}
    print(f"{'endpoint':<22}{'requests':>9}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'max ms':>9}")
    for path in (*ENDPOINTS, "all"):
        ts = every if path == "all" else out.get(path, [])
        if not ts:
            continue
        row = {"requests": len(ts), **{q: pct(ts, v) * 1000 for q, v in (("p50", 50), ("p90", 90), ("p99", 99))}}
        row["max"] = max(ts) * 1000
        rows[path] = row
        print(f"{path:<22}{len(ts):>9}" + "".join(f"{row[q]:>9.0f}" for q in ("p50", "p90", "p99", "max")))
    total = len(every) + sum(errors.values())
    print(f"{len(every) / seconds:.0f} requests/s; errors: {dict(errors) or 'none'} of {total} requests")
    return {"endpoints": rows, "errors": dict(errors), "rate": len(every) / seconds}


def wrk(port: int, clients: int, seconds: float) -> None:
    for path in ENDPOINTS:
        cmd = ["wrk", "-t2", f"-c{clients}", f"-d{seconds:g}s", "--latency", f"http://127.0.0.1:{port}{path}"]
        text = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
        keep = [
            ln.strip()
            for ln in text.splitlines()
            if ln.strip().startswith(("99%", "50%", "Requests/sec", "Socket", "Non-2xx"))
        ]
        print(f"wrk {path}: " + "; ".join(keep))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--speed", type=float, default=20.0)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--fresh", action="store_true", help="a new connection per request")
    ap.add_argument("--wrk", action="store_true", help="also run Debian's wrk per endpoint")
    ap.add_argument("--history", type=int, default=0, help="resolved alarms in the store beforehand")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    from peerwatch.service.demo import free_range

    port = args.port or free_range(1, 18000)
    with tempfile.TemporaryDirectory(prefix="peerwatch-load-") as tmp:
        folder = Path(tmp)
        ctx = mp.get_context("spawn")
        ready, stop = ctx.Event(), ctx.Event()
        child = ctx.Process(target=exporters, args=(args.nodes, args.speed, port, folder, ready, stop))
        child.start()
        serve = None
        try:
            if not ready.wait(600):
                raise SystemExit("the simulator did not start in 10 minutes")
            if args.history:
                import yaml

                clock = yaml.safe_load((folder / "peerwatch.yaml").read_text())["clock"]
                names = [f"gpu{i:03d}" for i in range(args.nodes)]
                fill_history(folder / "peerwatch.sqlite", args.history, names, clock["start"])
            cmd = [sys.executable, "-m", "peerwatch", "serve", "--config", str(folder / "peerwatch.yaml")]
            serve = subprocess.Popen([*cmd, "--log-level", "warning"], stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 300
            while True:
                try:
                    if int(health(port)["evaluations"]) >= 1:  # type: ignore[call-overload]
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline or serve.poll() is not None:
                    raise SystemExit("serve did not evaluate a step in 5 minutes")
                time.sleep(0.5)
            idle = health(port)
            time.sleep(args.seconds)  # the same time without load: how many steps it evaluates unhindered
            before = health(port)
            unloaded = int(before["evaluations"]) - int(idle["evaluations"])  # type: ignore[call-overload]
            mode = "a new connection per request" if args.fresh else "keep-alive"
            print(
                f"{args.nodes} nodes at {args.speed:g}x (a step every {30 / args.speed:.1f} s), "
                f"{args.clients} clients, {mode}, {args.seconds:g} s"
            )
            out, errors = asyncio.run(load(port, args.clients, args.seconds, args.fresh))
            after = health(port)
            figures = report(out, errors, args.seconds)
            steps = int(after["evaluations"]) - int(before["evaluations"])  # type: ignore[call-overload]
            print(f"evaluations during the load: {steps}, in as long without: {unloaded} (status {after['status']})")
            figures["evaluations"], figures["evaluations_unloaded"] = steps, unloaded
            if args.wrk and shutil.which("wrk"):
                wrk(port, args.clients, min(args.seconds, 10.0))
            if args.json:
                args.json.write_text(json.dumps(figures, indent=2))
        finally:
            if serve is not None:
                serve.send_signal(signal.SIGTERM)
                serve.wait(60)
            stop.set()
            child.join(60)
            if child.is_alive():
                os.kill(child.pid or 0, signal.SIGKILL)


if __name__ == "__main__":
    main()
