"""Fuzz (issue 18.7, for 18.4): whatever a node is named, no name reaches a command as an option or as
more than one node, and every name but ``.`` and ``..`` round-trips through a dashboard URL."""

from __future__ import annotations

import re
import time
from datetime import timedelta
from html import escape
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from peerwatch.alarms.names import NAME_RULES, InvalidValue
from peerwatch.alarms.remediation import PRESETS, render
from peerwatch.service import Service, config_from_dict
from peerwatch.service.app import create_app
from peerwatch.service.clock import Clock
from peerwatch.web.paths import node_url

FAST = settings(max_examples=300, deadline=timedelta(milliseconds=500), suppress_health_check=[HealthCheck.too_slow])
# Pieces of the attacks seen (option injection, hostlists, shells, paths) around ordinary host names.
HOSTILE = st.sampled_from(
    ["--selector=", "-", "--", "[001-512]", ",", "=", " ", ";", "$(id)", "`id`", "/", "\n", "\x00", "%2F", "*", "gpu"]
)
NAMES = st.one_of(
    st.text(max_size=40),
    st.lists(st.one_of(HOSTILE, st.from_regex(r"[a-z0-9.-]{1,8}", fullmatch=True)), max_size=6).map("".join),
)
SAFE = re.compile(r"[A-Za-z0-9_.-]+")


@FAST
@given(name=NAMES, preset=st.sampled_from(sorted(PRESETS)))
@example(name="false", preset="backendai")  # a node named like a word of the template (failed CI once)
def test_no_name_becomes_an_option_or_several_nodes(name: str, preset: str) -> None:
    for template in ("drain", "undrain", "swap_in"):
        commands = PRESETS[preset][template]
        values = {"node": name, "spare": name, "reason": "XID 79", "alarm_id": "a1"}
        try:
            rendered = render(commands, values, NAME_RULES[preset])
        except InvalidValue as exc:
            assert "is not a valid" in str(exc) or "option" in str(exc) or "control" in str(exc)
            continue
        assert SAFE.fullmatch(name) and not name.startswith("-") and not name.endswith(("-", "."))
        for argv, template_argv in zip(rendered, commands, strict=True):
            options = [a for a in argv if a.startswith("-")]
            assert options == [a for a in template_argv if a.startswith("-")]  # only the template's own
            # Argument for argument the template's: the name fills its placeholder and adds no argument.
            # (Counting the arguments equal to the name miscounts a node named like one of the template's
            # own words, e.g. Backend.AI's "false".)
            for arg, template_arg in zip(argv, template_argv, strict=True):
                if "{node}" in template_arg or "{spare}" in template_arg:
                    assert arg in (name, f"nodename={name}")
                elif "{" not in template_arg:
                    assert arg == template_arg


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> TestClient:
    folder: Path = tmp_path_factory.mktemp("names")
    raw = {"source": {"tsdb": {"url": "http://127.0.0.1:1"}}, "store": {"sqlite": str(folder / "s.sqlite")}}
    service = Service(config_from_dict(raw), clock=Clock(start=1.7e9, origin=time.time()))
    return TestClient(create_app(service, run=False))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=30))
def test_every_name_round_trips_through_its_page_url(client: TestClient, name: str) -> None:
    if name in (".", ".."):  # dot segments: every URL parser removes them (Kubernetes forbids such names)
        return
    page = client.get(node_url("/dashboard/nodes", name))
    assert page.status_code == 404  # no such node in the store: the page names the node it was asked for
    assert f"no node {escape(name, quote=True)} seen" in page.text
