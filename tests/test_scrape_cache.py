"""The scrape cache changes what a scrape costs, never what it stores: each round of a live scrape
source must fill the buffer exactly as a full parse of the same body would."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from peerwatch.frames.buffer import SampleBuffer
from peerwatch.model import ProblemLog
from peerwatch.service import live_sources
from peerwatch.service.clock import Clock
from peerwatch.service.config import ScrapeConfig
from peerwatch.service.live_sources import ScrapeSource
from peerwatch.sources.scrape import HEALTH, Fetched, target_blocks
from peerwatch.sources.scrape_cache import split_lines
from test_scrape import TextServer

STEP = 30.0


@pytest.mark.parametrize(
    ("body", "values"),
    [
        (b"", []),
        (b"# HELP a x\n# TYPE a gauge\na 1\n\n  \r\n", [1.0]),
        (b'a{m="H100 80GB {x}",n="#"} 2.5\r\nb{} -Inf\nc NaN \n', None),  # "#" in a label: not taken
        (b'a{m="H100 80GB {x}"} 2.5\r\nb{} -Inf\nc NaN \nd +Inf', [2.5, -np.inf, np.nan, np.inf]),
        (b'a{x="1"} 1 # {trace_id="f"} 1\n', None),  # an OpenMetrics exemplar
        (b" a 1\n", None),  # a blank before the name
        (b"a {x=1} 1\n", None),
        (b"a 1e400\n", None),  # overflows: the full parse reports it
        (b"a abc\n", None),
        (b"a 0x1F\n", None),
        (b"a 1 2 3\n", None),
    ],
)
def test_split_lines(body: bytes, values: list[float] | None) -> None:
    lines = split_lines(body)
    if values is None:
        assert lines is None
    else:
        assert lines is not None and lines.stamps is None
        np.testing.assert_array_equal(lines.values, values)
        assert len(set(lines.heads.tolist())) == len(values)


def test_split_lines_timestamps() -> None:
    lines = split_lines(b"a 1 1700000000123\nb 2\nc 3 1700000000.5\n")
    assert lines is not None and lines.stamps is not None
    np.testing.assert_array_equal(lines.stamps, [1700000000.123, np.nan, 1700000000.5])


def _with_values(text: str, k: int) -> str:
    """``text`` with every sample's value replaced by one of round ``k``."""
    out = []
    for i, line in enumerate(text.split("\n")[:-1]):
        if line and not line.startswith("#"):
            head, _, _ = line.rpartition(" ")
            line = f"{head} {(i * 7 + k * 13) % 101 / 4}"
        out.append(line)
    return "\n".join(out) + "\n"


def _rounds(base: str) -> list[tuple[str, bool]]:
    """Bodies served round after round, each with whether the full parse must read it."""
    samples = [line for line in base.split("\n") if line and not line.startswith("#")]
    grown = base + 'cache_new_series{gpu="0",modelName="NVIDIA H100 80GB HBM3"} 1\n'
    shrunk = "".join(line + "\n" for line in grown.split("\n")[:-1] if line != samples[3])
    exemplar = shrunk.replace(samples[5], samples[5] + ' # {trace_id="abc"} 1', 1)
    return [
        (_with_values(base, 0), True),  # learned
        (_with_values(base, 1), False),  # new values: cached
        (_with_values(grown, 2), True),  # a new series: parsed, learned again
        (_with_values(grown, 3)[::-1].partition("\n")[2][::-1] + "\n", False),  # known lines only
        ("".join(x + "\n" for x in reversed(_with_values(grown, 4).split("\n")[:-1])), False),  # reordered
        (_with_values(shrunk, 5), False),  # a series gone
        (exemplar, True),  # not cacheable
        (_with_values(shrunk, 6), True),  # learned again
        (_with_values(shrunk, 7).replace(samples[6].rpartition(" ")[0] + " ", "BAD ", 1), True),
        (shrunk.replace(samples[6].rpartition(" ")[2], "abc", 1), True),  # a bad value: the parse reports it
        (_with_values(shrunk, 8) + samples[0] + "\n", True),  # a repeated line: never cached
        (_with_values(shrunk, 9) + samples[0] + "\n", True),
        (_with_values(shrunk, 10), True),
        (_with_values(shrunk, 11), False),
    ]


