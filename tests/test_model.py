from __future__ import annotations

import pytest

from peerwatch.catalog.schema import Category, Direction, Family, Unit
from peerwatch.model import ProblemLog, SeriesKey, node_of


@pytest.mark.parametrize(
    ("labels", "node"),
    [
        ({"node": "gpu01", "hostname": "x", "instance": "y:1"}, "gpu01"),
        ({"hostname": "gpu02", "instance": "10.0.0.2:9400"}, "gpu02"),
        ({"Hostname": "gpu03", "instance": "10.0.0.3:9400"}, "gpu03"),
        ({"instance": "gpu04:9100"}, "gpu04"),
        ({"instance": "gpu05"}, "gpu05"),
        ({"instance": "[fe80::1]:9100"}, "fe80::1"),
        ({"node": "", "instance": "gpu06:9100"}, "gpu06"),
    ],
)
def test_node_identity_follows_guide(labels: dict[str, str], node: str) -> None:
    assert node_of(labels) == node


def test_series_key_is_order_independent_and_drops_name() -> None:
    a = SeriesKey.of("m", {"b": "2", "a": "1", "__name__": "m"})
    b = SeriesKey.of("m", {"a": "1", "b": "2"})
    assert a == b and hash(a) == hash(b)
    assert str(a) == 'm{a="1",b="2"}'
    assert a.get("b") == "2" and a.get("zz") is None


def test_problem_log_caps_and_counts() -> None:
    log = ProblemLog(limit=2)
    for i in range(5):
        log.add(f"f:{i}", "bad")
    assert len(log) == 5 and len(log.problems) == 2 and log.dropped == 3


@pytest.mark.parametrize(
    ("unit", "entity", "labels", "component"),
    [
        (Unit.gpu, ("gpu|gpu_index|index",), {"gpu": "3"}, "gpu/3"),
        (Unit.gpu, ("gpu|gpu_index|index",), {"gpu_index": "5"}, "gpu/5"),
        (Unit.ib_port, ("device", "port"), {"device": "mlx5_0", "port": "1"}, "ib/mlx5_0:1"),
        (Unit.nfs_mount, ("export",), {"export": "fs:/home"}, "nfs/fs:/home"),
        (Unit.network_device, ("device",), {"device": "direct0"}, "net/direct0"),
        (Unit.nvswitch, ("nvswitch",), {"nvswitch": "0"}, "nvswitch"),
        (Unit.cpu_core, ("cpu",), {"cpu": "7"}, "node"),
        (Unit.gpu, ("gpu",), {}, "node"),
    ],
)
def test_component_names(unit: Unit, entity: tuple[str, ...], labels: dict[str, str], component: str) -> None:
    fam = Family("m", "x", "gauge", Category.utilization, unit, entity, Direction.down)
    assert fam.component(labels) == component


def test_series_key_text_escapes_label_values() -> None:
    key = SeriesKey.of("m", {"path": 'C:\\x "q"\nz'})
    assert str(key) == 'm{path="C:\\\\x \\"q\\"\\nz"}'
