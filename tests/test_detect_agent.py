"""The agent's check verdicts as findings: hints by check and hint text, components, sharing, end to end."""

from __future__ import annotations

from importlib import resources

import numpy as np
import pytest

from enginekit import alarms_of
from framekit import make_frame
from peerwatch.catalog.load import Catalog
from peerwatch.decide import policy as policy_module
from peerwatch.detect.agent import (
    INFO,
    STATUS,
    XID_LAST,
    AgentCheckDetector,
    alarm_component,
    diagnosis_of,
    parse_check_rules,
)
from peerwatch.engine import context_of
from peerwatch.frames import Frame
from peerwatch.model import DIAGNOSES, Finding
from streamkit import assert_chunk_invariant, findings_after_rows_join

START, STEP, STEPS, NODES, ONSET = 1_764_460_800.0, 30.0, 60, 8, 30
FAULT = "gpu03"
BUS = ("0000:1b:00.0", "0000:3b:00.0", "0000:5b:00.0", "0000:9b:00.0")
OK_HINT = "no ECC, remapping, retirement or throttle problem"
LOST = "Unable to determine the device handle for GPU 0000:5b:00.0: Unknown Error: GPU unreachable; drain and reboot"
Row = tuple[str, str, str]  # node, check, component


def frame(name: str, rows: list[dict[str, str]], values: np.ndarray) -> Frame:
    return make_frame(name, rows, values, START, STEP)


def agent_frames(status: dict[Row, np.ndarray], hints: dict[Row, str]) -> dict[str, Frame]:
    """Every node runs nvidia_smi on 4 GPUs, infiniband_port on mlx5_0:1, cpu_frequency_cap; all OK unless given."""
    rows: list[Row] = []
    for n in range(NODES):
        node = f"gpu{n:02d}"
        rows += [(node, "nvidia_smi", b) for b in BUS]
        rows += [(node, "infiniband_port", "mlx5_0:1"), (node, "cpu_frequency_cap", "node")]
    rows += [r for r in status if r not in rows]
    labels = [{"instance": f"{n}:9835", "check": c, "component": comp} for n, c, comp in rows]
    values = np.stack([status.get(r, np.zeros(STEPS)) for r in rows])
    info_rows = [dict(lab, status="x", hint=hints.get(r, OK_HINT)) for lab, r in zip(labels, rows, strict=True)]
    gpu_rows = [{"instance": f"gpu{n:02d}:9835", "gpu": str(g), "pci_bus_id": b} for n in range(NODES)
                for g, b in enumerate(BUS)]  # fmt: skip
    return {
        "peerwatch_agent_check_status": frame("peerwatch_agent_check_status", labels, values),
        "peerwatch_agent_check_info": frame("peerwatch_agent_check_info", info_rows, np.ones((len(rows), STEPS))),
        "peerwatch_agent_gpu_info": frame("peerwatch_agent_gpu_info", gpu_rows, np.ones((len(gpu_rows), STEPS))),
    }


def step_status(before: float, after: float) -> np.ndarray:
    v = np.full(STEPS, float(before))
    v[ONSET:] = after
    return v


def findings(frames: dict[str, Frame]) -> list[Finding]:
    return AgentCheckDetector().scan(context_of(frames, Catalog.default()), None)[0]


def test_critical_gpu_verdict_is_a_sure_finding_on_that_gpu_from_onset() -> None:
    frames = agent_frames({(FAULT, "nvidia_smi", BUS[2]): step_status(0, 2)}, {(FAULT, "nvidia_smi", BUS[2]): LOST})
    out = findings(frames)
    assert out and {(f.node, f.component, f.hint, f.score, f.detector) for f in out} == {
        (FAULT, "gpu/2", "gpu_fallen_off_bus", 16.0, "agent")
    }
    assert min(f.ts for f in out) == START + ONSET * STEP and len(out) == STEPS - ONSET
    assert "CRITICAL" in out[0].evidence.note and "device handle" in out[0].evidence.note


@pytest.mark.parametrize("value", [0.0, 3.0, np.nan])
def test_ok_unknown_and_missing_verdicts_give_nothing(value: float) -> None:
    assert findings(agent_frames({(FAULT, "nvidia_smi", BUS[1]): step_status(0, value)}, {})) == []


def test_a_verdict_bad_since_the_start_is_still_reported() -> None:
    port = (FAULT, "infiniband_port", "mlx5_0:1")
    out = findings(agent_frames({port: np.full(STEPS, 2.0)}, {port: "port DOWN / Polling: check cable"}))
    assert len(out) == STEPS and out[0].ts == START
    assert {(f.component, f.hint) for f in out} == {("ib/mlx5_0:1", "ib_link")}


def test_missed_scrapes_are_no_verdict_and_nothing_crashes() -> None:
    v = step_status(0, 2)
    v[ONSET + 3 :: 4] = np.nan
    out = findings(agent_frames({(FAULT, "nvidia_smi", BUS[0]): v}, {(FAULT, "nvidia_smi", BUS[0]): LOST}))
    assert len(out) == int(np.sum(v == 2)) and all(f.component == "gpu/0" for f in out)


