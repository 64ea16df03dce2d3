"""The VictoriaMetrics ``outliers_mad`` baseline: query text, alarms from outliers, and end to end."""

from __future__ import annotations

import gzip
import shutil
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import httpx
import numpy as np
import orjson
import pytest

from peerwatch.evaluate import QUERIES, evaluate_dirs, find_scenarios, outlier_query, score
from peerwatch.evaluate.baseline_vm import (
    BaselineQuery,
    alarms_from_outliers,
    baseline_alarms,
    component_of,
    scenario_tag,
)
from peerwatch.evaluate.continuity import Rule
from peerwatch.evaluate.run import BASELINE
from peerwatch.model import Alarm, ProblemLog, SeriesBlock, SeriesKey
from peerwatch.simulate import FaultRequest, Scenario, default_spec, simulate, write_recording
from peerwatch.sources.tsdb import TSDBClient
from services import VictoriaMetrics


def test_query_text() -> None:
    q = BaselineQuery("x", "rate(foo_total{S}[2m]) / rate(bar_total{S}[2m])", "nfs", ("export", "operation"))
    assert outlier_query(q, "s-1", 3) == (
        'outliers_mad(3, rate(foo_total{peerwatch_scenario="s-1"}[2m])'
        ' / rate(bar_total{peerwatch_scenario="s-1"}[2m])) by (peerwatch_scenario, export, operation)'
    )
    assert 10 <= len(QUERIES) <= 20 and len({q.name for q in QUERIES}) == len(QUERIES)
    assert all("{S}" in q.expr and q.unit in ("gpu", "ib", "nfs", "node") for q in QUERIES)


@pytest.mark.parametrize(
    ("unit", "labels", "component"),
    [
        ("gpu", {"gpu": "3", "Hostname": "gpu001"}, "gpu/3"),
        ("gpu", {"instance": "gpu001:9400"}, "node"),
        ("ib", {"device": "mlx5_2", "port": "1"}, "ib/mlx5_2:1"),
        ("ib", {"device": "mlx5_2"}, "ib/mlx5_2"),
        ("nfs", {"export": "10.40.0.11:/data", "operation": "GETATTR"}, "nfs/10.40.0.11:/data"),
        ("node", {"gpu": "3"}, "node"),
    ],
)
def test_component_of(unit: str, labels: dict[str, str], component: str) -> None:
    assert component_of(unit, labels) == component


def _block(value: float, **labels: str) -> SeriesBlock:
    return SeriesBlock(SeriesKey.of("", labels), np.array([0.0]), np.array([value]))


def test_alarms_from_outliers_per_node_and_component() -> None:
    times = 1000.0 + 30.0 * np.arange(1, 21)
    gpu = BaselineQuery("gpu_temp", "DCGM_FI_DEV_GPU_TEMP{S}", "gpu")
    load = BaselineQuery("load1", "node_load1{S}", "node")
    answers = [(k, gpu, [_block(90.0 + k, gpu="3", hostname="gpu002")]) for k in (4, 5, 6)]
    answers += [(k, load, [_block(50.0, instance="gpu005:9100")]) for k in (2, 9)]  # isolated: no alarm
    answers += [(k, gpu, [_block(80.0, gpu="1", hostname="gpu002")]) for k in (10, 12)]  # 2 of 3
    alarms = alarms_from_outliers(answers, times, Rule())
    assert [(a.ts, a.node, a.component) for a in alarms] == [
        (times[5], "gpu002", "gpu/3"),
        (times[12], "gpu002", "gpu/1"),
    ]
    first = alarms[0]
    assert (first.diagnosis, first.severity, first.action, first.score) == ("unknown", "warning", "watch", 3.0)
    assert [e.value for e in first.evidence] == [94.0, 95.0]
    assert first.evidence[0].metric == "gpu_temp" and dict(first.evidence[0].labels)["gpu"] == "3"


