"""The runner and the CLI over two small simulated scenarios, with an injected fake engine.

The fake engine reads the scenario's labels and raises chosen alarms, so these tests check the
runner, the alarms-file path and the command, not detection (``peerwatch.engine`` scores that).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import orjson
import pytest
import typer
from typer.testing import CliRunner

from peerwatch.evaluate import EvaluateError, evaluate_dirs, find_scenarios, load_labels
from peerwatch.evaluate.commands import evaluate_command
from peerwatch.model import Alarm, ProblemLog
from peerwatch.simulate import FaultRequest, Scenario, default_spec, simulate, write_recording


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two 8-node, 1-hour scenarios: one NVLink failure; a straggler and an IB flap."""
    root = tmp_path_factory.mktemp("scenarios")
    plans = {
        "a_nvlink": (FaultRequest("nvlink_xid", at=0.6),),
        "b_mixed": (FaultRequest("straggler", at=0.3), FaultRequest("ib_link_flap", at=0.5)),
    }
    for seed, (name, faults) in enumerate(plans.items()):
        sim = simulate(Scenario(name, default_spec(8), hours=1.0, seed=seed, faults=faults))
        write_recording(sim, root / name)
    return root


def fake_alarms(folder: Path, skip_kind: str = "ib_link_flap") -> list[Alarm]:
    """An alarm 30 s after each fault's onset (right place, right diagnosis), except ``skip_kind``,
    plus one false alarm on the first node at the start."""
    lab = load_labels(folder / "labels.json")
    out = [Alarm("f0", lab.start_ts + 60, lab.nodes[0], "node", "unknown", "warning", 5.0, "watch", (), 0.0)]
    for i, f in enumerate(lab.faults):
        if f.kind != skip_kind:
            ts = f.onset_ts + 30
            out.append(Alarm(f"f{i + 1}", ts, f.node, f.component, f.expected[0], "critical", 9.0, "swap", (), ts))
    return out


