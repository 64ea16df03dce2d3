"""Checks that run tools (nvidia-smi, dcgmi, nvme-cli), on recorded outputs in the tools' real formats."""

from __future__ import annotations

from pathlib import Path

import pytest

from peerwatch.agent.checks import CheckResult, Status
from peerwatch.agent.dcgm import DcgmHealthCheck
from peerwatch.agent.nvidia import MINIMAL_FIELDS, QUERY_FIELDS, REMAP_FIELDS, NvidiaSmi, NvidiaSmiCheck, parse_query
from peerwatch.agent.nvme import NvmeCheck, parse_smart_log
from peerwatch.agent.readers import dcgmi_health
from peerwatch.agent.runner import CommandError, CommandResult, RecordedRunner

FIX = Path(__file__).parent / "fixtures" / "agent"
CMD = FIX / "commands"
SMI_QUERY = f"nvidia-smi --query-gpu={QUERY_FIELDS} --format=csv,noheader,nounits"
SMI_MINIMAL = f"nvidia-smi --query-gpu={MINIMAL_FIELDS} --format=csv,noheader,nounits"
SMI_REMAP = f"nvidia-smi --query-remapped-rows={REMAP_FIELDS} --format=csv,noheader,nounits"


def recorded(name: str, code: int = 0) -> CommandResult:
    return CommandResult(code, (CMD / name).read_text())


def by_component(results: list[CheckResult]) -> dict[str, tuple[Status, str]]:
    return {r.component: (r.status, r.hint) for r in results}


# --- nvidia-smi -----------------------------------------------------------------------------------


def test_parse_query_rows_and_lost_gpu() -> None:
    query = parse_query((CMD / "nvidia_smi_faulty.csv").read_text())
    assert [(g.index, g.bus_id, g.utilization, g.ecc_uncorrected) for g in query.gpus] == [
        (0, "0000:18:00.0", 99.0, 0.0),
        (1, "0000:3b:00.0", 98.0, 2.0),
        (2, "0000:5d:00.0", 95.0, 0.0),
    ]
    assert query.gpus[2].clock_reasons == 0x40 and query.gpus[0].retired_pending is None
    assert set(query.lost) == {"0000:9a:00.0"}


def test_nvidia_smi_check_faulty() -> None:
    runner = RecordedRunner(
        {SMI_QUERY: recorded("nvidia_smi_faulty.csv", 15), SMI_REMAP: recorded("nvidia_smi_remap_faulty.csv")}
    )
    got = by_component(list(NvidiaSmiCheck(NvidiaSmi(runner)).run()))
    assert {k: s for k, (s, _) in got.items()} == {
        "0000:18:00.0": Status.CRITICAL,  # row remapping failed
        "0000:3b:00.0": Status.CRITICAL,  # 2 uncorrected ECC errors (+ remap pending)
        "0000:5d:00.0": Status.UNHEALTHY,  # hw thermal slowdown
        "0000:9a:00.0": Status.CRITICAL,  # lost
    }
    assert got["0000:3b:00.0"][1] == (
        "2 uncorrected ECC errors: drain and reset the GPU; row remap pending: reset the GPU to apply it"
    )
    assert "hw_thermal_slowdown" in got["0000:5d:00.0"][1]
    assert got["0000:9a:00.0"][1].startswith("Unable to determine the device handle for GPU0000:9A:00.0")


def test_nvidia_smi_check_healthy_values() -> None:
    runner = RecordedRunner(
        {SMI_QUERY: recorded("nvidia_smi_healthy.csv"), SMI_REMAP: recorded("nvidia_smi_remap_healthy.csv")}
    )
    results = list(NvidiaSmiCheck(NvidiaSmi(runner)).run())
    assert {r.status for r in results} == {Status.OK}
    values = {(m.family, dict(m.labels).get("kind")): m.value for m in results[1].measurements}
    assert values[("peerwatch_agent_gpu_utilization_percent", None)] == 0
    assert values[("peerwatch_agent_gpu_clocks_event_reasons", None)] == 1  # gpu_idle is no fault
    assert values[("peerwatch_agent_gpu_remapped_rows", "uncorrectable")] == 0
    assert ("peerwatch_agent_gpu_retired_pages_pending", None) not in values  # [N/A] stays missing, not 0
    info = [dict(m.labels) for m in results[0].measurements if m.family == "peerwatch_agent_gpu_info"]
    assert info == [
        {
            "gpu": "0",
            "pci_bus_id": "0000:18:00.0",
            "uuid": "GPU-6c7a5e3b-2f1d-4b7e-9a0c-1d2e3f4a5b6c",
            "name": "NVIDIA H100 80GB HBM3",
        }
    ]


