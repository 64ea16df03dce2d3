"""Every metric family the agent exports: name, type, labels and meaning, as one table.

Rendering refuses a measurement whose family or labels are not declared here, and a test
keeps ``docs/agent.md`` listing every family, so the catalogue and the docs cannot drift.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class FamilySpec:
    """One exported metric family."""

    name: str
    type: Literal["gauge", "counter"]
    labels: tuple[str, ...]
    help: str


_GPU = ("gpu", "pci_bus_id")
_PORT = ("device", "port")

_SPECS = (
    # Every check
    FamilySpec(
        "peerwatch_agent_check_status",
        "gauge",
        ("check", "component"),
        "Check verdict per component: 0=OK, 1=UNHEALTHY, 2=CRITICAL, 3=UNKNOWN.",
    ),
    FamilySpec(
        "peerwatch_agent_check_info",
        "gauge",
        ("check", "component", "status", "hint"),
        "Always 1; carries the verdict's name and remediation hint as labels.",
    ),
    FamilySpec(
        "peerwatch_agent_check_duration_seconds", "gauge", ("check",), "Wall time the check took in the last run."
    ),
    FamilySpec("peerwatch_agent_last_run_timestamp_seconds", "gauge", (), "When the last run of all checks finished."),
    FamilySpec("peerwatch_agent_build_info", "gauge", ("version",), "Always 1; the peerwatch version of the agent."),
    # Kernel-log Xids
    FamilySpec(
        "peerwatch_agent_xid_count",
        "gauge",
        ("pci_bus_id", "gpu", "xid"),
        "Xid events of this code for this GPU in the kernel log read (since boot for dmesg).",
    ),
    FamilySpec(
        "peerwatch_agent_xid_last_seen_timestamp_seconds",
        "gauge",
        ("pci_bus_id", "gpu", "xid"),
        "Time of the last Xid event of this code for this GPU, when the log line had a placeable time.",
    ),
    FamilySpec("peerwatch_agent_xid_last", "gauge", ("pci_bus_id", "gpu"), "Code of the last Xid logged for this GPU."),
    # Kernel-log NVSwitch SXids
    FamilySpec(
        "peerwatch_agent_sxid_count",
        "gauge",
        ("pci_bus_id", "sxid"),
        "SXid errors of this code for this NVSwitch in the kernel log read (headline lines).",
    ),
    FamilySpec(
        "peerwatch_agent_sxid_last", "gauge", ("pci_bus_id",), "Code of the last SXid logged for this NVSwitch."
    ),
    # PCIe links
    FamilySpec("peerwatch_agent_pcie_current_link_width", "gauge", ("pci_bus_id", "kind"), "Negotiated PCIe lanes."),
    FamilySpec(
        "peerwatch_agent_pcie_max_link_width",
        "gauge",
        ("pci_bus_id", "kind"),
        "Lanes the link can reach: the lower of the device's and its upstream port's maximum.",
    ),
    FamilySpec(
        "peerwatch_agent_pcie_current_link_speed_gts", "gauge", ("pci_bus_id", "kind"), "Negotiated PCIe speed in GT/s."
    ),
    FamilySpec(
        "peerwatch_agent_pcie_max_link_speed_gts",
        "gauge",
        ("pci_bus_id", "kind"),
        "Speed the link can reach in GT/s: the lower of the device's and its upstream port's maximum.",
    ),
    # CPU frequency
    FamilySpec(
        "peerwatch_agent_cpu_frequency_ratio",
        "gauge",
        ("stat",),
        "scaling_cur_freq / cpuinfo_max_freq over the CPUs: stat=max (fastest CPU) or median.",
    ),
    FamilySpec(
        "peerwatch_agent_cpu_scaling_max_capped_cpus",
        "gauge",
        (),
        "CPUs whose scaling_max_freq is below cpuinfo_max_freq.",
    ),
    # InfiniBand / RoCE ports
    FamilySpec("peerwatch_agent_infiniband_port_state", "gauge", _PORT, "Port state code (4=ACTIVE)."),
    FamilySpec("peerwatch_agent_infiniband_port_phys_state", "gauge", _PORT, "Physical state code (5=LinkUp)."),
    FamilySpec("peerwatch_agent_infiniband_port_rate_bytes_per_second", "gauge", _PORT, "Negotiated port rate."),
    FamilySpec(
        "peerwatch_agent_infiniband_port_errors_total",
        "counter",
        (*_PORT, "counter"),
        "Port error counter from sysfs counters/ (link_downed, symbol_error, ...).",
    ),
    # NVMe
    FamilySpec(
        "peerwatch_agent_nvme_controller_state", "gauge", ("device", "state"), "Always 1; the controller state."
    ),
    FamilySpec("peerwatch_agent_nvme_critical_warning", "gauge", ("device",), "SMART critical_warning bit field."),
    FamilySpec(
        "peerwatch_agent_nvme_media_errors_total", "counter", ("device",), "SMART media and data integrity errors."
    ),
    FamilySpec(
        "peerwatch_agent_nvme_error_log_entries_total", "counter", ("device",), "SMART error information log entries."
    ),
    FamilySpec("peerwatch_agent_nvme_endurance_used_percent", "gauge", ("device",), "SMART percentage used."),
    # nvidia-smi
    FamilySpec(
        "peerwatch_agent_gpu_info", "gauge", (*_GPU, "uuid", "name"), "Always 1; maps GPU index to PCI address."
    ),
    FamilySpec("peerwatch_agent_gpu_utilization_percent", "gauge", _GPU, "GPU utilization (decides busy vs idle)."),
    FamilySpec(
        "peerwatch_agent_gpu_ecc_uncorrected_volatile", "gauge", _GPU, "Uncorrected ECC errors since the driver loaded."
    ),
    FamilySpec("peerwatch_agent_gpu_retired_pages_pending", "gauge", _GPU, "1 if page retirement awaits a GPU reset."),
    FamilySpec("peerwatch_agent_gpu_clocks_event_reasons", "gauge", _GPU, "Active clock throttle reasons bit mask."),
    FamilySpec(
        "peerwatch_agent_gpu_remapped_rows", "gauge", (*_GPU, "kind"), "Rows remapped: correctable/uncorrectable."
    ),
    FamilySpec("peerwatch_agent_gpu_remapped_rows_pending", "gauge", _GPU, "1 if a row remap awaits a GPU reset."),
    FamilySpec(
        "peerwatch_agent_gpu_remapped_rows_failure", "gauge", _GPU, "1 if a row remap failed (spare rows gone)."
    ),
)

FAMILIES: Mapping[str, FamilySpec] = {spec.name: spec for spec in _SPECS}
"""Family name → spec, in export order."""
