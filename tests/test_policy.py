"""The decision policy and the diagnoser, each alone, on hand-made findings."""

from __future__ import annotations

import numpy as np
import pytest

from peerwatch.decide.actions import severity_and_action
from peerwatch.decide.policy import Policy, PolicySettings, fuse
from peerwatch.decide.rules import Diagnoser
from peerwatch.detect.context import Context
from peerwatch.detect.groups import MAIN
from peerwatch.model import DIAGNOSES, Evidence, Finding
from peerwatch.xid_catalog import xid_meaning

START, STEP = 1_000_000_020.0, 30.0
NODES = tuple(f"n{i:02d}" for i in range(20))


def ctx(steps: int = 60) -> Context:
    return Context((), NODES, START, STEP, steps, np.full((len(NODES), steps), MAIN))


def finding(
    node: str,
    col: int,
    score: float,
    signal: str = "m",
    detector: str = "peer",
    hint: str | None = None,
    component: str = "node",
) -> Finding:
    return Finding(START + col * STEP, node, component, detector, signal, score, Evidence(signal, (), score), hint)


def decide(findings: list[Finding], **settings: float) -> list:  # type: ignore[type-arg]
    return Policy(PolicySettings(**settings)).decide(ctx(), findings)  # type: ignore[arg-type]


def test_continuity_k_of_n() -> None:
    # 5 strong steps of 8 is not enough (k=6); 6 is, and the alarm is dated at the 6th.
    assert decide([finding("n01", c, 9) for c in (10, 11, 12, 14, 16)]) == []
    (alarm,) = decide([finding("n01", c, 9) for c in (10, 11, 12, 13, 15, 16)])
    assert alarm.ts == START + 16 * STEP and alarm.node == "n01"


def test_sure_strong_finding_opens_at_once_and_one_alarm_per_incident() -> None:
    found = [finding("n02", 20, 20, "xid:79", "state", "gpu_fallen_off_bus", "gpu/3")]
    found += [finding("n02", c, 15, "absent:gpu", "presence", "gpu_fallen_off_bus", "gpu/3") for c in range(21, 40)]
    (alarm,) = decide(found)
    assert alarm.ts == START + 20 * STEP
    assert (alarm.component, alarm.diagnosis, alarm.severity, alarm.action) == (
        "gpu/3",
        "gpu_fallen_off_bus",
        "critical",
        "swap",
    )


def test_a_move_shared_by_many_nodes_is_not_a_node_fault() -> None:
    # A checkpoint: every node's traffic drops for 8 steps at once.
    assert decide([finding(n, c, 12, "node_network_transmit_bytes_total") for n in NODES for c in range(30, 38)]) == []


def test_client_nfs_findings_are_the_servers_while_it_is_slow_and_for_a_while_after() -> None:
    server = [finding("cluster", c, 9, "nfs_rtt", "cluster", "nfs_storage", "nfs//data") for c in range(10, 20)]
    timeouts = "node_mountstats_nfs_operations_major_timeouts_total"
    during = [finding("n03", c, 7, timeouts, "counter") for c in range(15, 35)]  # holds 15 steps after the server
    assert [a.node for a in decide(server + during)] == ["cluster"]
    later = [finding("n03", c, 7, timeouts, "counter") for c in range(45, 55)]  # its own, well after
    assert sorted(a.node for a in decide(server + later)) == ["cluster", "n03"]


def test_incident_resolves_after_quiet_and_a_new_one_can_open() -> None:
    early = [finding("n03", c, 9) for c in range(5, 12)]
    late = [finding("n03", c, 9) for c in range(40, 47)]
    alarms = decide(early + late, quiet=10)
    assert [a.ts for a in alarms] == [START + 10 * STEP, START + 45 * STEP]
    assert [a.resolved_ts for a in alarms] == [START + 21 * STEP, START + 56 * STEP]  # 10 quiet steps after the last


def test_weak_signals_on_one_node_add_up() -> None:
    assert fuse([finding("n", 0, 4, "a"), finding("n", 0, 4, "b"), finding("n", 0, 4, "c")], 0.25) == 6.0
    assert fuse([finding("n", 0, 4, "a"), finding("n", 0, 3, "a")], 0.25) == 4.0  # one signal counts once
    assert fuse([], 0.25) == 0.0