def test_outliers_mad_over_a_range_returns_whole_series(victoria_metrics: VictoriaMetrics) -> None:
    """Why the baseline evaluates each step: a range query flags a series at every point once it strays once."""
    t0 = 1_764_000_000
    stamps = [(t0 + 30 * i) * 1000 for i in range(10)]
    lines = []
    for i in range(6):
        values = [10.0 + 0.1 * i] * 10
        if i == 5:
            values[4] = 50.0  # one stray point
        metric = {"__name__": "pw_eval_mad_probe", "instance": f"h{i}:1"}
        lines.append(orjson.dumps({"metric": metric, "values": values, "timestamps": stamps}))
    victoria_metrics.import_jsonl(lines, probe="pw_eval_mad_probe")
    with TSDBClient(victoria_metrics.url, problems=ProblemLog()) as client:
        ranged = client.query_range("outliers_mad(3, pw_eval_mad_probe)", t0, t0 + 270, 30)
        assert [b.key.get("instance") for b in ranged] == ["h5:1"] and len(ranged[0]) == 10
        assert [b.key.get("instance") for b in client.query("outliers_mad(3, pw_eval_mad_probe)", t0 + 120)] == ["h5:1"]
        assert client.query("outliers_mad(3, pw_eval_mad_probe)", t0 + 150) == []


def _fake_engine(
    inputs: Sequence[str], *, step: float = 30.0, now: float | None = None, problems: ProblemLog | None = None
) -> list[Alarm]:
    return []  # the engine's alarms are not the subject here


def test_vm_baseline_end_to_end(victoria_metrics: VictoriaMetrics, tmp_path: Path) -> None:
    sim = simulate(Scenario("vm", default_spec(8), hours=1.0, seed=3, faults=(FaultRequest("nvlink_xid", at=0.6),)))
    write_recording(sim, tmp_path / "plain")
    gz = tmp_path / "gzipped"
    gz.mkdir()
    shutil.copy(tmp_path / "plain" / "labels.json", gz / "labels.json")
    (gz / "metrics.jsonl.gz").write_bytes(gzip.compress((tmp_path / "plain" / "metrics.jsonl").read_bytes(), 1))

    ev = evaluate_dirs([tmp_path / "plain"], analyze=_fake_engine, baseline_url=victoria_metrics.url)
    base = ev.systems[1]
    assert base.name == BASELINE and [s.name for s in base.scores] == ["plain"]
    plain = base.scores[0]
    assert plain.node_alarms > 0 and plain.cluster_alarms == 0
    assert len(plain.outcomes) == 1 and plain.outcomes[0].fault.kind == "nvlink_xid"
    summ = base.summary
    assert summ.alarms.node_hours == 8.0 and summ.overall.faults == 1
    assert summ.alarms.precision is not None and summ.alarms.false_per_1000_node_hours is not None

    # the gzipped copy under its own tag: same data, same alarms, same score
    (sc,) = find_scenarios([gz])
    alarms = baseline_alarms(victoria_metrics.url, sc.metrics, sc.labels, scenario_tag(sc.name, gz / "labels.json"))
    assert replace(score(alarms, sc.labels), name="plain") == plain
    # the alarms: on the scenario's nodes, inside the recording, on step times, once the continuity rule holds
    lab = sc.labels
    assert alarms and {a.node for a in alarms} <= set(lab.nodes)
    ts = np.array([a.ts for a in alarms])
    assert ts.min() >= lab.start_ts + 2 * lab.step and ts.max() <= lab.end_ts
    assert np.all((ts - lab.start_ts) % lab.step == 0)
    assert all(a.diagnosis == "unknown" and len(a.evidence) >= 2 for a in alarms)
    with httpx.Client() as http:  # the extra label kept the two imports apart
        resp = http.get(f"{victoria_metrics.url}/api/v1/label/peerwatch_scenario/values")
        tags = [t for t in resp.json()["data"] if t.startswith(("plain-", "gzipped-"))]
        assert len(tags) == 2
