"""Exposition parsing throughput: peerwatch's parser against prometheus_client's, on the same input.

    python benchmarks/bench_exposition.py [FILE ...]

Prints lines per second, the median of 5 runs, for each input: node_exporter's e2e output
(from tests/data) by default, and the same with a millisecond timestamp on every sample
(what a recording looks like). Lenient mode is the hot path; strict mode is shown for reference.
"""

from __future__ import annotations

import io
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from peerwatch.sources.exposition import ExpositionParser

RUNS = 5


def shared_data() -> Path:
    root = Path(__file__).resolve().parents[1]
    return Path(os.environ.get("PEERWATCH_SHARED_DATA", root / "tests" / "data"))


def with_timestamps(text: str, start_ms: int = 1_764_460_800_000) -> str:
    """Every sample line with a timestamp appended, as in a recorded file."""
    out = []
    for line in text.split("\n")[:-1]:
        out.append(line if not line or line.startswith("#") else f"{line} {start_ms}")
    return "\n".join(out) + "\n"


def ours(strict: bool) -> Callable[[str], int]:
    def run(text: str) -> int:
        # Lines as a binary file yields them (str.splitlines would also split at \x1c, \x85, ...).
        return sum(1 for _ in ExpositionParser(strict=strict).parse(io.BytesIO(text.encode())))

    return run


def prometheus_client(text: str) -> int:
    return sum(len(family.samples) for family in text_string_to_metric_families(text))


def lines_per_second(parse: Callable[[str], int], text: str) -> float:
    lines = text.count("\n")
    rates = []
    for _ in range(RUNS):
        t0 = time.perf_counter()
        parse(text)
        rates.append(lines / (time.perf_counter() - t0))
    return statistics.median(rates)


def main(paths: list[str]) -> None:
    if paths:
        inputs = [(p, Path(p).read_text()) for p in paths]
    else:
        base = (shared_data() / "node_exporter" / "e2e-output.txt").read_text()
        inputs = [("node_exporter e2e", base), ("node_exporter e2e + timestamps", with_timestamps(base))]
    print(f"{'input':34} {'parser':26} {'lines/s':>12} {'vs client':>9}")
    for label, text in inputs:
        reference = lines_per_second(prometheus_client, text)
        rows = [("prometheus_client", reference)]
        rows.append(("peerwatch lenient", lines_per_second(ours(False), text)))
        rows.append(("peerwatch strict", lines_per_second(ours(True), text)))
        for name, rate in rows:
            print(f"{label:34} {name:26} {rate:12,.0f} {rate / reference:8.1f}x")


if __name__ == "__main__":
    main(sys.argv[1:])
