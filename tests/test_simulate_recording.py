"""Recordings: byte-identical per seed, counters monotone except at labelled resets, healthy peers alike,
the real-cluster quirks present (scrape phases, missed scrapes, veth renames), and the CLI."""

from __future__ import annotations

import json
import warnings
from functools import cache
from pathlib import Path

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

from peerwatch.frames import FrameBuilder
from peerwatch.model import ProblemLog, SeriesBlock
from peerwatch.simulate import Benign, FaultRequest, Scenario, default_spec, simulate, write_recording
from peerwatch.simulate.commands import parse_faults, simulate_command
from peerwatch.simulate.scenarios import scenario_set
from peerwatch.sources.replay import read_recording

HEALTHY = Scenario(
    "healthy",
    default_spec(12),
    hours=2.0,
    seed=4,
    benign=Benign(restarts=1, agent_restarts=2, remounts=1, storage_slowdowns_per_hour=1.0),
)
RATE_LIKE = {"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"}  # declared counter, behaves as a rate (GUIDE 7)


@cache
def _healthy_blocks() -> tuple[SeriesBlock, ...]:
    return tuple(simulate(HEALTHY).blocks())


def test_same_seed_gives_byte_identical_files_and_another_seed_does_not(tmp_path: Path) -> None:
    scenario = Scenario("det", default_spec(4), hours=0.25, seed=9, faults=(FaultRequest("nvlink_xid", at=0.6),))
    a = write_recording(simulate(scenario), tmp_path / "a", compress=True)
    b = write_recording(simulate(scenario), tmp_path / "b", compress=True)
    c = write_recording(simulate(Scenario("det", default_spec(4), hours=0.25, seed=10)), tmp_path / "c", compress=True)
    assert a.metrics.read_bytes() == b.metrics.read_bytes()
    assert a.labels.read_bytes() == b.labels.read_bytes()
    assert a.metrics.read_bytes() != c.metrics.read_bytes()


def test_recording_reads_back_and_labels_follow_guide_3_2(tmp_path: Path) -> None:
    sim = simulate(Scenario("rt", default_spec(4), hours=0.2, seed=1, faults=(FaultRequest("ecc_hbm", at=0.8),)))
    written = write_recording(sim, tmp_path)
    problems = ProblemLog()
    back = list(read_recording(written.metrics, problems))
    assert not problems and len(back) == written.series and sum(len(b) for b in back) == written.samples
    labels = json.loads(written.labels.read_text())
    assert set(labels) >= {"nodes", "spares", "faults", "events"}
    fault = labels["faults"][0]
    assert set(fault) >= {"node", "component", "kind", "onset_ts", "failure_ts", "expected"}
    assert fault["kind"] == "ecc_hbm" and fault["expected"] == ["ecc_hbm"] and fault["component"].startswith("gpu/")
    assert all({"kind", "start_ts", "end_ts"} <= set(e) for e in labels["events"])


def test_prometheus_text_output_has_timestamps(tmp_path: Path) -> None:
    written = write_recording(
        simulate(
            Scenario(
                "txt",
                default_spec(
                    2,
                ),
                hours=0.05,
                seed=1,
            )
        ),
        tmp_path,
        fmt="prom",
    )
    lines = written.metrics.read_text().splitlines()
    sample = next(line for line in lines if line.startswith("DCGM_FI_DEV_GPU_UTIL{"))
    assert sample.rsplit(" ", 1)[1].isdigit() and "# TYPE node_intr_total counter" in lines


def test_counters_are_monotone_except_at_labelled_resets() -> None:
    sim = simulate(HEALTHY)
    resets = {(e.node, e.kind) for e in sim.events if e.kind in ("agent_restart", "remount")}
    assert {k for _, k in resets} == {"agent_restart", "remount"}
    drops: set[tuple[str, str]] = set()
    counters = 0
    for b in _healthy_blocks():
        monotone = b.mtype == "counter" or b.key.name.startswith(("node_vmstat_", "node_netstat_Tcp_"))
        if not monotone or b.key.name in RATE_LIKE or b.key.name.endswith("_info"):
            continue
        counters += 1
        if (np.diff(b.values) < 0).any():
            node = (b.key.get("instance") or "").split(":")[0]
            kind = "agent_restart" if b.key.name.startswith("backendai_") else "remount"
            assert (node, kind) in resets, f"{b.key} decreases with no {kind} on {node}"
            assert kind == "agent_restart" or b.key.name.startswith("node_mountstats_"), b.key
            drops.add((node, kind))
    assert counters > 1000 and drops == resets