def test_nvidia_smi_falls_back_to_minimal_fields() -> None:
    runner = RecordedRunner(
        {
            SMI_QUERY: CommandResult(2, 'Field "retired_pages.pending" is not a valid field to query.\n'),
            SMI_MINIMAL: CommandResult(0, "0, 00000000:18:00.0, GPU-a, Tesla V100-SXM2-32GB, 12\n"),
        }
    )
    query = NvidiaSmi(runner).query()
    assert query.error is None and query.gpus[0].name == "Tesla V100-SXM2-32GB"
    assert query.gpus[0].ecc_uncorrected is None and query.gpus[0].clock_reasons is None


@pytest.mark.parametrize(
    ("outputs", "hint"),
    [
        ({}, "nvidia-smi not found"),
        ({SMI_QUERY: CommandError("nvidia-smi timed out after 20 s")}, "nvidia-smi timed out after 20 s (a hung"),
        ({SMI_QUERY: CommandResult(6, "No devices were found\n")}, "nvidia-smi: No devices were found"),
        (
            {
                SMI_QUERY: CommandResult(
                    9,
                    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                    "Make sure that the latest NVIDIA driver is installed and running.\n",
                )
            },
            "nvidia-smi: NVIDIA-SMI has failed because it couldn't communicate",
        ),
    ],
)
def test_nvidia_smi_unavailable_is_unknown(outputs: dict[str, CommandResult | CommandError], hint: str) -> None:
    (result,) = NvidiaSmiCheck(NvidiaSmi(RecordedRunner(outputs))).run()
    assert (result.component, result.status) == ("node", Status.UNKNOWN)
    assert result.hint.startswith(hint)


def test_nvidia_smi_is_called_once_per_ttl() -> None:
    now = [0.0]
    runner = RecordedRunner({SMI_QUERY: recorded("nvidia_smi_healthy.csv")})
    smi = NvidiaSmi(runner, ttl=5.0, clock=lambda: now[0])
    smi.query()
    smi.query()
    now[0] = 6.0
    smi.query()
    assert runner.calls.count(SMI_QUERY) == 2


# --- DCGM -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        ("dcgmi_health_healthy.txt", {"node": Status.OK}),
        (
            "dcgmi_health_warning.txt",
            {"node": Status.UNHEALTHY, "gpu/0": Status.UNHEALTHY, "gpu/1": Status.UNHEALTHY, "gpu/2": Status.OK},
        ),
        (
            "dcgmi_health_failure.txt",
            {"node": Status.CRITICAL, "gpu/3": Status.CRITICAL, "nvswitch/1": Status.UNHEALTHY},
        ),
        ("dcgmi_health_no_engine.txt", {"node": Status.UNKNOWN}),
    ],
)
def test_dcgm_health(fixture: str, expected: dict[str, Status]) -> None:
    runner = RecordedRunner({"dcgmi health -c": recorded(fixture)})
    results = list(DcgmHealthCheck(runner).run())
    assert {r.component: r.status for r in results} == expected
    assert all(r.check == "dcgm_health" for r in results)


def test_dcgm_incident_text_is_unwrapped() -> None:
    results = dcgmi_health.read((CMD / "dcgmi_health_warning.txt").read_text())
    entities = {r.component: (r.status, r.hint) for r in results}
    assert entities["gpu/0"] == (
        Status.UNHEALTHY,
        "PCIe system: Warning - Detected more than 8 PCIe replays per minute for GPU 0: 13",
    )
    runner = RecordedRunner({"dcgmi health -c": recorded("dcgmi_health_no_engine.txt", 255)})
    (result,) = DcgmHealthCheck(runner).run()
    assert "Unable to connect to host engine" in result.hint or "unable to establish" in result.hint


