"""Detection settings as data: one typed table, read from YAML by analyze and serve, every setting documented."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from peerwatch.alarms.errors import ConfigError
from peerwatch.cli import app
from peerwatch.decide.policy import PolicySettings
from peerwatch.service.config import config_from_dict, load_config, load_detection
from peerwatch.service.evaluation import Evaluator
from peerwatch.settings import DetectionSettings
from peerwatch.settings_doc import render, settings_rows, shown
from peerwatch.simulate import FaultRequest, Scenario, default_spec, simulate, write_recording

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "settings.md"
TSDB = {"source": {"tsdb": {"url": "http://vm:8428"}}}


def test_docs_hold_the_table_generated_from_the_dataclasses() -> None:
    assert render() in DOC.read_text(), "docs/settings.md is stale: run python -m peerwatch.settings_doc"


def test_every_setting_has_a_description_and_its_default_in_the_doc() -> None:
    doc = DOC.read_text()
    rows = list(settings_rows())
    assert len(rows) > 150 and len({r.path for r in rows}) == len(rows)
    assert [r.path for r in rows if not r.text] == [], "settings without a comment"
    missing = [r.path for r in rows if f"| `{r.path}` | `{shown(r.default)}` |" not in doc]
    assert missing == []
    by_path = {r.path: r for r in rows}
    assert by_path["detection.policy.quiet"].unit == "steps" and by_path["detection.groups.join_s"].unit == "s"
    assert by_path["detection.training.thresholds.smooth_s"].default == 120.0  # nested parts are walked


@dataclass(frozen=True)
class Part:
    known: int = 1  # [steps] documented
    bare: float = 2.0


@dataclass(frozen=True)
class Whole:
    part: Part = Part()  # a part


def test_a_field_without_a_comment_is_reported_undocumented() -> None:
    rows = {r.path: r for r in settings_rows(Whole, "x")}
    assert (rows["x.part.known"].unit, rows["x.part.known"].text) == ("steps", "documented")
    assert rows["x.part.bare"].text == ""


def _file(tmp_path: Path, data: object, name: str = "x.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data) if data is not None else "")
    return path


def test_missing_or_empty_sections_give_the_defaults(tmp_path: Path) -> None:
    assert load_detection(_file(tmp_path, None)) == DetectionSettings()
    assert load_detection(_file(tmp_path, {"detection": {}})) == DetectionSettings()
    assert config_from_dict(TSDB).detection == DetectionSettings()


def test_given_keys_change_only_themselves(tmp_path: Path) -> None:
    data = {
        "detection": {
            "policy": {"open_score": 8, "k": 4},
            "training": {"thresholds": {"smooth_s": 60}},
            "peer": {"rel_floors": {"clock": 0.02}},
            "accumulation": {"units": ["gpu", "disk"], "windows": [1800, 3600]},
        }
    }
    st = load_detection(_file(tmp_path, data))
    assert st.policy == PolicySettings(open_score=8.0, k=4)
    assert st.training.thresholds.smooth_s == 60.0 and st.training.thresholds.min_points == 20
    assert dict(st.peer.rel_floors) == {"clock": 0.02}
    assert st.accumulation.windows == (1800.0, 3600.0) and {str(u) for u in st.accumulation.units} == {"gpu", "disk"}
    assert st.groups == DetectionSettings().groups


def test_a_serve_configuration_serves_analyze_too(tmp_path: Path) -> None:
    data = yaml.safe_load((REPO / "examples" / "peerwatch.yaml").read_text())
    data["detection"] = {"counters": {"report": 3}}
    path = _file(tmp_path, data, "peerwatch.yaml")
    assert load_config(path).detection.counters.report == 3.0
    assert load_detection(path).counters.report == 3.0


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"detection": {"policy": {"opne_score": 1}}}, "x.yaml: detection.policy.opne_score: unknown setting"),
        ({"detection": {"training": {"thresholds": {"nope": 1}}}}, "detection.training.thresholds.nope: unknown"),
        ({"detection": {"polcy": {}}}, "x.yaml: detection.polcy: unknown setting"),
        ({"detectoin": {}}, "x.yaml: detectoin: unknown setting"),
        ({"detection": {"policy": {"k": "many"}}}, "x.yaml: detection.policy.k: "),
        ({"detection": {"accumulation": {"units": ["gpu", "toaster"]}}}, "x.yaml: detection.accumulation.units"),
        ({"detection": {"policy": {"nfs_signals": "^node_(nfs"}}}, "detection.policy: nfs_signals is not a regular"),
        ([1, 2], "x.yaml: expected a mapping"),
    ],
)
def test_bad_settings_are_rejected_with_their_path(tmp_path: Path, data: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        load_detection(_file(tmp_path, data))


def test_serve_rejects_unknown_detection_keys_too() -> None:
    with pytest.raises(ConfigError, match=r"c\.yaml: detection\.peer\.min_peer: unknown setting"):
        config_from_dict({**TSDB, "detection": {"peer": {"min_peer": 3}}}, "c.yaml")


def test_the_live_engine_takes_the_configured_settings() -> None:
    config = config_from_dict({**TSDB, "detection": {"policy": {"quiet_sure": 90}, "peer": {"report": 5}}})
    evaluator = Evaluator(config.step, config.window, (), settings=config.detection)
    assert evaluator.quiet == 90 * config.step
    assert evaluator.engine.policy.settings.quiet_sure == 90
    peer = next(d for d in evaluator.engine.detectors if d.name == "peer")
    assert peer.settings.report == 5.0  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("settings") / "rec"
    faults = (FaultRequest("nic_dropout", node="gpu002", at=0.6), FaultRequest("pcie_downgrade", node="gpu005", at=0.4))
    write_recording(simulate(Scenario("settings", default_spec(8), hours=1.0, seed=3, faults=faults)), out)
    return out


def _analyze(recording: Path, out: Path, *config: str) -> str:
    result = CliRunner().invoke(app, ["analyze", str(recording), "--out", str(out), *config])
    assert result.exit_code == 0, result.output
    return out.read_text()


def test_analyze_with_an_empty_config_gives_exactly_the_alarms_without_one(recording: Path, tmp_path: Path) -> None:
    plain = _analyze(recording, tmp_path / "a.jsonl")
    assert plain.count("\n") >= 2
    empty = _analyze(recording, tmp_path / "b.jsonl", "--config", str(_file(tmp_path, None)))
    assert empty == plain
    section = _file(tmp_path, {"detection": {"policy": {}}}, "y.yaml")
    assert _analyze(recording, tmp_path / "c.jsonl", "--config", str(section)) == plain


def test_analyze_config_reaches_the_policy(recording: Path, tmp_path: Path) -> None:
    never = {"detection": {"policy": {"open_score": 1000, "immediate": 1000, "counter_open": 1000}}}
    assert _analyze(recording, tmp_path / "a.jsonl", "--config", str(_file(tmp_path, never))) == ""


def test_analyze_with_a_bad_config_says_why(recording: Path, tmp_path: Path) -> None:
    bad = _file(tmp_path, {"detection": {"peer": {"warmpu": 3}}})
    result = CliRunner().invoke(app, ["analyze", str(recording), "--out", "-", "--config", str(bad)])
    assert result.exit_code == 2
    assert "detection.peer.warmpu: unknown setting" in result.output
