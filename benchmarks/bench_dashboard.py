"""How fast the dashboard answers at 1,000 nodes: each page and each plot's data (JSON), medians.

    .venv/bin/python benchmarks/bench_dashboard.py [--runs 7]

The synthetic service of tests/bigcluster.py: 1,000 nodes (50 spares, three workload groups),
300 alarms of which 50 open, 20,000 scores, and an hour of three families judged (load, GPU
temperatures, an interrupt counter: 9,000 series) in the dashboard's history. Each page is
requested ``--runs`` times through FastAPI's test client (routing and rendering, no socket); the
median and the first request are reported. The catalogue report is built in the background once
(its time is reported) and then served from its cache.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from html import unescape
from pathlib import Path

from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from bigcluster import big_service, name, pages
from peerwatch.service.app import create_app


def timed(client: TestClient, url: str, runs: int) -> tuple[float, float]:
    """Median and first of ``runs`` requests, in seconds."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        resp = client.get(url)
        times.append(time.perf_counter() - t0)
        if resp.status_code != 200:
            raise SystemExit(f"{url}: HTTP {resp.status_code}: {resp.text[:300]}")
    return statistics.median(times), times[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        service = big_service(Path(tmp))
        with TestClient(create_app(service, run=False)) as client:
            urls = pages(service)
            t0 = time.perf_counter()
            while "building the report" in client.get(urls["catalog"]).text:
                time.sleep(0.01)
            print(f"catalogue report built in the background: {(time.perf_counter() - t0) * 1000:.0f} ms")
            print(f"{'page':>10} {'median ms':>10} {'first ms':>9}")
            for page, url in urls.items():
                median, first = timed(client, url, args.runs)
                print(f"{page:>10} {median * 1000:>10.1f} {first * 1000:>9.1f}")
            node_page = client.get(f"/dashboard/nodes/{name(7)}").text
            plots = [unescape(u) for u in re.findall(r'data-src="([^"]+)"', node_page)]
            times = [timed(client, url, args.runs)[0] for url in plots]
            print(
                f"{'plot':>10} {statistics.median(times) * 1000:>10.1f}   (median over {len(plots)} plots; "
                f"slowest {max(times) * 1000:.1f} ms)"
            )
        service.store.close()


if __name__ == "__main__":
    main()