def _node_medians(name: str, sim_nodes: tuple[str, ...]) -> dict[str, float]:
    builder = FrameBuilder(30.0, now=HEALTHY.start_ts + 86_400)
    frame = builder.add_all(b for b in _healthy_blocks() if b.key.name == name).build()[name]
    out = {}
    for node in sim_nodes:
        rows = [i for i, n in enumerate(frame.nodes) if n == node]
        with warnings.catch_warnings():  # a step where every series of the node was missed is NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            out[node] = float(np.nanmedian(np.nanmean(frame.values[rows], axis=0)))
    return out


@pytest.mark.parametrize(
    "name",
    [
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_MEMORY_TEMP",
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "node_intr_total",
        "node_procs_running",
        "node_load1",
        "backendai_async_task_count",
        "node_infiniband_port_data_received_bytes_total",
        "node_mountstats_nfs_operations_response_time_seconds_total",
        "node_cpu_seconds_total",
        "all_smi_gpu_utilization",
    ],
)
def test_no_healthy_training_node_stands_out_from_its_peers(name: str) -> None:
    sim = simulate(HEALTHY)
    training = sim.layout.names[: sim.layout.spec.training]
    med = _node_medians(name, training)
    values = np.array(list(med.values()))
    centre = np.median(values)
    spread = 1.4826 * np.median(np.abs(values - centre))
    worst = max(med, key=lambda n: abs(med[n] - centre))
    assert abs(med[worst] - centre) <= max(6 * spread, 0.05 * abs(centre) + 1e-9), (worst, med[worst], centre)


def test_real_cluster_quirks_are_there() -> None:
    sim = simulate(HEALTHY)
    times = sim.schedule.times
    assert len(np.unique(np.round(times[0, :, 0] % 30.0, 2))) == 4, "each exporter scrapes at its own phase"
    missed = 1.0 - sim.scraped().mean()
    assert 0.005 < missed < 0.05
    veths = {
        b.key.get("device")
        for b in _healthy_blocks()
        if b.key.name == "node_network_receive_bytes_total"
        and b.key.get("instance") == "gpu002:9100"
        and (b.key.get("device") or "").startswith("veth")
    }
    assert len(veths) == 2, "the job restart gives the container a new veth"
    spare = sim.layout.names[-1]
    gens = [
        b.values
        for b in _healthy_blocks()
        if b.key.name == "all_smi_gpu_pcie_gen_current" and b.key.get("exported_instance") == spare
    ]
    assert gens and all((g == 1).mean() > 0.5 for g in gens), "idle spares drop to PCIe gen 1"


def test_gpu_off_the_bus_vanishes_while_the_node_keeps_reporting() -> None:
    sim = simulate(
        Scenario("bus", default_spec(4), hours=0.5, seed=6, faults=(FaultRequest("gpu_fallen_off_bus", at=0.5),))
    )
    fault = sim.faults[0]
    assert fault.failure_ts is not None
    util = next(
        b
        for b in sim.blocks({"DCGM_FI_DEV_GPU_UTIL"})
        if b.key.get("hostname", b.key.get("Hostname")) == fault.node and b.key.get("gpu") == str(fault.gpu)
    )
    intr = next(b for b in sim.blocks({"node_intr_total"}) if b.key.get("instance") == f"{fault.node}:9100")
    assert util.timestamps[-1] < fault.failure_ts + 120 < intr.timestamps[-1]


def test_scenario_set_is_public_and_complete() -> None:
    names = [s.name for s in scenario_set()]
    assert len(names) >= 12 and len(set(names)) == len(names)
    assert {"healthy_long", "reference_mix", "cascade", "scale_1000"} <= set(names)
    assert any(s.spec.nodes >= 1000 for s in scenario_set())


def test_cli_writes_a_recording_and_rejects_bad_faults(tmp_path: Path) -> None:
    import typer

    app = typer.Typer()
    app.command()(simulate_command)
    runner = CliRunner()
    res = runner.invoke(app, ["--out", str(tmp_path), "--nodes", "3", "--hours", "0.1", "--faults", "ecc_hbm@gpu002"])
    assert res.exit_code == 0, res.output
    labels = orjson.loads((tmp_path / "labels.json").read_bytes())
    assert labels["faults"][0]["node"] == "gpu002"
    bad = runner.invoke(app, ["--out", str(tmp_path), "--faults", "nvlnk"])
    assert bad.exit_code != 0 and "unknown fault kind" in bad.output
    assert parse_faults("random,nvlink_xid:0.4") == ((FaultRequest("nvlink_xid", at=0.4),), True)


