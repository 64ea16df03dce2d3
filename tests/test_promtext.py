"""The one writer of Prometheus text values and labels (peerwatch.promtext), and its users."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from peerwatch.agent.checks import Measurement
from peerwatch.agent.exposition import render as agent_render
from peerwatch.model import SeriesKey
from peerwatch.promtext import escape_label_value, format_value, sample_line
from peerwatch.service.config import WritebackConfig
from peerwatch.service.metrics import Health, render
from peerwatch.service.writeback import WriteBack


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (np.float64(1.5), "1.5"),  # repr() of a numpy scalar is "np.float64(1.5)": the bug of issue 16
        (np.float32(0.25), "0.25"),
        (np.int64(3), "3"),
        (np.bool_(True), "1"),
        (True, "1"),
        (7, "7"),
        (2.0, "2"),
        (-0.0, "0"),
        (1e-05, "1e-05"),
        (2.0**60, "1.152921504606847e+18"),
        (float("nan"), "NaN"),
        (np.float64("inf"), "+Inf"),
        (-math.inf, "-Inf"),
    ],
)
def test_values_as_prometheus_floats(value: float, text: str) -> None:
    assert format_value(value) == text


def test_every_value_reads_back_as_the_same_float() -> None:
    rng = random.Random(16)
    values = [rng.uniform(-1e6, 1e6) for _ in range(500)] + [10.0 ** rng.randint(-300, 300) for _ in range(200)]
    values += [float(rng.randint(-(2**60), 2**60)) for _ in range(200)]
    for v in values:
        assert float(format_value(np.float64(v))) == v


def test_label_escaping_round_trips_through_the_reference_parser() -> None:
    nasty = 'a "quoted"\\path\nnext'
    line = sample_line("m", [("x", nasty)], np.float64(0.5), 1000)
    assert line == 'm{x="a \\"quoted\\"\\\\path\\nnext"} 0.5 1000'
    sample = next(iter(text_string_to_metric_families(line + "\n"))).samples[0]
    assert sample.labels == {"x": nasty} and sample.value == 0.5 and sample.timestamp == 1.0
    assert str(SeriesKey.of("m", {"x": nasty})) == f'm{{x="{escape_label_value(nasty)}"}}'


def test_numpy_values_in_every_renderer() -> None:
    """/metrics, the write-back and the agent all render numpy scalars as plain floats."""
    health = Health(evaluated_until=np.float64(1_764_460_830.0), scores={("n1", "gpu/0", "m"): np.float64(2.5)})
    text = render(health, [], {"n1": np.float64(1.25)})
    assert "np." not in text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["peerwatch_anomaly_score"].samples[0].value == 2.5
    assert families["peerwatch_node_risk"].samples[0].value == 1.25
    build = families["peerwatch_build_info"].samples[0]
    assert build.value == 1 and set(build.labels) == {"version", "python"}
    lines = WriteBack(WritebackConfig(url="http://127.0.0.1:1")).payload(health, [], {"n1": np.float64(1.25)})
    assert lines == [
        'peerwatch_anomaly_score{node="n1",component="gpu/0",metric="m"} 2.5 1764460830000',
        'peerwatch_node_risk{node="n1"} 1.25 1764460830000',
    ]
    status = Measurement("peerwatch_agent_check_status", (("check", "c"), ("component", "x")), np.float64(2.5))
    assert 'peerwatch_agent_check_status{check="c",component="x"} 2.5\n' in agent_render([status])