def test_xid_check_takes_the_quoted_xid_else_the_gpus_last_xid() -> None:
    quoted, bare = (FAULT, "xid", BUS[1]), ("gpu05", "xid", BUS[3])
    frames = agent_frames(
        {quoted: step_status(0, 2), bare: step_status(0, 2)},
        {quoted: "Xid 79 GPU_HAS_FALLEN_OFF_BUS: drain and reboot the node (seen: 13, 79)", bare: "Xid 48, 13"},
    )
    xid_rows = [{"instance": "gpu05:9835", "gpu": "3", "pci_bus_id": BUS[3]}]
    last = np.full((1, STEPS), np.nan)
    last[0, ONSET - 5 :] = 48  # the agent's last Xid for that GPU, seen a few steps before the verdict
    frames["peerwatch_agent_xid_last"] = frame("peerwatch_agent_xid_last", xid_rows, last)
    got = {(f.node, f.component, f.hint) for f in findings(frames)}
    assert got == {(FAULT, "gpu/1", "gpu_fallen_off_bus"), ("gpu05", "gpu/3", "ecc_hbm")}


def test_unhealthy_is_watched_but_a_verdict_most_nodes_share_is_their_set_up() -> None:
    one = {(FAULT, "cpu_frequency_cap", "node"): step_status(0, 1)}
    out = findings(agent_frames(one, {}))
    assert {(f.node, f.component, f.hint, f.score) for f in out} == {(FAULT, "node", "performance_degradation", 8.0)}
    everyone = {(f"gpu{n:02d}", "cpu_frequency_cap", "node"): step_status(0, 1) for n in range(NODES)}
    assert findings(agent_frames(everyone, {})) == []
    everyone[(FAULT, "cpu_frequency_cap", "node")] = step_status(0, 2)  # CRITICAL is never set aside
    assert {f.node for f in findings(agent_frames(everyone, {}))} == {FAULT}


def test_deterministic() -> None:
    frames = agent_frames({(FAULT, "nvidia_smi", BUS[2]): step_status(0, 2)}, {(FAULT, "nvidia_smi", BUS[2]): LOST})
    assert findings(frames) == findings(frames)


@pytest.mark.parametrize(
    ("check", "hint", "last_xid", "expected"),
    [
        ("pcie_link", "limited width: x8 < x16; reseat or swap", None, "pcie_downgrade"),
        ("infiniband_errors", "symbol_error +12", None, "ib_link"),
        ("cpu_frequency", "fastest CPU at 31% of max under load 12", None, "performance_degradation"),
        ("nvme_smart", "critical_warning 0x4", None, "unknown"),
        ("nvidia_smi", "2 uncorrected ECC errors: drain and reset the GPU", None, "ecc_hbm"),
        ("nvidia_smi", "clocks throttled by hw_thermal_slowdown: check cooling and power", None, "thermal_throttle"),
        ("nvidia_smi", "clocks throttled by hw_power_brake_slowdown: check cooling and power", None, "power_throttle"),
        ("nvidia_smi", "something new", None, "unknown"),
        ("dcgm_health", "GPU 2's NVLink link 3 is currently down", None, "nvlink"),
        ("dcgm_health", "Detected a XID 94 error on GPU 1", None, "ecc_hbm"),
        ("dcgm_health", "NvSwitch 0 fatal error", None, "nvswitch"),
        ("dcgm_health", "Volatile double-bit ECC error(s) in GPU 0", None, "ecc_hbm"),
        ("dcgm_health", "", None, "unknown"),
        ("xid", "Xid 119 GSP_RPC_TIMEOUT: reset the GPU", None, "gsp_timeout"),
        ("xid", "Xid 74, 74", 74.0, "nvlink"),
        ("xid", "", None, "unknown"),  # no Xid known: the catch-all row
        ("xid", "SXid 20034 (Fatal, Link 62 LTSSM Fault Up): fatal NVSwitch error", None, "nvswitch"),
        (
            "xid",
            "Xid 79 (GPU has fallen off the bus, NVRM report without an Xid line): drain",
            None,
            "gpu_fallen_off_bus",
        ),
        ("a_future_check", "whatever", None, "unknown"),
    ],
)
def test_diagnosis_table(check: str, hint: str, last_xid: float | None, expected: str) -> None:
    assert diagnosis_of(check, hint, last_xid)[0] == expected


def test_check_table_rejects_unknown_words_and_bad_patterns() -> None:
    good = parse_check_rules("check,hint_pattern,diagnosis,why\nx,,xid,\ny,thermal,thermal_throttle,\n")
    assert [r.diagnosis for r in good] == ["xid", "thermal_throttle"]
    with pytest.raises(ValueError, match=r"t\.csv:2: unknown diagnosis 'overheat'"):
        parse_check_rules("check,hint_pattern,diagnosis,why\nx,,overheat,\n", "t.csv")
    with pytest.raises(ValueError, match="bad hint_pattern"):
        parse_check_rules("check,hint_pattern,diagnosis,why\nx,(,unknown,\n")
    shipped = resources.files("peerwatch.decide").joinpath("agent_checks.csv").read_text("utf-8")
    assert all(r.diagnosis in (*DIAGNOSES, "xid") for r in parse_check_rules(shipped))


