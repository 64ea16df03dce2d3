"""A TSDB's window read a slice at a time, each judged before the next: the alarms of one read, a bounded buffer."""

from __future__ import annotations

from pathlib import Path

from peerwatch.evaluate.baseline_vm import SCENARIO_LABEL, import_recording
from peerwatch.service import Service, config_from_dict
from peerwatch.service.live_sources import TsdbSource
from peerwatch.simulate import FaultRequest, Scenario, default_spec, simulate, write_recording
from services import VictoriaMetrics

TAG = "backlog"


def _serve(vm: VictoriaMetrics, state: Path, end: float, read_steps: int) -> tuple[list[tuple[object, ...]], int, int]:
    """Alarms after judging the window up to data time ``end``; the most samples the buffer held; reads."""
    raw = {
        "source": {"tsdb": {"url": vm.url, "matchers": [f'{{{SCENARIO_LABEL}="{TAG}"}}'], "delay": "30s"}},
        "window": "1h",
        "store": {"sqlite": str(state)},
    }
    service = Service(config_from_dict(raw))
    assert isinstance(service.source, TsdbSource)
    service.source.READ_STEPS = read_steps
    most, reads = 0, 0
    while True:  # what the collect loop does: a backlog read is judged before the next is read
        fetch = service.collect(end)
        assert fetch.error is None
        most, reads = max(most, service.buffer.samples), reads + 1
        service.evaluate(fetch)
        if not fetch.backlog:
            break
    alarms = [(s.alarm.node, s.alarm.ts, s.alarm.diagnosis, s.alarm.resolved_ts) for s in service.store.alarms()]
    service.store.close()
    return sorted(alarms, key=repr), most, reads


def test_the_window_read_in_slices_gives_the_alarms_of_one_read(
    victoria_metrics: VictoriaMetrics, tmp_path: Path
) -> None:
    fault = FaultRequest("nvlink_xid", node="gpu003", gpu=2, at=0.6)
    sim = simulate(Scenario(TAG, default_spec(8), hours=1.0, seed=2, faults=(fault,)))
    write_recording(sim, tmp_path / "rec")
    import_recording(victoria_metrics.url, [tmp_path / "rec" / "metrics.jsonl"], TAG)
    end = sim.grid.start + 3600 + 30

    whole, whole_most, whole_reads = _serve(victoria_metrics, tmp_path / "whole.sqlite", end, 10**6)
    sliced, sliced_most, sliced_reads = _serve(victoria_metrics, tmp_path / "sliced.sqlite", end, 12)

    assert whole_reads == 1 and sliced_reads == 10  # 120 steps, 12 a read
    assert any(node == "gpu003" and diagnosis == "nvlink" for node, _, diagnosis, _ in whole), whole
    assert sliced == whole
    assert sliced_most < 0.2 * whole_most  # 12 steps (and 2 re-read) of 120 held at a time
