"""A detector in a child process (offload.py): the same findings as in this process, chunk after
chunk with its state carried there, and a failure there raised here with the child's traceback."""

from __future__ import annotations

import multiprocessing
from dataclasses import replace
from typing import Any

import pytest

from peerwatch import offload
from peerwatch.catalog.load import Catalog
from peerwatch.detect.context import Context, Series
from peerwatch.detect.peer import PeerDetector
from peerwatch.detect.stream import FamilyDetector
from peerwatch.engine import EngineState, _context, kind_by_catalog
from peerwatch.frames import FrameBuilder
from peerwatch.model import Evidence, Finding
from peerwatch.offload import DetectorFailed, RemoteDetector, SplitDetector
from peerwatch.settings import DetectionSettings
from peerwatch.simulate import FaultRequest, Scenario, default_spec, simulate


def contexts(chunk: int = 30) -> list[Context]:
    """A 12-node hour with a hot GPU, as the engine's successive chunks."""
    faults = (FaultRequest("thermal_throttle", node="gpu003", at=0.4),)
    sim = simulate(Scenario("offload", default_spec(12), hours=1.0, seed=3, faults=faults))
    catalog = Catalog.default()
    builder = FrameBuilder(30.0, kind_of=kind_by_catalog(catalog), node_labels_for=catalog.node_labels, now=2e9)
    frames = builder.add_all(sim.blocks()).build()
    state, settings, out = EngineState(), DetectionSettings(), []
    steps = next(iter(frames.values())).steps
    for lo in range(0, steps, chunk):
        hi = min(lo + chunk, steps)
        part = {name: replace(f, start=f.start + f.step * lo, values=f.values[:, lo:hi]) for name, f in frames.items()}
        out.append(_context(part, catalog, state, settings))
        state.steps += out[-1].steps
    return out


def in_process(chunks: list[Context]) -> list[list[Finding]]:
    detector, state, out = PeerDetector(DetectionSettings().peer), None, []
    for ctx in chunks:
        found, state = detector.scan(ctx, state)
        out.append(found)
    return out


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_a_detector_in_a_child_finds_what_it_finds_here(method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(offload, "start_context", lambda: multiprocessing.get_context(method))
    chunks = contexts()
    expected = in_process(chunks)
    assert sum(map(len, expected)) > 0, "the peer detector must find something for the comparison to say much"
    remote = RemoteDetector(PeerDetector(DetectionSettings().peer))
    try:
        got = []
        for ctx in chunks:
            remote.submit(ctx)  # two in flight: the child queues them
            if ctx is not chunks[0]:
                got.append(remote.result())
        got.append(remote.result())
    finally:
        remote.close()
    assert repr(got) == repr(expected)


def test_a_detector_split_between_two_processes_finds_what_it_finds_in_one() -> None:
    chunks = contexts()
    expected = in_process(chunks)
    split, state = SplitDetector(PeerDetector(DetectionSettings().peer), local_share=0.5), None
    try:
        got = []
        for ctx in chunks:
            ours, state = split.begin(ctx, state)
            got.append(split.finish(ctx, ours))
        assert split.mine and len(split.mine) < len(chunks[0].series)  # both processes judged families
        assert {f.signal for fs in got for f in fs} - split.mine, "the child's families found nothing"
        assert {f.signal for fs in got for f in fs} & split.mine, "this process's families found nothing"
    finally:
        split.close()
    assert repr(got) == repr(expected)


class Names:
    """Finds each series it is sent, by name: which of them a child is sent."""

    name = "names"

    def judges(self, s: Series) -> bool:
        return s.frame.name.startswith("DCGM_")

    def scan(self, ctx: Context, state: Any) -> tuple[list[Finding], Any]:
        return [
            Finding(0.0, "", "", self.name, s.frame.name, 0.0, Evidence(s.frame.name, (), 0.0)) for s in ctx.series
        ], None


def test_a_child_is_sent_only_the_series_its_detector_judges() -> None:
    assert isinstance(Names(), FamilyDetector) and isinstance(PeerDetector(), FamilyDetector)
    ctx = contexts()[0]
    remote = RemoteDetector(Names())
    try:
        remote.submit(ctx)
        sent = [f.signal for f in remote.result()]
    finally:
        remote.close()
    assert sent == [s.frame.name for s in ctx.series if s.frame.name.startswith("DCGM_")]
    assert 0 < len(sent) < len(ctx.series)


class Boom:
    name = "boom"

    def scan(self, ctx: Context, state: Any) -> tuple[list[Finding], Any]:
        raise ValueError(f"no good at step {ctx.steps}")


def test_a_failure_in_the_child_is_raised_here_with_its_traceback() -> None:
    remote = RemoteDetector(Boom())
    try:
        remote.submit(contexts()[0])
        with pytest.raises(DetectorFailed, match=r"(?s)boom detector failed.*ValueError: no good at step 30"):
            remote.result()
        with pytest.raises(DetectorFailed, match="process ended"):
            remote.result()
    finally:
        remote.close()
