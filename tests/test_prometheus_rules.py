"""deploy/prometheus/peerwatch-rules.yml: valid for the real promtool, exercised by its unit tests,
and written against the series peerwatch's /metrics really exports (names and labels)."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from peerwatch.alarms.delivery import SinkStats
from peerwatch.service.metrics import Health, render
from services import require_binary
from test_service_sinks import metric_names

RULES = Path(__file__).resolve().parents[1] / "deploy" / "prometheus" / "peerwatch-rules.yml"
RULE_TESTS = RULES.with_name("peerwatch-rules.test.yml")
PROMETHEUS_OWN = {"up"}  # added by Prometheus when it scrapes peerwatch


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([require_binary("promtool"), *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_promtool_checks_the_rules() -> None:
    done = promtool("check", "rules", RULES.name, cwd=RULES.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 7 rules found" in done.stdout


def test_promtool_unit_tests_of_the_rules_pass() -> None:
    done = promtool("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    tested = {
        case["alertname"] for t in yaml.safe_load(RULE_TESTS.read_text())["tests"] for case in t["alert_rule_test"]
    }
    assert tested == {rule["alert"] for rule in rules()}  # every rule has a case


@dataclass
class _Sink:
    stats: SinkStats


def exported_labels() -> dict[str, set[str]]:
    """Every sample name /metrics renders (sinks configured, so their families appear) and its labels."""
    health = Health(evaluated_until=1.0, sinks=[_Sink(SinkStats("alertmanager", 1, 0, 2.0))])
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(render(health, [], {})):
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    return out


def rules() -> list[dict[str, object]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def test_the_rules_use_only_series_and_labels_peerwatch_exports() -> None:
    exported = exported_labels()
    assert {"peerwatch_sink_errors_total", "peerwatch_open_alarms"} <= set(exported)
    for rule in rules():
        expr = str(rule["expr"])
        names = metric_names(expr)
        assert names and names <= set(exported) | PROMETHEUS_OWN, (rule["alert"], names - set(exported))
        for name, matchers in re.findall(r"([a-zA-Z_:][\w:]*)\{([^}]*)\}", expr):
            used = set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", matchers)) - {"job", "instance"}
            if name not in PROMETHEUS_OWN:
                assert used <= exported[name], (rule["alert"], name, used - exported[name])
