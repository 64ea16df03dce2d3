"""Metric names, types and labels match the real exporters' lists in tests/data."""

from __future__ import annotations

import csv
import re
from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest

from peerwatch.simulate import FaultRequest, Scenario, default_spec, simulate
from peerwatch.simulate.fam_dcgm import XID_TEXT

# Families real node_exporter has but its e2e fixture cannot show (fake /proc lacks them), with the reason.
NODE_NOT_IN_FIXTURE = {
    "node_memory_MemAvailable_bytes": "fixture meminfo predates MemAvailable",
    "node_infiniband_symbol_error_total": "collector/infiniband_linux.go; fixture sysfs lacks the counter",
    "node_mountstats_nfs_mountpoint_info": "added after the fixture's mountstats",
}
TIMEX = re.compile(r"^node_timex_[a-z_]+$")
# dcgm fields enabled by a custom counters CSV; all are DCGM fields (dcgm_fields.h)
DCGM_EXTRA = {"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_PCIE_LINK_GEN", "DCGM_FI_DEV_PCIE_LINK_WIDTH"}
TARGET = {"instance", "job"}


@cache
def _families() -> dict[str, tuple[str | None, set[frozenset[str]]]]:
    sim = simulate(
        Scenario("names", default_spec(8), hours=0.2, seed=2, faults=(FaultRequest("gpu_fallen_off_bus", at=0.5),))
    )
    seen: dict[str, tuple[str | None, set[frozenset[str]]]] = {}
    for block in sim.blocks():
        _, labelsets = seen.setdefault(block.key.name, (block.mtype, set()))
        labelsets.add(frozenset(k for k, _ in block.key.labels))
    return seen


def _fixture_types(path: Path) -> tuple[dict[str, str], dict[str, set[str]]]:
    types: dict[str, str] = {}
    labels: dict[str, set[str]] = defaultdict(set)
    for line in path.read_text().splitlines():
        if line.startswith("# TYPE "):
            _, _, name, mtype = line.split(" ", 3)
            types[name] = mtype
        elif line and not line.startswith("#") and "{" in line:
            name, rest = line.split("{", 1)
            labels[name].update(re.findall(r'([a-zA-Z_]+)="', rest.rsplit("}", 1)[0]))
    return types, labels


def test_node_exporter_names_types_and_labels_match_the_fixture(shared_data: Path) -> None:
    types, labels = _fixture_types(shared_data / "node_exporter" / "e2e-output.txt")
    timex = set(re.findall(r"node_timex_[a-z_]+", (shared_data / "node_exporter" / "SOURCE.md").read_text()))
    ours = {n: v for n, v in _families().items() if n.startswith("node_")}
    assert len(ours) >= 60
    for name, (mtype, labelsets) in ours.items():
        if TIMEX.match(name):
            assert name in timex, name
            continue
        if name in NODE_NOT_IN_FIXTURE:
            continue
        assert name in types, f"{name} is not a node_exporter family"
        assert mtype == types[name], f"{name}: declared {mtype}, node_exporter says {types[name]}"
        for ls in labelsets if name in labels else ():  # a few families have a TYPE line but no sample there
            assert set(ls) - TARGET == labels[name], f"{name}: labels {sorted(ls - TARGET)} vs {sorted(labels[name])}"


def test_dcgm_names_are_dcgm_exporter_fields_with_its_labels(shared_data: Path) -> None:
    csv_text = "".join(
        (shared_data / "dcgm-exporter" / n).read_text() for n in ("default-counters.csv", "dcp-metrics-included.csv")
    )
    known = set(re.findall(r"DCGM_FI_[A-Z0-9_]+", csv_text))
    known |= set(re.findall(r"DCGM_FI_[A-Z0-9_]+", (shared_data / "datadog-dcgm-fixture" / "metrics.txt").read_text()))
    ours = {n: v for n, v in _families().items() if n.startswith("DCGM_")}
    assert len(ours) >= 35
    base = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "DCGM_FI_DRIVER_VERSION"} | TARGET
    hosts = set()
    for name, (_, labelsets) in ours.items():
        assert name in known or name in DCGM_EXTRA, f"{name} is not a dcgm-exporter field"
        for ls in labelsets:
            host = ls & {"Hostname", "hostname"}
            assert len(host) == 1, f"{name}: host label {sorted(host)}"
            hosts |= host
            extra = ls - base - host
            assert extra <= ({"err_code", "err_msg"} if name == "DCGM_FI_DEV_XID_ERRORS" else set()), (name, extra)
    assert hosts == {"Hostname", "hostname"}, "both exporter generations are present"


def test_xid_messages_are_dcgm_exporters_strings(shared_data: Path) -> None:
    with (shared_data / "nvidia-xid" / "xid_catalog.csv").open() as fh:
        catalog = {int(r["xid"]): r["dcgm_exporter_err_msg"] for r in csv.DictReader(fh)}
    for code, text in XID_TEXT.items():
        assert catalog[code] == text, code


def test_all_smi_names_and_labels(shared_data: Path) -> None:
    names = set((shared_data / "all-smi" / "metric-names.txt").read_text().split())
    ours = {n: v for n, v in _families().items() if n.startswith("all_smi_")}
    assert len(ours) >= 25
    gpu = {"gpu", "gpu_uuid", "gpu_index", "exported_instance"} | TARGET
    for name, (_, labelsets) in ours.items():
        assert name in names, f"{name} is not an all-smi metric"
        if name.startswith("all_smi_gpu_") and name != "all_smi_gpu_info":
            assert labelsets == {frozenset(gpu)}, (name, labelsets)


def test_backendai_names_types_and_labels(shared_data: Path) -> None:
    declared: dict[str, tuple[str, set[str]]] = {}
    with (shared_data / "backend.ai" / "metrics.csv").open() as fh:
        for row in csv.DictReader(fh):
            name, mtype, labels = row["metric_name_as_declared"], row["type"], set(row["labels"].split())
            if mtype == "counter":
                declared[name if name.endswith("_total") else name + "_total"] = (mtype, labels)
            elif mtype == "histogram":
                declared[name + "_sum"] = declared[name + "_count"] = ("counter", labels)
            else:
                declared[name] = (mtype, labels)
    ours = {n: v for n, v in _families().items() if n.startswith("backendai_")}
    assert "backendai_async_task_count" in ours and len(ours) >= 10
    for name, (mtype, labelsets) in ours.items():
        assert name in declared, f"{name} is not a Backend.AI metric"
        assert mtype == declared[name][0], name
        for ls in labelsets:
            assert set(ls) - TARGET - {"service_group"} == declared[name][1], (name, sorted(ls))


@pytest.mark.parametrize(
    "name",
    [
        "up",
        "node_intr_total",
        "DCGM_FI_DEV_XID_ERRORS",
        "backendai_async_task_count",
        "node_infiniband_port_data_received_bytes_total",
        "node_mountstats_nfs_operations_queue_time_seconds_total",
    ],
)
def test_the_families_detection_needs_are_emitted(name: str) -> None:
    assert name in _families()
