"""sysfs checks (PCIe links, CPU frequency, InfiniBand ports) on recorded healthy and faulty trees."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

import pytest

from peerwatch.agent.checks import CheckResult, Status
from peerwatch.agent.cpufreq import CpuFreqCheck
from peerwatch.agent.infiniband import InfinibandCheck
from peerwatch.agent.nvidia import QUERY_FIELDS, NvidiaSmi
from peerwatch.agent.pcie import PcieLinkCheck, parse_speed
from peerwatch.agent.runner import CommandError, CommandResult, RecordedRunner
from peerwatch.agent.sysfs import pci_bus_id, read_int

FIX = Path(__file__).parent / "fixtures" / "agent"
SMI_QUERY = f"nvidia-smi --query-gpu={QUERY_FIELDS} --format=csv,noheader,nounits"


def verdicts(results: list[CheckResult]) -> dict[tuple[str, str], Status]:
    return {(r.check, r.component): r.status for r in results}


def hints(results: Iterable[CheckResult]) -> dict[str, str]:
    return {r.component: r.hint for r in results}


def smi(csv_name: str | None) -> NvidiaSmi:
    outputs = {SMI_QUERY: CommandResult(0, (FIX / "commands" / csv_name).read_text())} if csv_name else {}
    return NvidiaSmi(RecordedRunner(outputs))


@pytest.mark.parametrize(
    ("address", "canonical"),
    [
        ("00000000:3B:00.0", "0000:3b:00.0"),
        ("0000:3b:00", "0000:3b:00.0"),
        ("3b:00.1", "0000:3b:00.1"),
        ("0008:01:00", "0008:01:00.0"),
        ("pci0000:00", None),
        ("GPU0", None),
    ],
)
def test_pci_bus_id(address: str, canonical: str | None) -> None:
    assert pci_bus_id(address) == canonical


@pytest.mark.parametrize(
    ("text", "gts"),
    [
        ("32.0 GT/s PCIe", 32.0),
        ("8.0 GT/s PCIe", 8.0),
        ("8 GT/s", 8.0),
        ("2.5 GT/s", 2.5),
        ("Unknown", None),
        (None, None),
    ],
)
def test_parse_speed(text: str | None, gts: float | None) -> None:
    assert parse_speed(text) == gts


def test_read_int_tolerates_missing_and_junk(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("0x10de\n")
    (tmp_path / "b").write_text("N/A (no PMA)\n")
    assert (read_int(tmp_path / "a"), read_int(tmp_path / "b"), read_int(tmp_path / "c")) == (0x10DE, None, None)


# --- PCIe ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tree", "smi_csv", "expected"),
    [
        (
            "sys_healthy",
            "nvidia_smi_healthy.csv",
            {
                "0000:01:00.0": Status.OK,  # onboard 1GbE, x1 Gen1 of x1 Gen1
                "0000:18:00.0": Status.OK,
                "0000:1a:00.0": Status.OK,
                "0000:3b:00.0": Status.OK,  # 2.5 GT/s on an idle GPU: power saving
                "0000:71:00.0": Status.OK,
            },
        ),
        (
            "sys_healthy",
            None,  # no nvidia-smi: the slow idle GPU cannot be judged
            {
                "0000:01:00.0": Status.OK,
                "0000:18:00.0": Status.OK,
                "0000:1a:00.0": Status.OK,
                "0000:3b:00.0": Status.UNKNOWN,
                "0000:71:00.0": Status.OK,
            },
        ),
        (
            "sys_faulty",
            "nvidia_smi_faulty.csv",
            {
                "0000:18:00.0": Status.UNHEALTHY,  # x8 < x16
                "0000:1a:00.0": Status.UNHEALTHY,  # ConnectX at 16 < 32 GT/s
                "0000:3b:00.0": Status.OK,  # Gen5 card in a Gen4 slot
                "0000:5d:00.0": Status.UNHEALTHY,  # 2.5 GT/s on a busy GPU
                "0000:71:00.0": Status.UNKNOWN,  # speed reads Unknown
            },
        ),
    ],
)
def test_pcie_links(tree: str, smi_csv: str | None, expected: dict[str, Status]) -> None:
    results = list(PcieLinkCheck(FIX / tree, smi(smi_csv)).run())
    assert {r.component: r.status for r in results} == expected
    assert all(r.check == "pcie_link" for r in results)


def test_pcie_hints_and_values() -> None:
    results = list(PcieLinkCheck(FIX / "sys_faulty", smi("nvidia_smi_faulty.csv")).run())
    text = hints(results)
    assert text["0000:18:00.0"].startswith("limited width: x8 < x16")
    assert "16 < 32 GT/s" in text["0000:1a:00.0"]
    assert "busy GPU (utilization 95%)" in text["0000:5d:00.0"]
    (slot_limited,) = [r for r in results if r.component == "0000:3b:00.0"]
    values = {m.family: m.value for m in slot_limited.measurements}
    assert values["peerwatch_agent_pcie_max_link_speed_gts"] == 16.0  # the slot's limit, not the card's 32
    assert dict(slot_limited.measurements[0].labels)["kind"] == "gpu"
    healthy = hints(PcieLinkCheck(FIX / "sys_healthy", smi(None)).run())
    assert "busy state unknown (nvidia-smi not found)" in healthy["0000:3b:00.0"]


def test_pcie_without_devices_is_unknown(tmp_path: Path) -> None:
    (result,) = PcieLinkCheck(tmp_path).run()
    assert (result.component, result.status) == ("node", Status.UNKNOWN)


def test_pcie_busy_threshold_is_configurable() -> None:
    runner = RecordedRunner(
        {SMI_QUERY: CommandResult(0, "0, 00000000:5D:00.0, GPU-x, NVIDIA H100, 5, 0, [N/A], 0x1\n")}
    )
    check = PcieLinkCheck(FIX / "sys_faulty", NvidiaSmi(runner), busy_utilization=1.0)
    assert verdicts(list(check.run()))[("pcie_link", "0000:5d:00.0")] is Status.UNHEALTHY
    idle = PcieLinkCheck(FIX / "sys_faulty", NvidiaSmi(runner), busy_utilization=10.0)
    assert verdicts(list(idle.run()))[("pcie_link", "0000:5d:00.0")] is Status.OK


# --- CPU frequency --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tree", "proc", "low", "cap"),
    [
        ("sys_healthy", "proc_busy", Status.OK, Status.OK),  # fastest CPU at 97% of max
        ("sys_faulty", "proc_busy", Status.UNHEALTHY, Status.UNHEALTHY),  # all at ~21% under load 57
        ("sys_faulty", "proc_idle", Status.OK, Status.UNHEALTHY),  # idle: low clocks are expected
        ("sys_faulty", "proc_missing", Status.UNKNOWN, Status.UNHEALTHY),  # load unknown
        ("sys_missing", "proc_busy", Status.UNKNOWN, Status.UNKNOWN),  # no cpufreq (VM)
    ],
)
def test_cpu_frequency(tree: str, proc: str, low: Status, cap: Status) -> None:
    results = list(CpuFreqCheck(FIX / tree, FIX / proc).run())
    assert verdicts(results) == {("cpu_frequency", "node"): low, ("cpu_frequency_cap", "node"): cap}


def test_cpu_frequency_hints_and_values() -> None:
    low, cap = CpuFreqCheck(FIX / "sys_faulty", FIX / "proc_busy").run()
    assert "fastest 26%, governor powersave" in low.hint and "load 57.31" in low.hint
    assert cap.hint.startswith("scaling_max_freq below cpuinfo_max_freq on 2/4 CPUs (e.g. cpu1: 1200 < 3800 MHz)")
    ratios = {dict(m.labels)["stat"]: m.value for m in low.measurements}
    assert ratios == pytest.approx({"max": 1000000 / 3800000, "median": 800500 / 3800000})
    assert [m.value for m in cap.measurements] == [2]


# --- InfiniBand -----------------------------------------------------------------------------------


def test_infiniband_healthy() -> None:
    results = list(InfinibandCheck(FIX / "sys_healthy").run())
    assert set(verdicts(results).values()) == {Status.OK}
    assert {r.component for r in results} == {"mlx5_0:1", "mlx5_1:1"}
    errors = {
        dict(m.labels)["counter"]: m.value
        for r in results
        if r.component == "mlx5_1:1"
        for m in r.measurements
        if m.family.endswith("errors_total")
    }
    assert errors["symbol_error"] == 3 and errors["link_downed"] == 0 and "port_rcv_data" not in errors


def test_infiniband_faulty_ports() -> None:
    results = list(InfinibandCheck(FIX / "sys_faulty").run())
    got = {k: v for k, v in verdicts(results).items() if k[0] == "infiniband_port"}
    assert got == {
        ("infiniband_port", "mlx5_0:1"): Status.OK,
        ("infiniband_port", "mlx5_1:1"): Status.CRITICAL,  # DOWN / Disabled
        ("infiniband_port", "mlx5_2:1"): Status.UNHEALTHY,  # 200 < 400 of its peers
        ("infiniband_port", "mlx5_3:1"): Status.OK,  # 100 Gb/s RoCE port: its own peer group
    }
    text = hints(r for r in results if r.check == "infiniband_port")
    assert text["mlx5_1:1"].startswith("port DOWN/Disabled: link down")
    assert text["mlx5_2:1"].startswith("rate 200 Gb/sec (4X HDR) < 400 Gb/sec expected")
    rate = [m for r in results if r.component == "mlx5_0:1" for m in r.measurements if "rate" in m.family]
    assert rate[0].value == 400e9 / 8


def test_infiniband_expected_rate_and_ignore() -> None:
    check = InfinibandCheck(FIX / "sys_faulty", expected_rate_gbps=800, ignore=frozenset({"mlx5_1", "mlx5_3:1"}))
    got = {r.component: r.status for r in check.run() if r.check == "infiniband_port"}
    assert got == {"mlx5_0:1": Status.UNHEALTHY, "mlx5_2:1": Status.UNHEALTHY}


def test_infiniband_error_increases_across_runs(tmp_path: Path) -> None:
    tree = tmp_path / "sys"
    shutil.copytree(FIX / "sys_healthy", tree, symlinks=True)
    counters = tree / "class/infiniband/mlx5_1/ports/1/counters"
    check = InfinibandCheck(tree)

    def errors() -> dict[str, tuple[Status, str]]:
        return {r.component: (r.status, r.hint) for r in check.run() if r.check == "infiniband_errors"}

    first = errors()
    assert first["mlx5_1:1"] == (
        Status.OK,
        "first run: baseline for increases (totals: link_error_recovery=1, symbol_error=3)",
    )
    (counters / "symbol_error").write_text("9\n")  # +6: below the threshold of 10
    assert errors()["mlx5_1:1"] == (
        Status.OK,
        "no error counter increase since last run (below thresholds: symbol_error=6)",
    )
    (counters / "link_downed").write_text("1\n")
    status, hint = errors()["mlx5_1:1"]
    assert status is Status.UNHEALTHY and "link_downed=1" in hint
    (counters / "link_downed").write_text("0\n")  # counters cleared (perfquery -R): a reset, not an increase
    assert errors()["mlx5_1:1"][0] is Status.OK
    (counters / "symbol_error").write_text("N/A (no PMA)\n")  # unreadable counters are left out, not zero
    exported = next(r for r in check.run() if r.component == "mlx5_1:1" and r.check == "infiniband_errors")
    assert "symbol_error" not in {dict(m.labels)["counter"] for m in exported.measurements}


def test_infiniband_absent_is_unknown(tmp_path: Path) -> None:
    assert verdicts(list(InfinibandCheck(tmp_path).run())) == {
        ("infiniband_port", "node"): Status.UNKNOWN,
        ("infiniband_errors", "node"): Status.UNKNOWN,
    }


def test_recorded_runner_reports_missing_tools_and_timeouts() -> None:
    runner = RecordedRunner({"nvidia-smi -L": CommandError("nvidia-smi timed out after 1 s")})
    assert runner.which("nvidia-smi") and runner.which("dcgmi") is None
    with pytest.raises(CommandError, match="timed out"):
        runner.run(["nvidia-smi", "-L"], 1)
    with pytest.raises(CommandError, match="no recording"):
        runner.run(["nvidia-smi", "-q"], 1)
    assert runner.calls == ["nvidia-smi -L", "nvidia-smi -q"]