@pytest.mark.parametrize(
    ("findings", "diagnosis", "component"),
    [
        # A sure hint wins over votes, and names the component.
        (
            [finding("n", 0, 20, "xid:94", "state", "ecc_hbm", "gpu/2"), finding("n", 0, 30, "node_load1")],
            "ecc_hbm",
            "gpu/2",
        ),
        # Votes: NVLink errors on one GPU.
        (
            [finding("n", 0, 8, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "counter", component="gpu/5")],
            "nvlink",
            "gpu/5",
        ),
        # NVLink errors on every GPU of the node: the switch.
        (
            [
                finding("n", 0, 8, "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "counter", component=f"gpu/{g}")
                for g in range(8)
            ],
            "nvswitch",
            "nvswitch",
        ),
        # Low NVLink bandwidth on every GPU is a node out of the job, not a switch.
        (
            [finding("n", 0, 8, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", component=f"gpu/{g}") for g in range(8)],
            "nvlink",
            "node",
        ),
        # A weak hint (one missed scrape) does not decide.
        (
            [
                finding("n", 0, 1.5, "absent:dcgm", "presence", "exporter_down"),
                finding("n", 0, 9, "node_memory_MemAvailable_bytes"),
            ],
            "memory_pressure",
            "node",
        ),
        (
            [finding("n", 0, 9, "node_mountstats_nfs_operations_queue_time_seconds_total", component="nfs//data")],
            "nfs_client",
            "nfs//data",
        ),
        ([finding("n", 0, 5, "some_unknown_metric")], "unknown", "node"),
        # An IB port's few errors name the cause of the NFS slowness they bring (symptom far from cause).
        (
            [
                finding("n", 0, 30, "node_mountstats_nfs_operations_response_time_seconds_total", component="nfs//a"),
                finding("n", 0, 40, "node_netstat_Tcp_RetransSegs"),
                finding("n", 0, 2.5, "node_infiniband_symbol_error_total", "counter", component="ib/mlx5_3:1"),
            ],
            "ib_link",
            "ib/mlx5_3:1",
        ),
        # Strong hardware evidence wins over any soft vote.
        (
            [
                finding("n", 0, 30, "node_memory_MemAvailable_bytes"),
                finding("n", 0, 6, "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", component="gpu/6"),
            ],
            "ecc_hbm",
            "gpu/6",
        ),
        # No NFS diagnosis without the storage path: retransmissions alone are the network's.
        (
            [finding("n", 0, 20, "node_netstat_Tcp_RetransSegs"), finding("n", 0, 6, "node_load1")],
            "performance_degradation",
            "node",
        ),
    ],
)
def test_diagnoser(findings: list[Finding], diagnosis: str, component: str) -> None:
    d = Diagnoser.default().diagnose(findings)
    assert (d.diagnosis, d.component) == (diagnosis, component)
    assert d.diagnosis in DIAGNOSES


def test_diagnoser_rejects_bad_rules() -> None:
    with pytest.raises(ValueError, match="rule 1"):
        Diagnoser.from_toml('[[rule]]\ndiagnosis = "nope"\nsignal = "x"\nweight = 1\n')
    with pytest.raises(ValueError, match="hint_priority"):
        Diagnoser.from_toml('hint_priority = ["bogus"]\n')


@pytest.mark.parametrize(
    ("xid", "diagnosis"),
    [
        (79, "gpu_fallen_off_bus"),
        (94, "ecc_hbm"),
        (119, "gsp_timeout"),
        (145, "nvlink"),
        (13, None),
        (31, None),
        (62, "gpu_hang"),
    ],
)
def test_xid_meanings(xid: int, diagnosis: str | None) -> None:
    assert xid_meaning(xid).diagnosis == diagnosis


def test_every_diagnosis_has_a_severity_and_action() -> None:
    for d in DIAGNOSES:
        severity, action = severity_and_action(d, 0.0)
        assert severity in ("warning", "critical") and action in ("watch", "drain", "swap")
    assert severity_and_action("ib_link", 5.0)[0] == "warning"
    assert severity_and_action("ib_link", 50.0)[0] == "critical"


def test_a_hard_failure_on_a_suspected_node_escalates_the_same_alarm() -> None:
    # A node slow for a while (soft findings), then an NVLink XID 30 steps later: one alarm, its
    # opening view kept, the XID an update dated at its own step; it never resolves in between.
    soft = [finding("n04", c, 9, "DCGM_FI_PROF_SM_ACTIVE", component="gpu/1") for c in range(10, 50)]
    xid = [finding("n04", 45, 20, "xid:74", "state", "nvlink", "gpu/1")]
    (alarm,) = decide(soft + xid)
    assert alarm.ts == START + 15 * STEP and alarm.resolved_ts is None
    line = alarm.as_json()
    assert (line["diagnosis"], line["severity"], line["action"]) == ("performance_degradation", "warning", "watch")
    escalation = {"ts": START + 45 * STEP, "severity": "critical", "diagnosis": "nvlink", "action": "swap"}
    escalation["component"] = "gpu/1"
    assert line["updates"] == [escalation]
    assert (alarm.diagnosis, alarm.severity, alarm.action, alarm.component) == ("nvlink", "critical", "swap", "gpu/1")


def test_symptom_counters_wait_for_continuity_hardware_counters_do_not() -> None:
    retrans = [finding("n05", c, 8, "node_nfs_rpc_retransmissions_total", "counter") for c in (10, 11)]
    assert decide(retrans) == []  # two steps of a node's retransmissions: not yet
    symbols = [finding("n05", 10, 8, "node_infiniband_symbol_error_total", "counter", component="ib/mlx5_0:1")]
    (alarm,) = decide(symbols)
    assert (alarm.ts, alarm.diagnosis, alarm.component) == (START + 10 * STEP, "ib_link", "ib/mlx5_0:1")


def test_exporters_restarting_across_the_cluster_are_shared_until_one_outlasts_them() -> None:
    hint = "exporter_down"
    absent = [finding(n, c, 15, "absent:dcgm-exporter", "presence", hint) for n in NODES[:5] for c in (20, 21)]
    assert decide(absent) == []
    late = [finding("n00", c, 15 + c - 21, "absent:dcgm-exporter", "presence", "exporter_down") for c in range(22, 30)]
    (alarm,) = decide(absent + late)
    assert (alarm.node, alarm.ts, alarm.diagnosis) == ("n00", START + 22 * STEP, "exporter_down")