def _stored(buffer: SampleBuffer) -> dict[object, tuple[list[float], list[str], str | None]]:
    return {
        b.key: (b.timestamps.tolist(), [repr(v) for v in b.values.tolist()], b.mtype)
        for b in buffer.blocks(-np.inf, np.inf)
        if b.key.name not in HEALTH
    }


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many bodies the scrape source sends to the full parse."""
    calls = [0]
    real = live_sources.target_blocks

    def full(*args: object, **kw: object) -> object:
        calls[0] += 1
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(live_sources, "target_blocks", full)
    return calls


@pytest.fixture
def changing() -> Iterator[Callable[[], tuple[TextServer, list[bytes]]]]:
    servers: list[TextServer] = []

    def start() -> tuple[TextServer, list[bytes]]:
        body = [b""]
        servers.append(TextServer(lambda: (200, body[0])))
        return servers[-1], body

    yield start
    for s in servers:
        s.close()


@pytest.mark.parametrize("exporter", ["node_exporter/e2e-output.txt", "all-smi/sample-metrics-docker-cpu-only.prom"])
def test_rounds_store_what_a_full_parse_stores(
    exporter: str, shared_data: Path, counted: list[int], changing: Callable[[], tuple[TextServer, list[bytes]]]
) -> None:
    server, body = changing()
    config = ScrapeConfig.model_validate({"targets": [{"url": server.url, "job": "node", "labels": {"rack": "r1"}}]})
    clock = Clock(start=1_700_000_000.0, origin=time.time(), speed=10.0)  # compressed: samples stamped
    source = ScrapeSource(config, STEP, clock)
    (target,) = source.targets()
    buffer, reference = SampleBuffer(1e9), SampleBuffer(1e9)
    parsed = []
    for k, (text, full) in enumerate(_rounds((shared_data / exporter).read_text())):
        body[0] = text.encode()
        now = 1_700_000_000.0 + k * STEP
        before = counted[0]
        fetch = source.collect(now, buffer)
        parsed.append(counted[0] - before)
        assert fetch.error is None and not fetch.down, k
        _, blocks = target_blocks(target, Fetched(now, 0.0, body[0], None), ProblemLog())
        reference.add(blocks)
        assert _stored(buffer) == _stored(reference), f"round {k}"
        assert full == bool(parsed[-1]), f"round {k}: full parse {parsed[-1]}, expected {full}"
    assert len(_stored(buffer)) > 20


def test_own_timestamps_on_a_real_clock(
    counted: list[int], changing: Callable[[], tuple[TextServer, list[bytes]]]
) -> None:
    server, body = changing()
    source = ScrapeSource(ScrapeConfig.model_validate({"targets": [server.url]}), STEP, Clock())
    buffer = SampleBuffer(1e9)
    for k in range(3):
        body[0] = f'a{{x="1"}} {k} 17000000{k}0123\nb {k} 17000000{k}0.5\nc {k}\n'.encode()
        started = time.time()
        source.collect(started, buffer)
    assert counted[0] == 1  # the later rounds came from the cache
    got = {b.key.name: b for b in buffer.blocks(-np.inf, np.inf)}
    assert got["a"].timestamps.tolist() == [1700000000.123, 1700000010.123, 1700000020.123]
    assert got["b"].timestamps.tolist() == [1700000000.5, 1700000010.5, 1700000020.5]
    assert got["c"].values.tolist() == [0.0, 1.0, 2.0]
    assert started <= got["c"].timestamps[-1] <= time.time()  # no timestamp: the scrape's start
