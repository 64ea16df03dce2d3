"""Remediation: presets, template checks at load, dry-run vs execute, the spare choice, the token."""

from __future__ import annotations

import hashlib
import re
import shlex
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from peerwatch.alarms.errors import ConfigError
from peerwatch.alarms.names import NAME_RULES, InvalidValue
from peerwatch.alarms.remediation import PRESETS, render
from peerwatch.alarms.sqlite_store import SQLiteStore
from peerwatch.alarms.store import ActionRecord, StepChanges, StoredAlarm
from peerwatch.model import Alarm
from peerwatch.service import Service, config_from_dict
from peerwatch.service.app import create_app
from peerwatch.service.clock import Clock

REPO = Path(__file__).resolve().parents[1]
TOKEN = "t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
T0 = 1_764_460_000.0
TSDB = {"source": {"tsdb": {"url": "http://127.0.0.1:1"}}}
VALUES = {"node": "gpu068", "spare": "gpu061", "reason": "XID 79", "alarm_id": "a1"}


def alarm(node: str, ts: float, resolved: float | None = None) -> StoredAlarm:
    ident = hashlib.sha1(f"{node}|{ts}".encode()).hexdigest()[:12]
    a = Alarm(ident, ts, node, "gpu/2", "gpu_fallen_off_bus", "critical", 22.5, "swap", (), ts + 30, resolved)
    return StoredAlarm(a, 1.0, None if resolved is None else "engine", None if resolved is None else 2.0)


def test_presets_render_the_documented_commands() -> None:
    def rendered(preset: str, template: str) -> list[list[str]]:
        return [list(c) for c in render(PRESETS[preset][template], VALUES)]

    assert rendered("slurm", "drain") == [["scontrol", "update", "nodename=gpu068", "state=drain", "reason=XID 79"]]
    assert rendered("slurm", "swap_in") == [["scontrol", "update", "nodename=gpu061", "state=resume"]]
    assert rendered("kubernetes", "drain") == [
        ["kubectl", "cordon", "--", "gpu068"],
        ["kubectl", "drain", "--ignore-daemonsets", "--", "gpu068"],
    ]
    assert rendered("kubernetes", "swap_in") == [["kubectl", "uncordon", "--", "gpu061"]]
    assert rendered("backendai", "drain")[0][-4:] == ["--schedulable", "false", "--", "gpu068"]
    doc = (REPO / "docs" / "service.md").read_text().split("## Remediation", 1)[1]
    for preset in PRESETS:
        row = re.search(rf"^\| `{preset}` \|(.*)$", doc, flags=re.M)
        assert row is not None, preset
        for template in ("drain", "undrain", "swap_in"):
            first = " ".join(PRESETS[preset][template][0])
            assert f"`{first}`" in row.group(1) or (preset == "backendai" and template != "drain"), (preset, template)