def test_serve_exposes_each_target_live_on_its_own_port() -> None:
    import random

    import httpx

    from peerwatch.service.demo import free_range
    from peerwatch.simulate.serve import LiveCluster, serve_in_thread

    # Consecutive ports below the ephemeral range, from a random start: outgoing connections of
    # tests running at the same time cannot take them between the check and the bind.
    base = free_range(8, start=random.randint(20000, 30000))
    sim = simulate(Scenario("live", default_spec(2), hours=0.1, seed=1))
    live = LiveCluster(sim, speed=600.0, base_port=base)
    thread, stop = serve_in_thread(live)
    try:
        node = httpx.get(f"http://127.0.0.1:{live.port(1, 0)}/metrics", timeout=5).text
        dcgm = httpx.get(f"http://127.0.0.1:{live.port(0, 1)}/metrics", timeout=5)
        index = httpx.get(f"http://127.0.0.1:{base}/", timeout=5).text
    finally:
        stop()
        thread.join(5)
    assert "# TYPE node_intr_total counter" in node and "node_cpu_seconds_total{" in node
    assert dcgm.status_code in (200, 503)
    if dcgm.status_code == 200:
        assert "DCGM_FI_DEV_GPU_UTIL{" in dcgm.text and "instance=" not in dcgm.text
    assert f"gpu002 dcgm-exporter http://127.0.0.1:{live.port(1, 1)}/metrics" in index


def test_scraping_the_live_exporters_gives_the_recorded_series() -> None:
    """Scraped with their target labels (Backend.AI's service_group included), the live exporters'
    series are the recording's, plus the scrape's own health series."""
    import random

    from peerwatch.service.demo import free_range
    from peerwatch.simulate.families import target_labels
    from peerwatch.simulate.serve import LiveCluster, serve_in_thread
    from peerwatch.simulate.targets import EXPORTERS
    from peerwatch.sources.scrape import Target, scrape

    sim = simulate(Scenario("keys", default_spec(2), hours=0.1, seed=1))
    live = LiveCluster(sim, speed=1e-9, base_port=free_range(4 * sim.layout.n, start=random.randint(20000, 30000)))
    thread, stop = serve_in_thread(live)
    try:
        targets = [
            Target(f"http://127.0.0.1:{live.port(n, x)}/metrics", e.job, target_labels(e, name))
            for n, name in enumerate(sim.layout.names)
            for x, e in enumerate(EXPORTERS)
        ]
        result = scrape(targets, timeout=10.0)
    finally:
        stop()
        thread.join(5)
    health = ("up", "scrape_duration_seconds", "scrape_samples_scraped")
    scraped = {b.key for b in result.blocks if b.key.name not in health}
    assert any(k.name.startswith("backendai_") for k in scraped)
    assert scraped - {b.key for b in sim.blocks()} == set()


def test_a_round_on_a_compressed_clock_reads_the_step_it_is_stamped_with() -> None:
    """At 60x a scrape round can outlast its step's 0.5 s of wall time. Its samples are stamped with the
    round's data time, so the simulated exporters answer for that time (DATA_TIME_HEADER), not for the
    moment each request arrives (the next step's counters: a rate of zero, then a double one)."""
    import random
    import time

    from peerwatch.frames.buffer import SampleBuffer
    from peerwatch.service.clock import Clock
    from peerwatch.service.config import ScrapeConfig
    from peerwatch.service.demo import free_range
    from peerwatch.service.live_sources import ScrapeSource
    from peerwatch.simulate.serve import LiveCluster, serve_in_thread

    sim = simulate(Scenario("keys", default_spec(2), hours=0.1, seed=1))
    # Its wall clock frozen at step 0: only a round's data time can move it.
    live = LiveCluster(sim, speed=1e-9, base_port=free_range(4 * sim.layout.n, start=random.randint(20000, 30000)))
    thread, stop = serve_in_thread(live)
    config = ScrapeConfig.model_validate({"targets": [f"http://127.0.0.1:{live.port(0, 0)}/metrics"]})
    grid = sim.grid
    source = ScrapeSource(config, grid.step, Clock(start=grid.start, origin=time.time(), speed=60.0))
    buffer = SampleBuffer(1e9)
    rounds = {k: grid.start + (k + 0.5) * grid.step for k in (3, 7)}
    try:
        for now in rounds.values():
            assert source.collect(now, buffer).error is None
    finally:
        stop()
        thread.join(5)
    (intr,) = [b for b in buffer.blocks(-np.inf, np.inf) if b.key.name == "node_intr_total"]
    for k, now in rounds.items():
        (line,) = [x for x in (live.render(0, 0, k) or "").splitlines() if x.startswith("node_intr_total ")]
        assert intr.values[intr.timestamps.tolist().index(now)] == float(line.split()[-1]), k
    assert intr.values[0] != intr.values[1]  # the two steps differ (a counter that moves)
