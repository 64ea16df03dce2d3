"""The scorer on hand-made labels and alarms: matching window, counts, rates, aggregation."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from peerwatch.evaluate import parse_labels, score, summarise
from peerwatch.evaluate.labels import ScenarioLabels
from peerwatch.evaluate.match import localised
from peerwatch.model import Alarm

T0 = 1_000_000.0
NODES = [f"n{i:02d}" for i in range(1, 17)]  # 16 nodes, n16 the spare


def labels(*faults: dict[str, Any], hours: float = 1.0, name: str = "s") -> ScenarioLabels:
    doc = {
        "nodes": NODES,
        "spares": ["n16"],
        "faults": list(faults),
        "start_ts": T0,
        "end_ts": T0 + hours * 3600,
        "step": 30.0,
    }
    return parse_labels(doc, f"{name}/labels.json", name)


def fault(
    node: str = "n03",
    onset: float = T0 + 1000,
    failure: float | None = T0 + 2000,
    end: float | None = None,
    kind: str = "nvlink_xid",
    component: str = "gpu/3",
    expected: tuple[str, ...] = ("nvlink",),
) -> dict[str, Any]:
    return {
        "node": node,
        "component": component,
        "kind": kind,
        "onset_ts": onset,
        "failure_ts": failure,
        "end_ts": failure if end is None else end,
        "expected": list(expected),
    }


def alarm(ts: float, node: str = "n03", component: str = "gpu/3", diagnosis: str = "nvlink") -> dict[str, Any]:
    return {"ts": ts, "node": node, "component": component, "diagnosis": diagnosis, "severity": "warning"}


# (case, alarm times on the fault's node, detected, false alarms); fault: onset T0+1000, failure T0+2000
WINDOW_CASES = [
    ("exactly onset - 60", [T0 + 940], True, 0),
    ("just before onset - 60", [T0 + 939.9], False, 1),
    ("exactly failure + 120", [T0 + 2120], True, 0),
    ("late: just after failure + 120", [T0 + 2120.1], False, 1),
    ("long after failure", [T0 + 3000], False, 1),
    ("inside, and a late one", [T0 + 1500, T0 + 2500], True, 1),
    ("no alarm", [], False, 0),
]


@pytest.mark.parametrize(("case", "times", "detected", "false"), WINDOW_CASES, ids=[c[0] for c in WINDOW_CASES])
def test_window_edges(case: str, times: list[float], detected: bool, false: int) -> None:
    s = score([alarm(t) for t in times], labels(fault()))
    assert s.outcomes[0].detected is detected
    assert s.node_alarms - s.node_alarms_matched == false


def test_wrong_node_is_a_false_alarm_and_the_fault_is_missed() -> None:
    s = score([alarm(T0 + 1500, node="n04")], labels(fault()))
    assert not s.outcomes[0].detected
    assert (s.node_alarms, s.node_alarms_matched) == (1, 0)


def test_two_alarms_one_detection_judged_by_the_first() -> None:
    # given latest first: the scorer sorts by time; the later one has the right component and diagnosis
    alarms = [alarm(T0 + 1800), alarm(T0 + 1200, component="gpu/5", diagnosis="ecc_hbm")]
    summ = summarise([score(alarms, labels(fault()))])
    o = summ.overall
    assert (o.faults, o.detected, o.localised, o.diagnosed) == (1, 1, 0, 0)
    assert o.leads == (800.0,)  # failure - first alarm (T0+1200)
    assert o.detect_times == (200.0,)
    assert summ.alarms.precision == 1.0  # both alarms matched: precision counts each alarm


def test_precision_counts_each_alarm() -> None:
    alarms = [alarm(T0 + 1100), alarm(T0 + 1200), alarm(T0 + 1300, node="n07")]
    a = summarise([score(alarms, labels(fault()))]).alarms
    assert (a.node_alarms, a.node_alarms_matched, a.false_alarms) == (3, 2, 1)
    assert a.precision == pytest.approx(2 / 3)
    assert a.false_per_1000_node_hours == pytest.approx(1000 / 16)  # 16 nodes (spare once) x 1 h


def test_degradation_window_ends_at_its_end_and_has_no_lead_time() -> None:
    deg = fault(onset=T0 + 1000, failure=None, end=T0 + 2500, kind="thermal_throttle", expected=("thermal_throttle",))
    s = score([alarm(T0 + 2620, diagnosis="thermal_throttle")], labels(deg))
    assert s.outcomes[0].detected and s.outcomes[0].lead_s is None
    assert s.outcomes[0].diagnosed
    assert not score([alarm(T0 + 2620.5)], labels(deg)).outcomes[0].detected


def test_degradation_without_end_lasts_to_the_end_of_the_recording() -> None:
    deg = fault(failure=None, kind="straggler", component="node", expected=("performance_degradation",))
    deg["end_ts"] = None
    lab = labels(deg)
    assert score([alarm(lab.end_ts + 120)], lab).outcomes[0].detected
    assert not score([alarm(lab.end_ts + 121)], lab).outcomes[0].detected


def test_spare_alarms_are_judged_like_any_other() -> None:
    lab = labels(fault(node="n16"))
    s = score([alarm(T0 + 1500, node="n16"), alarm(T0 + 100, node="n16")], lab)
    assert s.outcomes[0].detected
    assert (s.node_alarms, s.node_alarms_matched) == (2, 1)
    assert lab.node_hours == 16.0


def test_cluster_alarms_are_counted_apart_and_match_cluster_faults() -> None:
    storage = fault(node="cluster", component="nfs//data", kind="nfs_storage", failure=None, end=T0 + 2000)
    storage["expected"] = ["nfs_storage"]
    alarms = [
        alarm(T0 + 1100, node="cluster", component="nfs/10.0.0.1:/data", diagnosis="nfs_storage"),
        alarm(T0 + 3500, node="cluster", component="nfs//data", diagnosis="nfs_storage"),  # after the window
        alarm(T0 + 1100, node="n05", component="nfs//data", diagnosis="nfs_storage"),  # a node alarm: false
    ]
    s = score(alarms, labels(storage))
    o = s.outcomes[0]
    assert o.detected and o.localised and o.diagnosed
    assert (s.cluster_alarms, s.cluster_alarms_matched) == (2, 1)
    assert (s.node_alarms, s.node_alarms_matched) == (1, 0)


def test_lead_median_and_p10() -> None:
    leads = [60.0, 120.0, 300.0, 600.0, 900.0]
    faults = [fault(node=NODES[i], onset=T0 + 100, failure=T0 + 1000) for i in range(len(leads))]
    alarms = [alarm(T0 + 1000 - lead, node=NODES[i]) for i, lead in enumerate(leads)]
    o = summarise([score(alarms, labels(*faults))]).overall
    assert o.lead_median == 300.0
    assert o.lead_p10 == pytest.approx(84.0)  # linear: 60 + 0.4 * (120 - 60)
    assert o.lead_p10 == pytest.approx(float(np.percentile(leads, 10)))


def test_late_detection_has_negative_lead() -> None:
    s = score([alarm(T0 + 2100)], labels(fault()))
    assert s.outcomes[0].lead_s == -100.0


@pytest.mark.parametrize(
    ("after_onset", "fast"), [(0.0, True), (60.0, True), (60.5, False), (-60.0, True), (300.0, False)]
)
def test_sudden_fault_caught_within_two_steps(after_onset: float, fast: bool) -> None:
    drop = fault(onset=T0 + 1000, failure=T0 + 1000, kind="gpu_card_drop", expected=("gpu_fallen_off_bus",))
    o = summarise([score([alarm(T0 + 1000 + after_onset)], labels(drop))]).overall
    assert (o.sudden, o.sudden_fast) == (1, int(fast))


def test_a_fault_with_precursor_is_not_sudden() -> None:
    o = summarise([score([alarm(T0 + 1000)], labels(fault()))]).overall
    assert (o.sudden, o.sudden_fast) == (0, 0)


def test_summary_sums_counts_then_computes_rates() -> None:
    one = score([alarm(T0 + 1500)], labels(fault(), name="a"))
    faults = [fault(node=n, kind="ecc_hbm", expected=("ecc_hbm",)) for n in ("n02", "n04", "n05")]
    three = score([alarm(T0 + 50, node="n09")], labels(*faults, hours=2.0, name="b"))
    summ = summarise([one, three])
    assert summ.overall.recall == 0.25  # 1 of 4, not the mean of 100% and 0%
    assert summ.kinds["nvlink_xid"].recall == 1.0 and summ.kinds["ecc_hbm"].recall == 0.0
    assert summ.alarms.node_hours == 48.0
    assert summ.alarms.false_per_1000_node_hours == pytest.approx(1000 / 48)
    assert summ.alarms.precision == 0.5


def test_engine_alarm_objects_are_scored_like_json_lines() -> None:
    obj = Alarm("x", T0 + 1500, "n03", "gpu/3", "nvlink", "critical", 9.0, "swap", (), T0 + 1500)
    assert score([obj], labels(fault())) == score([obj.as_json()], labels(fault()))


def test_empty_figures_are_none_not_zero() -> None:
    summ = summarise([score([], labels())])
    assert summ.overall.recall is None and summ.alarms.precision is None
    assert summ.alarms.false_per_1000_node_hours == 0.0


LOCALISATION = [
    ("gpu/3", "gpu/3", True),
    ("gpu/3", "gpu/30", False),
    ("gpu/3", "node", False),
    ("ib/mlx5_2:1", "ib/mlx5_2:1", True),
    ("ib/mlx5_2:1", "ib/mlx5_2", True),
    ("ib/mlx5_2:1", "ib/mlx5_2:2", False),
    ("ib/mlx5_2:1", "ib/mlx5_3", False),
    ("ib/mlx5_2", "ib/mlx5_2:1", True),
    ("nfs//data", "nfs//data", True),
    ("nfs//data", "nfs/10.40.0.11:/data", True),
    ("nfs//data", "nfs/10.40.0.12:/home", False),
    ("nfs//data", "nfs/", False),
    ("node", "node", True),
    ("node", "gpu/0", False),
    ("nvswitch", "nvswitch", True),
    ("nvswitch", "gpu/0", False),
    ("disk/nvme0n1", "disk/nvme1n1", False),
]


@pytest.mark.parametrize(("fault_c", "alarm_c", "ok"), LOCALISATION)
def test_localisation_rule(fault_c: str, alarm_c: str, ok: bool) -> None:
    assert localised(fault_c, alarm_c) is ok
