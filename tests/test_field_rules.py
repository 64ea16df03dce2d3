"""Rules that real clusters need (issue: detection that holds on clusters it was not built on).

Each test runs a small simulated recording through the whole engine, shows the rule working, and
where it can shows what happens without it: hard states open at once, one impossible value moves
no reference, cluster transitions are not faults, the cause is named before its symptoms, and one
fault is one alarm. Every rule gives the same alarms streamed step by step as analysed whole.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from enginekit import analysed, assert_same_alarms, record, streamed
from peerwatch.decide.policy import Policy
from peerwatch.decide.rules import Diagnoser
from peerwatch.detect.groups import IDLE, MAIN
from peerwatch.detect.transitions import held_nodes
from peerwatch.frames import Frame
from peerwatch.model import Alarm
from peerwatch.simulate import Benign, ClusterSpec, FaultRequest, Scenario

SPEC = ClusterSpec(nodes=16, spares=1)
TRANSITIONS = Benign(restarts=1, stalls=2, restart_exporters=0.8, agent_restarts=1)


@pytest.fixture(scope="module")
def port_down(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Frame], Path]:
    faults = (FaultRequest("ib_port_down", node="gpu006", at=0.6),)
    return record(Scenario("port_down", SPEC, 1.5, 5, faults, TRANSITIONS), tmp_path_factory.mktemp("port_down"))


def test_an_ib_port_that_goes_down_is_alarmed_within_two_steps(port_down: tuple[dict[str, Frame], Path]) -> None:
    frames, labels = port_down
    alarms, result = analysed(frames, labels)
    (outcome,) = result.outcomes
    first = outcome.first
    assert first is not None and first.diagnosis == "ib_link" and first.component.startswith("ib/mlx5_")
    step = next(iter(frames.values())).step
    assert first.ts - outcome.fault.onset_ts <= 2 * step  # waited 180 s for continuity before
    assert result.node_alarms == result.node_alarms_matched == 1, alarms
    assert_same_alarms(streamed(frames), alarms)


@pytest.fixture(scope="module")
def glitch(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Frame], Path]:
    faults = (FaultRequest("pcie_downgrade", node="gpu009", gpu=4, at=0.6),)
    scenario = Scenario("glitch", SPEC, 1.5, 3, faults, Benign(pcie_glitches=1))
    return record(scenario, tmp_path_factory.mktemp("glitch"))


def test_one_impossible_pcie_width_moves_no_reference(glitch: tuple[dict[str, Frame], Path]) -> None:
    frames, labels = glitch
    width = frames["DCGM_FI_DEV_PCIE_LINK_WIDTH"].values
    assert np.nanmax(width) == 32  # one GPU reports 32 lanes for a while
    alarms, result = analysed(frames, labels)
    (outcome,) = result.outcomes
    assert outcome.detected and outcome.first is not None and outcome.first.component == "gpu/4"
    assert result.node_alarms == result.node_alarms_matched == 1, alarms  # every node was "downgraded" before
    assert_same_alarms(streamed(frames), alarms)


@pytest.fixture(scope="module")
def transitions(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Frame], Path]:
    benign = replace(TRANSITIONS, restarts=2, stalls=3)
    return record(Scenario("transitions", SPEC, 2.0, 11, (), benign), tmp_path_factory.mktemp("transitions"))


def test_restarts_stalls_and_exporters_restarted_with_the_job_raise_nothing(
    transitions: tuple[dict[str, Frame], Path],
) -> None:
    frames, labels = transitions
    alarms, _ = analysed(frames, labels)
    assert alarms == []
    assert_same_alarms(streamed(frames), alarms)


def test_an_exporter_down_longer_than_the_restart_is_still_alarmed(tmp_path: Path) -> None:
    faults = (FaultRequest("exporter_down", node="gpu004", at=0.5),)
    frames, labels = record(Scenario("down", SPEC, 1.5, 11, faults, TRANSITIONS), tmp_path)
    alarms, result = analysed(frames, labels)
    assert all(o.detected and o.diagnosed for o in result.outcomes), alarms


def test_held_nodes_follow_the_jobs_dips_and_settle_after() -> None:
    steps, step = 80, 30.0
    activity = np.full((6, steps), 95.0)
    activity[:5, 40:46] = 5.0  # a stall: five nodes wait together
    activity[5, 40:46] = 95.0  # one node stays busy: the odd one out is not held
    activity[2, 46:50] = np.nan  # its exporter restarts as it comes back
    groups = np.full((6, steps), MAIN)
    groups[4] = IDLE  # an idle spare (its exporters may restart with the rest) is held as well
    held, _ = held_nodes(activity, groups, step)
    assert held is not None
    settle = math.ceil(180.0 / step)
    assert held[0, 40:46].all() and held[0, 46 : 46 + settle].all() and not held[0, 46 + settle :].any()
    assert held[2, 40 : 46 + settle].all()  # unknown while the job is down counts as taking part
    assert not held[5].any() and held[4, 40:46].all() and not held[:, :40].any()
    # Streamed in chunks, the same.
    parts, state = [], None
    for a, b in ((0, 30), (30, 41), (41, 42), (42, steps)):
        h, state = held_nodes(activity[:, a:b], groups[:, a:b], step, state)
        assert h is not None
        parts.append(h)
    assert (np.concatenate(parts, axis=1) == held).all()


@pytest.fixture(scope="module")
def marginal(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Frame], Path]:
    # A marginal IB link that also carries the node's NFS traffic: the NFS client's round trips and
    # retransmissions move far more than the port's few symbol errors and recoveries.
    faults = (FaultRequest("ib_link_marginal", node="gpu007", at=0.5),)
    return record(Scenario("marginal", SPEC, 1.5, 1, faults, Benign()), tmp_path_factory.mktemp("marginal"))


def test_the_ib_port_is_named_not_the_nfs_slowness_it_causes(marginal: tuple[dict[str, Frame], Path]) -> None:
    frames, labels = marginal
    alarms, result = analysed(frames, labels)
    (outcome,) = result.outcomes
    assert outcome.first is not None and (outcome.first.diagnosis, outcome.first.component[:3]) == ("ib_link", "ib/")
    (alarm,) = [a for a in alarms if a.node == "gpu007"]
    assert any(e.metric.startswith("node_mountstats_nfs") for e in alarm.evidence)  # the symptom, as evidence
    # Votes alone, without hardware evidence first, read the same findings as an NFS network problem.
    votes_only = Policy(diagnoser=replace(Diagnoser.default(), hardware_min=math.inf, symptoms=frozenset()))
    _, before = analysed(frames, labels, votes_only)
    assert before.outcomes[0].first is not None and before.outcomes[0].first.diagnosis == "nfs_network"
    assert_same_alarms(streamed(frames), alarms)


@pytest.fixture(scope="module")
def escalating(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Frame], Path]:
    # The agent's task count jumps 8-25 min before the NVLink XID: an alarm opens on the precursor.
    faults = (FaultRequest("nvlink_xid", node="gpu003", gpu=2, at=0.7),)
    return record(Scenario("escalating", SPEC, 1.5, 5, faults, Benign()), tmp_path_factory.mktemp("escalating"))


def test_one_fault_is_one_alarm_that_escalates_in_place(escalating: tuple[dict[str, Frame], Path]) -> None:
    frames, labels = escalating
    alarms, result = analysed(frames, labels)
    mine: list[Alarm] = [a for a in alarms if a.node == "gpu003"]
    assert len(mine) == 1, mine  # the XID was a second alarm before
    (alarm,) = mine
    assert alarm.as_json()["ts"] == alarm.ts == result.outcomes[0].first.ts  # type: ignore[union-attr]
    assert (alarm.diagnosis, alarm.severity) == ("nvlink", "critical")
    assert_same_alarms(streamed(frames), alarms)


def test_an_escalation_is_an_update_of_the_alarm_line(glitch: tuple[dict[str, Frame], Path]) -> None:
    frames, labels = glitch
    alarms, _ = analysed(frames, labels)
    (alarm,) = alarms  # the downgraded link: a warning at first, critical as its score grows
    line = alarm.as_json()
    assert (line["ts"], line["severity"], line["diagnosis"]) == (alarm.ts, "warning", "pcie_downgrade")
    updates = line["updates"]
    assert isinstance(updates, list) and [u["severity"] for u in updates] == ["critical"]
    assert updates[0]["ts"] > alarm.ts and alarm.severity == "critical"


def test_an_impossible_pcie_width_is_said_once(
    glitch: tuple[dict[str, Frame], Path], caplog: pytest.LogCaptureFixture
) -> None:
    frames, labels = glitch
    with caplog.at_level("WARNING", logger="peerwatch.detect.states"):
        analysed(frames, labels)
    said = sorted(r.getMessage() for r in caplog.records if "no possible PCIe" in r.getMessage())
    # Once per series: dcgm-exporter's and all-smi's reading of the same link.
    assert len(said) == 2 and "DCGM_FI_DEV_PCIE_LINK_WIDTH 32" in said[0] and "all_smi" in said[1], said