@pytest.mark.parametrize(
    ("remediation", "message"),
    [
        (
            {"templates": {"drain": ["scontrol", "nodename={nod}"]}},
            "remediation.templates.drain: unknown placeholder {nod}",
        ),
        (
            {"preset": "slurm", "templates": {"undrain": ["x", "{spare}"]}},
            "templates.undrain: unknown placeholder {spare}",
        ),
        (
            {"templates": {"drain": [["true"], ["x", "{node:>9}"]]}},
            "templates.drain: '{node:>9}': placeholders take no",
        ),
        ({"templates": {"drain": ["x", "{node"]}}, "remediation.templates.drain: '{node':"),
        ({"templates": {"drain": "scontrol update nodename={node}"}}, "never a shell string"),
        ({"preset": "lsf"}, "remediation.preset: Input should be"),
        ({"mode": "dry-run"}, "remediation: give a preset, templates.drain, or both"),
        ({"preset": "slurm", "mode": "run"}, "remediation.mode: Input should be 'dry-run' or 'execute'"),
        ({"templates": {"drain": ["/bin/sh", "-c", "kubectl drain {node}"]}}, "drain: the command runs a shell"),
        ({"templates": {"drain": [["true"], ["sudo", "bash", "-c", "x {node}"]]}}, "command 2 runs a shell ('bash')"),
        ({"templates": {"drain": ["ssh", "head", "scontrol update nodename={node}"]}}, "runs a shell ('ssh')"),
        (
            {"allow_shell": True, "templates": {"drain": ["sh", "-c", "x {node} '{reason}'"]}},
            "{reason} is free text and never goes through one",
        ),
        ({"preset": "slurm", "node_names": "lsf"}, "remediation.node_names: Input should be"),
    ],
)
def test_bad_templates_are_rejected_at_load(remediation: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_dict({**TSDB, "remediation": remediation}, "x.yaml")
    assert f"x.yaml: {message}" in str(caught.value) or message in str(caught.value)
    assert str(caught.value).startswith("x.yaml: remediation")


def make_client(tmp_path: Path, mode: str | None, script: Path) -> TestClient:
    templates = {
        "drain": [sys.executable, str(script), "drain", "{node}", "{reason}"],
        "swap_in": [sys.executable, str(script), "swap_in", "{spare}", "{alarm_id}"],
    }
    raw: dict[str, Any] = {
        **TSDB,
        "store": {"sqlite": str(tmp_path / "s.sqlite")},
        "spares": ["gpu010", "gpu011", "gpu012"],
        "api": {"token": TOKEN},
    }
    if mode is not None:
        raw["remediation"] = {"mode": mode, "templates": templates, "timeout": "10s"}
    service = Service(config_from_dict(raw), clock=Clock(start=T0 + 900, origin=time.time()))
    # gpu010 and gpu012 were taken out and came back: riskier than gpu011, which the name order would not pick.
    rows = [
        alarm("gpu003", T0 + 800),
        alarm("gpu004", T0 + 810),
        alarm("gpu010", T0 + 100, resolved=T0 + 400),
        alarm("gpu012", T0 + 200, resolved=T0 + 300),
    ]
    service.store.commit(StepChanges(rows, ("gpu003", "gpu004", "gpu010", "gpu011", "gpu012"), T0 + 830, T0 + 830))
    return TestClient(create_app(service, run=False))


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "act.py"
    path.write_text(
        "import pathlib, sys\n"
        f"with open({str(tmp_path / 'ran.txt')!r}, 'a') as f:\n"
        "    f.write(' '.join(sys.argv[1:]) + '\\n')\n"
        "print('done', sys.argv[1])\n"
    )
    return path


def _ids(client: TestClient) -> dict[str, str]:
    return {a["node"]: a["id"] for a in client.get("/api/v1/alarms?status=open").json()["alarms"]}


def test_dry_run_stores_the_action_and_runs_nothing(tmp_path: Path, script: Path) -> None:
    with make_client(tmp_path, "dry-run", script) as client:
        ident = _ids(client)["gpu003"]
        resp = client.post(f"/api/v1/alarms/{ident}/remediate", json={"action": "swap", "by": "ops"}, headers=AUTH)
        body = resp.json()
        assert resp.status_code == 200 and body["mode"] == "dry-run" and body["spare"] == "gpu011"
        assert [c["argv"][2:4] for c in body["commands"]] == [["drain", "gpu003"], ["swap_in", "gpu011"]]
        assert body["commands"][1]["argv"][4] == ident and body["exit_code"] is None and body["ok"]
        assert body["note"] == f"peerwatch alarm {ident}: gpu_fallen_off_bus on gpu/2"
        assert not (tmp_path / "ran.txt").exists()
        [stored] = client.get("/api/v1/actions").json()["actions"]
        assert stored["kind"] == "swap" and stored["by"] == "ops" and stored["mode"] == "dry-run"
        assert stored["argv"] == [c["argv"] for c in body["commands"]] and "not run" in stored["output"]
        nodes = {n["node"]: n for n in client.get("/api/v1/nodes").json()["nodes"]}
        assert nodes["gpu011"]["spare"] == "available"  # a dry run takes no spare


def test_execute_runs_and_the_lowest_risk_spare_is_not_offered_twice(tmp_path: Path, script: Path) -> None:
    with make_client(tmp_path, "execute", script) as client:
        ids = _ids(client)
        risk = {n["node"]: n["risk"] for n in client.get("/api/v1/nodes").json()["nodes"]}
        assert risk["gpu011"] < min(risk["gpu010"], risk["gpu012"])
        first = client.post(
            f"/api/v1/alarms/{ids['gpu003']}/remediate",
            json={"action": "swap", "by": "ops", "reason": "XID 79, off the bus"},
            headers=AUTH,
        ).json()
        assert first["spare"] == "gpu011" and first["exit_code"] == 0 and first["ok"]
        assert [c["stdout"] for c in first["commands"]] == ["done drain\n", "done swap_in\n"]
        assert (tmp_path / "ran.txt").read_text() == (
            f"drain gpu003 XID 79, off the bus\nswap_in gpu011 {ids['gpu003']}\n"
        )
        nodes = {n["node"]: n for n in client.get("/api/v1/nodes").json()["nodes"]}
        assert nodes["gpu011"]["spare"] == "in_use"
        second = client.post(
            f"/api/v1/alarms/{ids['gpu004']}/remediate", json={"action": "swap", "by": "ops"}, headers=AUTH
        ).json()
        expected = min(("gpu010", "gpu012"), key=lambda n: (risk[n], n))
        assert second["spare"] == expected and second["spare_risk"] == pytest.approx(risk[expected], rel=0.01)
        actions = client.get(f"/api/v1/actions?alarm_id={ids['gpu003']}").json()["actions"]
        assert [(a["kind"], a["spare"], a["exit_code"]) for a in actions] == [("swap", "gpu011", 0)]
        assert client.get(f"/api/v1/alarms/{ids['gpu003']}").json()["actions"][0]["mode"] == "execute"


def test_a_failed_drain_swaps_nothing_in(tmp_path: Path, script: Path) -> None:
    script.write_text("import sys\nsys.exit(3 if sys.argv[1] == 'drain' else 0)\n")
    with make_client(tmp_path, "execute", script) as client:
        ident = _ids(client)["gpu003"]
        body = client.post(f"/api/v1/alarms/{ident}/remediate", json={"action": "swap", "by": "ops"}, headers=AUTH)
        assert body.json()["exit_code"] == 3 and not body.json()["ok"]
        assert [c["exit_code"] for c in body.json()["commands"]] == [3, None]
        nodes = {n["node"]: n for n in client.get("/api/v1/nodes").json()["nodes"]}
        assert nodes["gpu011"]["spare"] == "available"


def test_the_token_and_the_errors(tmp_path: Path, script: Path) -> None:
    with make_client(tmp_path, "execute", script) as client:
        url = f"/api/v1/alarms/{_ids(client)['gpu003']}/remediate"
        assert client.post(url, json={"action": "drain", "by": "ops"}).status_code == 401
        wrong = {"Authorization": "Bearer nope"}
        assert client.post(url, json={"action": "drain", "by": "ops"}, headers=wrong).status_code == 401
        assert not (tmp_path / "ran.txt").exists() and client.get("/api/v1/actions").json()["actions"] == []
        assert client.post(url, json={"action": "reboot", "by": "ops"}, headers=AUTH).status_code == 400
        assert client.post(url, json={"action": "drain"}, headers=AUTH).status_code == 400
        resp = client.post(url, json={"action": "undrain", "by": "ops"}, headers=AUTH)
        assert resp.status_code == 409 and "remediation.templates.undrain" in resp.json()["error"]
        missing = client.post("/api/v1/alarms/nope/remediate", json={"action": "drain", "by": "o"}, headers=AUTH)
        assert missing.status_code == 404
    with make_client(tmp_path / "none", None, script) as client:
        url = f"/api/v1/alarms/{_ids(client)['gpu003']}/remediate"
        resp = client.post(url, json={"action": "drain", "by": "ops"}, headers=AUTH)
        assert resp.status_code == 409 and "not configured" in resp.json()["error"]


def test_a_store_from_before_remediation_gains_the_columns(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE actions (seq INTEGER PRIMARY KEY AUTOINCREMENT, wall REAL NOT NULL, kind TEXT NOT NULL, "
            "alarm_id TEXT, node TEXT NOT NULL, by TEXT NOT NULL, note TEXT NOT NULL DEFAULT '')"
        )
        db.execute("INSERT INTO actions (wall, kind, alarm_id, node, by) VALUES (1, 'acknowledge', 'a', 'n', 'me')")
        db.execute("PRAGMA user_version = 1")
    store = SQLiteStore(path)
    store.record_action(ActionRecord(2.0, "drain", "a", "n", "me", "why", None, (("echo", "n"),), "dry-run"))
    old, new = store.actions()
    assert old.kind == "acknowledge" and old.argv == () and old.mode is None
    assert new.argv == (("echo", "n"),) and shlex.join(new.argv[0]) == "echo n"
    store.close()


HOSTILE = "--selector=nvidia.com/gpu.present=true"


@pytest.mark.parametrize(
    ("preset", "node"),
    [
        ("kubernetes", HOSTILE),
        ("kubernetes", "GPU068"),  # Kubernetes names are lowercase
        ("kubernetes", "gpu068."),
        ("kubernetes", "a" * 254),
        ("slurm", "gpu[001-512]"),  # a hostlist: every node of the range
        ("slurm", "gpu068,gpu069"),
        ("slurm", "gpu068 state=resume"),
        ("slurm", "-gpu068"),
        ("backendai", "--all"),
        ("backendai", "i-gpu068/x"),
        ("backendai", "i-gpu068\n"),
    ],
)
def test_a_name_the_scheduler_would_not_accept_never_reaches_a_command(preset: str, node: str) -> None:
    with pytest.raises(InvalidValue, match="is not a valid"):
        render(PRESETS[preset]["drain"], {**VALUES, "node": node}, NAME_RULES[preset])


@pytest.mark.parametrize(
    ("preset", "node"),
    [
        ("kubernetes", "gpu068.cluster.local"),
        ("kubernetes", "ip-10-0-3-17.ec2.internal"),
        ("slurm", "GPU068"),  # Slurm names are case-sensitive, capitals allowed
        ("slurm", "dgx_b200-01"),
        ("backendai", "i-gpu068"),
        ("backendai", "i-0abc123def4567890"),
    ],
)
def test_names_the_scheduler_accepts_render(preset: str, node: str) -> None:
    [argv] = render(PRESETS[preset]["undrain"], {**VALUES, "node": node}, NAME_RULES[preset])
    assert argv[-1] == node or argv[2] == f"nodename={node}"


def test_a_value_standing_alone_as_an_option_is_refused() -> None:
    commands = [["notify", "{reason}"], ["tag", "--reason={reason}"]]
    with pytest.raises(InvalidValue, match="would be read as an option by notify"):
        render(commands, {**VALUES, "reason": "--all"})
    assert render(commands[1:], {**VALUES, "reason": "--all"}) == (("tag", "--reason=--all"),)


def test_a_shell_template_loads_only_when_allowed() -> None:
    shell = {"templates": {"drain": ["/bin/sh", "-c", "kubectl drain -- {node}"]}}
    loaded = config_from_dict({**TSDB, "remediation": {**shell, "allow_shell": True}}).remediation
    assert loaded is not None and loaded.commands("drain") == (("/bin/sh", "-c", "kubectl drain -- {node}"),)
    # Even through an allowed shell, a name is only ever a host name.
    with pytest.raises(InvalidValue):
        render(loaded.commands("drain"), {**VALUES, "node": "x; rm -rf /"}, loaded.name_rule)


def test_spares_are_checked_against_the_rule_at_load() -> None:
    raw = {**TSDB, "remediation": {"preset": "kubernetes"}, "spares": ["gpu010", "GPU011"]}
    with pytest.raises(ConfigError, match="spares: spare 'GPU011' is not a valid Kubernetes node name"):
        config_from_dict(raw, "x.yaml")
    assert config_from_dict({**raw, "remediation": {"preset": "slurm"}}).spares == ["gpu010", "GPU011"]


def test_the_api_refuses_a_hostile_node_and_stores_nothing(tmp_path: Path) -> None:
    raw: dict[str, Any] = {
        **TSDB,
        "store": {"sqlite": str(tmp_path / "s.sqlite")},
        "api": {"token": TOKEN},
        "remediation": {"preset": "kubernetes"},  # dry-run: a rendered command would be stored
    }
    service = Service(config_from_dict(raw), clock=Clock(start=T0 + 900, origin=time.time()))
    service.store.commit(StepChanges([alarm(HOSTILE, T0 + 800), alarm("gpu003", T0 + 800)], (), T0 + 830, T0 + 830))
    with TestClient(create_app(service, run=False)) as client:
        ident = _ids(client)[HOSTILE]
        resp = client.post(f"/api/v1/alarms/{ident}/remediate", json={"action": "drain", "by": "ops"}, headers=AUTH)
        assert resp.status_code == 400
        assert resp.json()["error"] == (
            f"nothing was run for alarm {ident}: node {HOSTILE!r} is not a valid Kubernetes node name "
            f"({NAME_RULES['kubernetes'].description})"
        )
        assert client.get("/api/v1/actions").json()["actions"] == []
        good = client.post(
            f"/api/v1/alarms/{_ids(client)['gpu003']}/remediate", json={"action": "drain", "by": "ops"}, headers=AUTH
        ).json()
        assert good["commands"][0]["argv"] == ["kubectl", "cordon", "--", "gpu003"]
