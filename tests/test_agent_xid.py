"""Kernel-log reading and the Xid check, on recorded logs in dmesg / journalctl / kern.log formats."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

import pytest

from peerwatch.agent.checks import Status
from peerwatch.agent.kernel_log import (
    CommandLogSource,
    FileLogSource,
    FirstAvailable,
    KernelLog,
    KernelLogUnavailable,
    LogLine,
    boot_time,
    parse_line,
)
from peerwatch.agent.nvidia import QUERY_FIELDS, NvidiaSmi
from peerwatch.agent.runner import CommandError, CommandResult, RecordedRunner
from peerwatch.agent.xid import UNKNOWN_GPU, XidCheck, parse_xids
from peerwatch.agent.xid_policy import BUCKET_POLICY, XID_OVERRIDES, classify, recovery_action
from peerwatch.xid_catalog import load_catalog, parse_catalog

FIX = Path(__file__).parent / "fixtures" / "agent"
LOGS = FIX / "logs"
BOOT = 1740900000.0  # btime in fixtures/agent/proc_*/stat
SMI_QUERY = f"nvidia-smi --query-gpu={QUERY_FIELDS} --format=csv,noheader,nounits"


def local(stamp: str) -> float:
    return time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S"))


@pytest.mark.parametrize(
    ("raw", "ts", "text"),
    [
        ("[ 2345.678901] NVRM: Xid (PCI:0000:3b:00): 79, x", BOOT + 2345.678901, "NVRM: Xid (PCI:0000:3b:00): 79, x"),
        ("[    0.000000] Linux version", BOOT, "Linux version"),
        (
            "2025-03-02T10:15:42+0000 node7 kernel: NVRM: x",
            datetime.fromisoformat("2025-03-02T10:15:42+00:00").timestamp(),
            "NVRM: x",
        ),
        (
            "2025-03-02T10:15:42.123456+01:00 node7 kernel: msg",
            datetime.fromisoformat("2025-03-02T09:15:42.123456+00:00").timestamp(),
            "msg",
        ),
        (
            "2025-03-02T10:15:42,500000+00:00 NVRM: iso dmesg",
            datetime.fromisoformat("2025-03-02T10:15:42.5+00:00").timestamp(),
            "NVRM: iso dmesg",
        ),
        ("[Sun Mar  2 10:15:42 2025] NVRM: ctime", local("2025-03-02 10:15:42"), "NVRM: ctime"),
        ("no timestamp at all", None, "no timestamp at all"),
    ],
)
def test_timestamp_formats(raw: str, ts: float | None, text: str) -> None:
    line = parse_line(raw, BOOT)
    assert line.text == text
    assert line.ts == pytest.approx(ts) if ts is not None else line.ts is None


def test_syslog_stamp_keeps_wall_time_and_strips_monotonic_prefix() -> None:
    line = parse_line("Mar  2 10:15:42 gpu-node-07 kernel: [  870.412903] NVRM: Xid (PCI:0000:3b:00): 31, x", BOOT)
    assert line.text == "NVRM: Xid (PCI:0000:3b:00): 31, x"
    assert line.ts is not None and time.localtime(line.ts)[1:6] == (3, 2, 10, 15, 42)


def test_dmesg_without_boot_time_has_no_wall_time() -> None:
    assert parse_line("[ 12.5] NVRM: x", None) == LogLine(None, "NVRM: x")


def test_boot_time_reads_btime(tmp_path: Path) -> None:
    assert boot_time(FIX / "proc_idle") == BOOT
    assert boot_time(tmp_path) is None


@pytest.mark.parametrize(
    ("text", "bus", "xid", "message"),
    [
        (
            "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
            "0000:3b:00.0",
            79,
            "GPU has fallen off the bus.",
        ),
        (
            "NVRM: Xid (PCI:0000:3B:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
            "0000:3b:00.0",
            79,
            "GPU has fallen off the bus.",
        ),
        (
            "NVRM: Xid (PCI:0000:c6:00): 79, pid=1101234, name=nvc:[driver], GPU has fallen off the bus.",
            "0000:c6:00.0",
            79,
            "GPU has fallen off the bus.",
        ),
        (
            "NVRM: Xid (PCI:0008:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
            "0008:01:00.0",
            154,
            "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
        ),
        (
            "NVRM: Xid 154, GPU recovery action changed to 0x2 (Node Reboot Required)",
            UNKNOWN_GPU,
            154,
            "GPU recovery action changed to 0x2 (Node Reboot Required)",
        ),
        (
            "NVRM: Xid (PCI:0000:0d:00): 51, BAD_TSG encountered on runlist: 0 with error code: 4",
            "0000:0d:00.0",
            51,
            "BAD_TSG encountered on runlist: 0 with error code: 4",
        ),
    ],
)
def test_xid_line_variants(text: str, bus: str, xid: int, message: str) -> None:
    (event,) = parse_xids([LogLine(1.0, text)])
    assert (event.bus_id, event.xid, event.message, event.ts) == (bus, xid, message, 1.0)


@pytest.mark.parametrize(
    "text",
    [
        "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)",
        "NVRM: GPU 0000:9a:00.0: GPU has fallen off the bus.",
        "NVRM: Xid (PCI:0000:66:00): abc, pid=2280636",
        "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.161.08",
    ],
)
def test_non_xid_lines_are_ignored(text: str) -> None:
    assert parse_xids([LogLine(None, text)]) == []


def test_catalogue_copy_is_complete_and_every_bucket_is_mapped() -> None:
    catalog = load_catalog()
    assert set(range(0, 173)) <= set(catalog)
    assert catalog[79].immediate_action == "RESTART_BM"
    buckets = {e.immediate_action for x, e in catalog.items() if x and e.immediate_action and x not in XID_OVERRIDES}
    assert buckets - set(BUCKET_POLICY) == set(), "a catalogue bucket has no status mapping"
    assert all(x in XID_OVERRIDES for x, e in catalog.items() if x and not e.immediate_action)


def test_catalogue_loader_names_bad_rows() -> None:
    with pytest.raises(ValueError, match="missing columns"):
        parse_catalog("xid,mnemonic\n1,A\n")
    header = "xid,mnemonic,description,immediate_action,investigatory_action,note\n"
    with pytest.raises(ValueError, match=r"x\.csv:2: xid 'x1'"):
        parse_catalog(header + "x1,A,B,C,D,E\n", "x.csv")


@pytest.mark.parametrize(
    ("xid", "message", "status"),
    [
        (79, "GPU has fallen off the bus.", Status.CRITICAL),  # RESTART_BM
        (119, "Timeout after 6s of waiting for RPC response", Status.CRITICAL),  # RESET_GPU
        (48, "DBE", Status.CRITICAL),
        (74, "NVLink: fatal error", Status.CRITICAL),
        (95, "Uncontained", Status.CRITICAL),
        (140, "ECC unrecovered", Status.CRITICAL),
        (149, "NETIR_INT Fatal", Status.UNHEALTHY),
        (63, "Row Remapper", Status.UNHEALTHY),
        (64, "Row remap failure", Status.CRITICAL),
        (92, "SBE rate", Status.UNHEALTHY),
        (94, "Contained", Status.UNHEALTHY),
        (13, "Graphics Exception", Status.OK),
        (31, "MMU Fault", Status.OK),
        (43, "Ch 00000008", Status.OK),
        (45, "Ch 00000010", Status.OK),
        (171, "", Status.CRITICAL),
        (162, "", Status.OK),
        (185, "Sparing event", Status.UNHEALTHY),  # newer than the catalogue
        (154, "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", Status.CRITICAL),
        (154, "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", Status.CRITICAL),
        (154, "GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)", Status.CRITICAL),
        (154, "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)", Status.OK),
        (154, "GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)", Status.UNHEALTHY),
        (154, "something else", Status.UNHEALTHY),
    ],
)
def test_xid_policy(xid: int, message: str, status: Status) -> None:
    assert classify(xid, message, load_catalog()).status is status


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ("GPU recovery action changed from 0x0 (None) to 0x1 (PF FLR)", 1),
        ("GPU recovery action changed to 0x2 (OS Reboot)", 2),
        ("GPU recovery action changed from 0x0 (None) to 0x9 (Node Reboot Required)", 2),  # unknown code, known words
        ("GPU recovery action changed from 0x0 (None) to 0x9", None),
        ("no recovery words", None),
    ],
)
def test_recovery_action_codes(message: str, code: int | None) -> None:
    assert recovery_action(message) == code


def fixed_log(name: str) -> FileLogSource:
    return FileLogSource(LOGS / name, lambda: BOOT)


def smi(csv_name: str | None) -> NvidiaSmi:
    outputs = {SMI_QUERY: CommandResult(0, (FIX / "commands" / csv_name).read_text())} if csv_name else {}
    return NvidiaSmi(RecordedRunner(outputs))


def results_by_component(check: XidCheck) -> dict[str, tuple[Status, str]]:
    return {r.component: (r.status, r.hint) for r in check.run()}


def test_faulty_dmesg_per_gpu() -> None:
    check = XidCheck(fixed_log("dmesg_faulty.txt"), smi("nvidia_smi_faulty.csv"), sys_root=FIX / "sys_faulty")
    got = results_by_component(check)
    assert {k: s for k, (s, _) in got.items()} == {
        "0000:18:00.0": Status.OK,  # 13, 13, 43: application-level
        "0000:3b:00.0": Status.UNHEALTHY,  # 94 + 63 + 45
        "0000:5d:00.0": Status.CRITICAL,  # 119 GSP timeout
        "0000:9a:00.0": Status.CRITICAL,  # 79 + 154 reboot
        "0000:cc:00.0": Status.CRITICAL,  # 48 DBE
        "0000:ee:00.0": Status.UNHEALTHY,  # 185: not in the catalogue
        "nvswitch/0000:05:00.0": Status.UNHEALTHY,  # SXid 12028, Non-fatal
    }
    assert "13x2" in got["0000:18:00.0"][1]
    assert got["0000:9a:00.0"][1].startswith("Xid 154 GPU_RECOVERY_ACTION_CHANGED: driver requires a node reboot")
    assert "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS" not in got["0000:9a:00.0"][1]  # the latest of equal verdicts


def test_xid_metrics_carry_gpu_index_and_time() -> None:
    check = XidCheck(fixed_log("dmesg_faulty.txt"), smi("nvidia_smi_faulty.csv"), sys_root=FIX / "sys_faulty")
    (result,) = [r for r in check.run() if r.component == "0000:3b:00.0"]
    values = {(m.family, dict(m.labels).get("xid")): (m.value, dict(m.labels)["gpu"]) for m in result.measurements}
    assert values[("peerwatch_agent_xid_last", None)] == (45, "1")
    assert values[("peerwatch_agent_xid_count", "94")] == (1, "1")
    assert values[("peerwatch_agent_xid_last_seen_timestamp_seconds", "63")][0] == pytest.approx(BOOT + 3511.870301)


def test_gpus_without_xid_are_reported_ok() -> None:
    check = XidCheck(fixed_log("dmesg_healthy.txt"), smi("nvidia_smi_healthy.csv"), sys_root=FIX / "sys_healthy")
    assert results_by_component(check) == {
        "0000:18:00.0": (Status.OK, "no Xid in " + str(LOGS / "dmesg_healthy.txt")),
        "0000:3b:00.0": (Status.OK, "no Xid in " + str(LOGS / "dmesg_healthy.txt")),
    }


@pytest.mark.parametrize(("sys_tree", "status"), [("sys_healthy", Status.OK), ("sys_missing", Status.UNKNOWN)])
def test_silence_is_ok_only_with_the_driver_loaded(sys_tree: str, status: Status) -> None:
    check = XidCheck(fixed_log("dmesg_healthy.txt"), smi(None), sys_root=FIX / sys_tree)
    (result,) = check.run()
    assert (result.component, result.status) == ("node", status)


def test_journal_and_kern_log_formats() -> None:
    journal = results_by_component(XidCheck(fixed_log("journal_k.txt"), sys_root=FIX / "sys_healthy"))
    assert journal["0000:18:00.0"][0] is Status.CRITICAL and "GPU reset" in journal["0000:18:00.0"][1]
    kern = results_by_component(XidCheck(fixed_log("kern.log"), sys_root=FIX / "sys_healthy"))
    assert kern == {"0000:3b:00.0": (Status.OK, kern["0000:3b:00.0"][1])}
    assert kern["0000:3b:00.0"][1].endswith("(seen: 31, 43)")


def test_old_xids_stop_setting_status() -> None:
    critical_at = BOOT + 9120.443198  # the Xid 48 line
    check = XidCheck(fixed_log("dmesg_faulty.txt"), max_age=3600, clock=lambda: critical_at + 7200)
    (result,) = [r for r in check.run() if r.component == "0000:cc:00.0"]
    assert result.status is Status.OK and "1 older than 3600 s ignored" in result.hint
    assert any(m.family == "peerwatch_agent_xid_count" for m in result.measurements)
    fresh = XidCheck(fixed_log("dmesg_faulty.txt"), max_age=3600, clock=lambda: critical_at + 60)
    assert {r.component: r.status for r in fresh.run()}["0000:cc:00.0"] is Status.CRITICAL


def test_unreadable_log_is_unknown(tmp_path: Path) -> None:
    (result,) = XidCheck(FileLogSource(tmp_path / "missing.log")).run()
    assert result.status is Status.UNKNOWN and "kernel log unreadable" in result.hint


def test_dmesg_source_and_fallback_chain(tmp_path: Path) -> None:
    denied = RecordedRunner(
        {"dmesg": CommandResult(1, "", "dmesg: read kernel buffer failed: Operation not permitted\n")}
    )
    no_journal = RecordedRunner(
        {"journalctl -k": CommandResult(0, "-- No entries --\n", "No journal files were found.\n")}
    )
    with pytest.raises(KernelLogUnavailable, match="Operation not permitted"):
        CommandLogSource(denied).read()
    with pytest.raises(KernelLogUnavailable, match="No journal files"):
        CommandLogSource(no_journal, ("journalctl", "-k")).read()
    with pytest.raises(KernelLogUnavailable, match="not found"):
        CommandLogSource(RecordedRunner({})).read()
    chain = FirstAvailable(
        [CommandLogSource(denied), CommandLogSource(no_journal, ("journalctl", "-k")), fixed_log("kern.log")]
    )
    log = chain.read()
    assert log.where.endswith("kern.log") and len(log.lines) == 4
    with pytest.raises(KernelLogUnavailable, match="Operation not permitted; journalctl -k: No journal"):
        FirstAvailable([CommandLogSource(denied), CommandLogSource(no_journal, ("journalctl", "-k"))]).read()
    timeout = RecordedRunner({"dmesg": CommandError("dmesg timed out after 30 s")})
    with pytest.raises(KernelLogUnavailable, match="timed out"):
        CommandLogSource(timeout).read()


def test_dmesg_output_is_parsed_with_boot_time() -> None:
    text = (LOGS / "dmesg_faulty.txt").read_text()
    log = CommandLogSource(RecordedRunner({"dmesg": CommandResult(0, text)}), boot=lambda: BOOT).read()
    assert isinstance(log, KernelLog) and log.where == "dmesg"
    assert log.lines[0].ts == BOOT and log.lines[0].text.startswith("Linux version")