@pytest.mark.parametrize(
    ("component", "expected"),
    [
        ("0000:3b:00.0", "gpu/1"),
        ("00000000:3B:00.0", "gpu/1"),  # dcgm-exporter's spelling
        ("0000:af:00.0", "node"),  # a NIC or NVMe behind a PCI address
        ("mlx5_0:1", "ib/mlx5_0:1"),
        ("nvme0", "disk/nvme0"),
        ("gpu/5", "gpu/5"),
        ("nvswitch/0", "nvswitch"),
        ("nvswitch/0000:05:00.0", "nvswitch"),  # the xid check's SXid component
        ("node", "node"),
        ("unknown", "node"),
    ],
)
def test_components(component: str, expected: str) -> None:
    assert alarm_component(component, "n1", {("n1", "0000:3b:00.0"): "1"}) == expected


def test_end_to_end_a_critical_check_opens_an_alarm_at_once() -> None:
    assert "agent" in policy_module.SURE_DETECTORS  # a CRITICAL verdict needs no continuity wait
    frames = agent_frames(
        {(FAULT, "nvidia_smi", BUS[2]): step_status(0, 2), ("gpu05", "cpu_frequency_cap", "node"): step_status(0, 3)},
        {(FAULT, "nvidia_smi", BUS[2]): LOST},
    )
    ctx = context_of(frames, Catalog.default())
    alarms = alarms_of(ctx, [AgentCheckDetector()])
    assert [(a.node, a.component, a.diagnosis, a.severity, a.action) for a in alarms] == [
        (FAULT, "gpu/2", "gpu_fallen_off_bus", "critical", "swap")
    ]
    delay = (alarms[0].ts - START) / STEP - ONSET
    assert delay == 0


def story() -> dict[str, Frame]:
    """Verdicts that flap, a hint text replaced at step 35, Xids reported long before their verdict;
    gpu08's rows, a hint row and an xid_last row come last in their frames (for appending)."""
    lost, bare = (FAULT, "nvidia_smi", BUS[2]), ("gpu05", "xid", BUS[3])
    flaky, late = ("gpu01", "infiniband_port", "mlx5_0:1"), ("gpu08", "cpu_frequency_cap", "node")
    flapping = step_status(0, 1)
    flapping[ONSET + 3 :: 4] = np.nan
    flapping[ONSET + 5 :: 7] = 2
    frames = agent_frames(
        {lost: step_status(0, 2), bare: step_status(0, 2), flaky: flapping, late: step_status(1, 2)},
        {bare: "the GPU reported an error", flaky: "port DOWN / Polling: check cable"},
    )
    info = frames[INFO]
    rows = [k.label_dict() for k in info.keys]
    where = next(
        i for i, r in enumerate(rows) if (r["instance"], r["check"], r["component"]) == (f"{FAULT}:9835", *lost[1:])
    )
    values = np.vstack([info.values, np.full(STEPS, np.nan)])
    values[where, 35:] = np.nan  # the hint text changes: the old one is no longer exported
    values[-1, 35::2] = 1.0  # ...and the new one only every other scrape
    frames[INFO] = frame(INFO, [*rows, dict(rows[where], hint=LOST)], values)
    xid_rows = [{"instance": "gpu05:9835", "gpu": "3", "pci_bus_id": BUS[3]}]
    xid_rows.append(dict(xid_rows[0], source="dmesg"))
    last = np.full((2, STEPS), np.nan)
    last[0, 10], last[0, 45], last[1, 50] = 48, 79, 13  # reported once each: held until the next
    frames[XID_LAST] = frame(XID_LAST, xid_rows, last)
    return frames


def test_scanning_in_chunks_finds_what_one_scan_finds() -> None:
    ctx = context_of(story(), Catalog.default())
    detector = AgentCheckDetector()
    assert {f.hint for f in detector.scan(ctx, None)[0]} >= {"gpu_fallen_off_bus", "ecc_hbm", "ib_link"}
    assert assert_chunk_invariant(detector, ctx, [17, 30, 31, 36, 46, STEPS - 1]) > 0
    assert_chunk_invariant(detector, ctx, range(1, STEPS))  # the live service: one step at a time


@pytest.mark.parametrize("cut", [1, 20])
def test_rows_and_nodes_appearing_later_are_read_when_they_come(cut: int) -> None:
    """The first chunk lacks gpu08 (its status and hint rows), the new hint row and an xid_last row."""
    whole = story()
    keep = {name: len(f.keys) - {STATUS: 1, INFO: 2, XID_LAST: 1}.get(name, 0) for name, f in whole.items()}
    partial = {n: frame(n, [k.label_dict() for k in f.keys[: keep[n]]], f.values[: keep[n]]) for n, f in whole.items()}
    first, ctx = context_of(partial, Catalog.default()), context_of(whole, Catalog.default())
    assert first.nodes == ctx.nodes[:-1]
    later, want = findings_after_rows_join(AgentCheckDetector(), first, ctx, cut)
    assert later == want and any(f.node == "gpu08" for f in later)
