"""Every way in gives the same frames: replayed files, VictoriaMetrics, Prometheus; and the catalog command."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from peerwatch.cli import app
from peerwatch.frames import Frame, FrameBuilder
from peerwatch.model import ProblemLog
from peerwatch.sources.inputs import bundled_samples, input_kind, read_inputs
from services import Service, VictoriaMetrics
from test_tsdb import DATASET, END, SELECTOR, START, openmetrics, vm_jsonl

NOW = END + 3600


def frames_of(inputs: list[str], **kw: float) -> dict[str, Frame]:
    problems = ProblemLog()
    builder = FrameBuilder(30.0, problems=problems, now=NOW)
    builder.add_all(read_inputs(inputs, problems, matchers=[SELECTOR], **kw))
    assert not problems.problems, list(problems)
    return builder.build()


def assert_same_frames(a: dict[str, Frame], b: dict[str, Frame]) -> None:
    assert sorted(a) == sorted(b)
    for name in a:
        fa, fb = a[name], b[name]
        assert (fa.start, fa.step, fa.kind) == (fb.start, fb.step, fb.kind), name
        order_a = sorted(range(len(fa.keys)), key=lambda i: str(fa.keys[i]))
        order_b = sorted(range(len(fb.keys)), key=lambda i: str(fb.keys[i]))
        assert [fa.keys[i] for i in order_a] == [fb.keys[i] for i in order_b], name
        np.testing.assert_array_equal(fa.values[order_a], fb.values[order_b], err_msg=name)
        np.testing.assert_array_equal(fa.last_seen[order_a], fb.last_seen[order_b], err_msg=name)


def text_exposition(data: dict) -> str:  # type: ignore[type-arg]
    """Prometheus text format 0.0.4 with integer ms timestamps, one scrape after another."""
    lines = []
    for key, (ts, values) in data.items():
        lines.extend(f"{key} {v!r} {t}" for t, v in zip(ts.tolist(), values.tolist(), strict=True))
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("recordings")
    (d / "vm.jsonl").write_bytes(b"\n".join(vm_jsonl(DATASET)) + b"\n")
    (d / "prom.txt.gz").write_bytes(gzip.compress(text_exposition(DATASET).encode()))
    return {"vm": d / "vm.jsonl", "text": d / "prom.txt.gz"}


@pytest.mark.services
def test_replay_victoriametrics_and_prometheus_give_the_same_frames(
    recordings: dict[str, Path], victoria_metrics: VictoriaMetrics, prometheus_factory: Callable[..., Service]
) -> None:
    victoria_metrics.import_jsonl(vm_jsonl(DATASET), probe=SELECTOR)
    prom = prometheus_factory(openmetrics(DATASET), name="prometheus-inputs")
    replayed = frames_of([str(recordings["vm"])])
    assert len(replayed) == 3 and sum(len(f.keys) for f in replayed.values()) == len(DATASET)
    assert_same_frames(frames_of([str(recordings["text"])]), replayed)
    assert_same_frames(frames_of([victoria_metrics.url], start=START, end=END), replayed)
    assert_same_frames(frames_of([prom.url], start=START, end=END), replayed)


@pytest.mark.parametrize(
    ("item", "kind"),
    [
        ("http://vm:8428", "tsdb"),
        ("https://prom.example/prometheus/", "tsdb"),
        ("http://gpu01:9100/metrics", "exporter"),
        ("http://gpu01:9400/metrics/", "exporter"),
        ("recording.jsonl.gz", "file"),
        ("/data/dir", "file"),
    ],
)
def test_input_kind(item: str, kind: str) -> None:
    assert input_kind(item) == kind


def test_folder_input_skips_scenario_labels_and_reports_empty_folders(tmp_path: Path) -> None:
    (tmp_path / "rec").mkdir()
    (tmp_path / "rec" / "a.jsonl").write_bytes(b"\n".join(vm_jsonl(DATASET)))
    (tmp_path / "rec" / "labels.json").write_text('{"nodes": [], "faults": []}')
    (tmp_path / "empty").mkdir()
    problems = ProblemLog()
    blocks = list(read_inputs([str(tmp_path / "rec"), str(tmp_path / "empty")], problems))
    assert len(blocks) == len(DATASET)
    assert [p.message for p in problems] == ["folder holds no files"]


def test_catalog_command_on_bundled_samples() -> None:
    result = CliRunner().invoke(app, ["catalog", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    names = {f["name"]: f for f in report["families"]}
    assert report["families_seen"] == len(names) > 1200
    assert report["families_seen"] > report["families_active"] > 0
    # Only the textfile collector's test metrics are unknown to the catalogue: user data, not node_exporter's.
    assert sorted(report["unknown"]) == ["testmetric1_1", "testmetric1_2", "testmetric2_1", "testmetric2_2"]
    assert names["DCGM_FI_DEV_GPU_TEMP"]["unit"] == "gpu"
    assert names["node_infiniband_link_downed_total"]["category"] == "error_counter"
    assert names["all_smi_cpu_utilization"]["exporter"] == "all_smi"
    assert report["set_aside"]["zfs"] > 100
    assert report["by_category"]["error_counter"]["seen"] > 50
    assert report["problem_count"] == 0


def test_catalog_command_table_and_nothing_usable(tmp_path: Path) -> None:
    runner = CliRunner()
    table = runner.invoke(app, ["catalog", "--top", "3", *map(str, bundled_samples())])
    assert table.exit_code == 0 and "families seen" in table.output and "By comparison unit" in table.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    result = runner.invoke(app, ["catalog", str(bad), str(tmp_path / "missing.jsonl")])
    assert result.exit_code == 1
    assert "nothing usable" in result.output and "bad.jsonl:1" in result.output


def test_numa_node_label_is_not_node_identity(tmp_path: Path) -> None:
    path = tmp_path / "numa.txt"
    path.write_text('node_memory_numa_Active{instance="gpu07:9100",node="1"} 5 1700000000000\n')
    result = CliRunner().invoke(app, ["catalog", "--json", str(path)])
    assert result.exit_code == 0, result.output
    from peerwatch.catalog.load import Catalog

    builder = FrameBuilder(30.0, node_labels_for=Catalog.default().node_labels, now=NOW)
    builder.add_all(read_inputs([str(path)], ProblemLog()))
    assert builder.build()["node_memory_numa_Active"].nodes == ("gpu07",)


@pytest.mark.services
def test_catalog_command_scrapes_a_real_node_exporter(node_exporter: Service) -> None:
    result = CliRunner().invoke(app, ["catalog", "--json", f"{node_exporter.url}/metrics"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    names = {f["name"] for f in report["families"]}
    assert {"up", "scrape_duration_seconds", "node_cpu_seconds_total", "go_goroutines"} <= names
    assert report["unknown"] == [], report["unknown"]
    assert report["set_aside"].get("runtime", 0) > 5


def test_catalog_reads_snapshots_taken_days_apart(tmp_path: Path) -> None:
    import os

    old, new = tmp_path / "gpu01.prom", tmp_path / "gpu02.prom"
    old.write_text('node_load1{instance="gpu01:9100"} 1\n')
    new.write_text('node_load5{instance="gpu02:9100"} 2\nnode_load1{instance="gpu02:9100"} 3\n')
    os.utime(old, (NOW - 3 * 86_400, NOW - 3 * 86_400))  # no timestamps: each file is a snapshot at its mtime
    result = CliRunner().invoke(app, ["catalog", "--json", str(old), str(new)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert {f["name"]: f["series"] for f in report["families"]} == {"node_load1": 2, "node_load5": 1}
    assert report["problems"] == []