class FakeEngine:
    """Stands in for ``peerwatch.engine.analyze`` and records how it was called."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], float]] = []

    def __call__(
        self, inputs: Sequence[str], *, step: float = 30.0, now: float | None = None, problems: ProblemLog | None = None
    ) -> list[Alarm]:
        assert problems is not None and now is None
        self.calls.append((list(inputs), step))
        return fake_alarms(Path(inputs[0]).parent)


def test_find_scenarios_walks_a_parent_folder(scenarios: Path) -> None:
    found = find_scenarios([scenarios])
    assert [s.name for s in found] == ["a_nvlink", "b_mixed"]
    assert all(s.metrics == (s.path / "metrics.jsonl",) for s in found)
    assert find_scenarios([scenarios / "b_mixed", scenarios])[0].name == "b_mixed"  # given order, no duplicates
    assert len(find_scenarios([scenarios / "b_mixed", scenarios])) == 2


@pytest.mark.parametrize("layout", ["empty", "labels only", "not a folder"])
def test_find_scenarios_errors_name_the_folder(tmp_path: Path, layout: str) -> None:
    target = tmp_path / "x"
    if layout == "not a folder":
        target.write_text("")
    else:
        target.mkdir()
    if layout == "labels only":
        (target / "labels.json").write_text("{}")
        (target / "alarms.jsonl").write_text("")  # an alarms file is not a recording
    with pytest.raises(EvaluateError, match=re.escape(str(target))):
        find_scenarios([target])


def test_runner_scores_each_scenario_with_the_engine(scenarios: Path) -> None:
    engine = FakeEngine()
    ev = evaluate_dirs([scenarios], analyze=engine)
    assert [Path(c[0][0]).name for c in engine.calls] == ["metrics.jsonl", "metrics.jsonl"]
    assert [c[1] for c in engine.calls] == [30.0, 30.0]
    (system,) = ev.systems
    summ = system.summary
    assert summ.alarms.scenarios == 2 and summ.alarms.node_hours == 16.0
    assert (summ.overall.faults, summ.overall.detected) == (3, 2)
    assert summ.kinds["ib_link_flap"].recall == 0.0 and summ.kinds["nvlink_xid"].recall == 1.0
    assert summ.overall.diagnosis == 1.0 and summ.overall.localisation == 1.0
    assert summ.overall.detect_times == (30.0, 30.0)
    assert (summ.alarms.node_alarms, summ.alarms.false_alarms) == (4, 2)
    nv = next(o for o in system.scores[0].outcomes if o.fault.kind == "nvlink_xid")
    assert nv.fault.failure_ts is not None and nv.lead_s == pytest.approx(nv.fault.failure_ts - nv.fault.onset_ts - 30)


def test_alarms_files_score_like_the_engine(scenarios: Path, tmp_path: Path) -> None:
    for sc in find_scenarios([scenarios]):
        lines = b"".join(orjson.dumps(a.as_json()) + b"\n" for a in fake_alarms(sc.path))
        (sc.path / "alarms.jsonl").write_bytes(lines)
    from_files = evaluate_dirs([scenarios], alarms=Path("alarms.jsonl"))
    from_engine = evaluate_dirs([scenarios], analyze=FakeEngine())
    assert from_files.systems[0].scores == from_engine.systems[0].scores
    # one file outside the folders: fine for one scenario, an error for two
    single = tmp_path / "one.jsonl"
    single.write_bytes((scenarios / "a_nvlink" / "alarms.jsonl").read_bytes())
    assert evaluate_dirs([scenarios / "a_nvlink"], alarms=single).systems[0].summary.overall.recall == 1.0
    with pytest.raises(EvaluateError, match="one alarms file for 2 scenarios"):
        evaluate_dirs([scenarios], alarms=single)
    with pytest.raises(EvaluateError, match="no such alarms file"):
        evaluate_dirs([scenarios], alarms=Path("missing.jsonl"))


def _cli() -> typer.Typer:
    app = typer.Typer()
    app.command()(evaluate_command)
    return app


def test_cli_json_and_table(scenarios: Path) -> None:
    for sc in find_scenarios([scenarios]):
        lines = b"".join(orjson.dumps(a.as_json()) + b"\n" for a in fake_alarms(sc.path, skip_kind=""))
        (sc.path / "alarms.jsonl").write_bytes(lines)
    runner = CliRunner()
    res = runner.invoke(_cli(), [str(scenarios), "--alarms", "alarms.jsonl", "--json"])
    assert res.exit_code == 0, res.output
    doc = orjson.loads(res.stdout)
    (system,) = doc["systems"]
    assert system["overall"]["recall"] == 1.0 and system["overall"]["faults"] == 3
    assert system["alarms"]["precision"] == pytest.approx(3 / 5)
    assert [s["scenario"] for s in system["scenarios"]] == ["a_nvlink", "b_mixed"]
    table = runner.invoke(_cli(), [str(scenarios), "--alarms", "alarms.jsonl"])
    assert table.exit_code == 0, table.output
    assert "Per fault kind" in table.stdout and "ib_link_flap" in table.stdout and "Overall" in table.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--baseline", "prom"], "unknown baseline"),
        (["--baseline", "vm"], "needs --vm-url"),
        (["--alarms", "nowhere.jsonl"], "no such alarms file"),
    ],
)
def test_cli_errors_exit_2(scenarios: Path, args: list[str], message: str) -> None:
    res = CliRunner().invoke(_cli(), [str(scenarios / "a_nvlink"), *args])
    assert res.exit_code == 2 and message in res.output


def test_cli_bad_labels_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "labels.json").write_text('{"nodes": ["a"], "faults": [], "start_ts": 0}')
    (tmp_path / "s" / "metrics.jsonl").write_text("")
    res = CliRunner().invoke(_cli(), [str(tmp_path / "s"), "--alarms", "x.jsonl"])
    assert res.exit_code == 2
    assert f"{tmp_path / 's' / 'labels.json'}: end_ts:" in res.output