def test_dcgm_absent_or_hung() -> None:
    (absent,) = DcgmHealthCheck(RecordedRunner({})).run()
    assert absent.status is Status.UNKNOWN and absent.hint.startswith("dcgmi not found")
    hung = RecordedRunner({"dcgmi health -c": CommandError("dcgmi timed out after 20 s")})
    (result,) = DcgmHealthCheck(hung).run()
    assert (result.status, result.hint) == (Status.UNKNOWN, "dcgmi timed out after 20 s")


# --- NVMe -------------------------------------------------------------------------------------------


def smart(dev: str, name: str) -> tuple[str, CommandResult]:
    return f"nvme smart-log /dev/{dev} --output-format=json", recorded(name)


def test_nvme_healthy() -> None:
    runner = RecordedRunner(dict([smart("nvme0", "nvme_smart_log_healthy.json")]))
    results = list(NvmeCheck(runner, FIX / "sys_healthy").run())
    assert {(r.check, r.component): r.status for r in results} == {
        ("nvme_controller", "nvme0"): Status.OK,
        ("nvme_smart", "nvme0"): Status.OK,
    }
    values = {m.family: m.value for m in results[1].measurements}
    assert (
        values["peerwatch_agent_nvme_error_log_entries_total"] == 143
    )  # exported, not judged: tools log benign errors
    assert values["peerwatch_agent_nvme_endurance_used_percent"] == 2
    assert results[0].hint.startswith("SAMSUNG MZWLR3T8HBLS-00007: state live")


def test_nvme_faulty() -> None:
    runner = RecordedRunner(
        dict([smart("nvme0", "nvme_smart_log_faulty.json"), smart("nvme1", "nvme_smart_log_healthy.json")])
    )
    got = {(r.check, r.component): (r.status, r.hint) for r in NvmeCheck(runner, FIX / "sys_faulty").run()}
    assert got[("nvme_controller", "nvme1")][0] is Status.CRITICAL  # state dead
    status, hint = got[("nvme_smart", "nvme0")]
    assert status is Status.CRITICAL
    assert hint == (
        "available spare below threshold; NVM subsystem reliability degraded; back up and replace the drive; "
        "17 media errors; plan a replacement; 103% of rated endurance used"
    )


def test_nvme_without_cli_or_drives() -> None:
    got = {(r.check, r.component): r.status for r in NvmeCheck(RecordedRunner({}), FIX / "sys_healthy").run()}
    assert got == {("nvme_controller", "nvme0"): Status.OK, ("nvme_smart", "nvme0"): Status.UNKNOWN}
    failing = RecordedRunner(
        {"nvme smart-log /dev/nvme0 --output-format=json": CommandResult(1, "", "Permission denied\n")}
    )
    (_, result) = NvmeCheck(failing, FIX / "sys_healthy").run()
    assert (result.status, result.hint) == (Status.UNKNOWN, "nvme smart-log failed: Permission denied")
    assert {r.status for r in NvmeCheck(RecordedRunner({}), FIX / "sys_missing").run()} == {Status.UNKNOWN}


@pytest.mark.parametrize(
    ("text", "warning", "media"),
    [
        ('{"critical_warning":0,"media_errors":0,"num_err_log_entries":1}', 0, 0),
        ('{"critical_warning":{"value":4,"available_spare":0},"media_errors":2}', 4, 2),  # newer nvme-cli nests it
        ('{"media_errors":"3"}', None, 3),
    ],
)
def test_parse_smart_log(text: str, warning: int | None, media: int | None) -> None:
    log = parse_smart_log(text)
    assert (log.critical_warning, log.media_errors) == (warning, media)


def test_parse_smart_log_rejects_non_objects() -> None:
    with pytest.raises(ValueError):
        parse_smart_log("[]")
    with pytest.raises(ValueError):
        parse_smart_log("not json")
