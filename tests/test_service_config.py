"""``peerwatch serve`` configuration: clear errors with file and key path, durations, paths, docs."""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from peerwatch.alarms.config import parse_duration
from peerwatch.alarms.errors import ConfigError
from peerwatch.service.__main__ import app
from peerwatch.service.config import ServiceConfig, config_from_dict, load_config

REPO = Path(__file__).resolve().parents[1]
TSDB = {"source": {"tsdb": {"url": "http://vm:8428"}}}


def settings_of(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every dotted key path of a settings model, nested sections included (lists as ``[]``)."""
    out = []
    for name, field in model.model_fields.items():
        path = prefix + name
        out.append(path)
        for arg in _models(field.annotation):
            inner = path + ("[]" if _is_list(field.annotation) else "")
            out += settings_of(arg, inner + ".")
    return out


def _models(annotation: object) -> list[type[BaseModel]]:
    found = []
    for arg in typing.get_args(annotation) or (annotation,):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            found.append(arg)
        elif typing.get_args(arg):
            found += _models(arg)
    return found


def _is_list(annotation: object) -> bool:
    if typing.get_origin(annotation) is list:
        return True
    return typing.get_origin(annotation) in (typing.Union, types.UnionType) and any(
        typing.get_origin(a) is list for a in typing.get_args(annotation)
    )


def test_every_setting_is_documented() -> None:
    doc = (REPO / "docs" / "service.md").read_text().split("## Configuration", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `([^`]+)` \|", doc, flags=re.M))
    settings = set(settings_of(ServiceConfig))
    assert "source.scrape.targets[].labels" in settings and "clock.origin" in settings
    assert settings - documented == set(), "undocumented settings"
    assert documented - settings == set(), "documented settings that do not exist"


def test_the_example_is_valid() -> None:
    config = load_config(REPO / "examples" / "peerwatch.yaml")
    assert config.source.tsdb is not None and config.window == 7200.0 and config.spares


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "x.yaml: source: required setting missing"),
        ({**TSDB, "stepp": 30}, "x.yaml: stepp: unknown setting"),
        ({"source": {"tsdb": {"url": "vm:8428"}}}, "x.yaml: source.tsdb.url: must be an http:// or https:// URL"),
        ({"source": {"tsdb": {"url": "http://a"}, "scrape": {"targets": ["http://b/metrics"]}}}, "exactly one of"),
        ({"source": {"scrape": {}}}, "x.yaml: source.scrape: give targets, file_sd, or both"),
        (
            {"source": {"scrape": {"targets": ["http://a/metrics", {"url": "http://b/metrics", "jobb": "x"}]}}},
            "x.yaml: source.scrape.targets[1].jobb: unknown setting",
        ),
        ({**TSDB, "window": "2x"}, "x.yaml: window: '2x' is not a duration"),
        ({**TSDB, "step": -5}, "x.yaml: step: a duration must be positive"),
        ({**TSDB, "window": "4m"}, "window (240s) must hold at least 10 steps"),
        ({**TSDB, "stale_steps": 1}, "must exceed source.tsdb.delay"),
        ({**TSDB, "api": {"listen": "8080"}}, "x.yaml: api.listen: listen is host:port"),
        ({**TSDB, "api": {"token": "a", "token_file": "t"}}, "x.yaml: api: give token or token_file, not both"),
        ({**TSDB, "alertmanager": {"url": "http://am", "resend": "1m"}}, "x.yaml: alertmanager.resend: unknown"),
        ({**TSDB, "clock": {"speed": 10}}, "x.yaml: clock.start: required setting missing"),
        ([1, 2], "x.yaml: expected a mapping of settings, got list"),
    ],
)
def test_bad_settings_are_named(data: object, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        config_from_dict(data, "x.yaml")
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("text", "seconds"), [(30, 30.0), ("90", 90.0), ("30s", 30.0), ("5m", 300.0), ("1h30m", 5400.0), ("250ms", 0.25)]
)
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5 m", "m", "1h30", True, None, "-1s"])
def test_bad_durations(text: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_relative_paths_follow_the_file_and_the_token_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("abc\n")
    path = tmp_path / "pw.yaml"
    path.write_text(
        "source:\n  scrape:\n    file_sd: [sd/nodes.json]\n    targets: [http://a:9100/metrics]\n"
        "store: {sqlite: state/pw.sqlite}\napi: {token_file: token}\n"
    )
    config = load_config(path)
    assert config.store.sqlite == tmp_path / "state" / "pw.sqlite"
    assert config.source.scrape is not None and config.source.scrape.file_sd == [tmp_path / "sd" / "nodes.json"]
    assert config.api.token_value() == "abc"
    (tmp_path / "token").write_text("  \n")
    with pytest.raises(ConfigError, match=r"token_file: .*token is empty"):
        config.api.token_value()


def test_yaml_errors_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "pw.yaml"
    path.write_text("source:\n  tsdb: {url: http://vm\n")
    with pytest.raises(ConfigError, match=r"pw\.yaml:3:1: not valid YAML"):
        load_config(path)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")


def test_serve_rejects_a_bad_config_with_the_key_path(tmp_path: Path) -> None:
    path = tmp_path / "pw.yaml"
    path.write_text("source:\n  tsdb: {url: 'http://127.0.0.1:1', kindd: prometheus}\n")
    result = CliRunner().invoke(app, ["serve", "--config", str(path)])
    assert result.exit_code == 2
    assert f"error: {path}: source.tsdb.kindd: unknown setting" in result.output


def test_serve_check_reports_an_unreachable_source(tmp_path: Path) -> None:
    path = tmp_path / "pw.yaml"
    path.write_text("source:\n  tsdb: {url: 'http://127.0.0.1:1', timeout: 2s}\nstore: {sqlite: s.sqlite}\n")
    result = CliRunner().invoke(app, ["serve", "--config", str(path), "--check"])
    assert result.exit_code == 1, result.output
    assert "error: source http://127.0.0.1:1: http://127.0.0.1:1/api/v1/export" in result.output
    assert "ConnectError" in result.output
