"""Burn-in ingestion, the port decision table and `peerwatch burnin report`."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

from peerwatch.act.burnin import (
    COLUMNS,
    DEFAULT_RULES,
    BurninError,
    PortRule,
    decide,
    load_rules,
    measures,
    parse_burnin,
    read_burnin,
)
from peerwatch.act.commands import burnin_app

FIXTURE = Path(__file__).parent / "fixtures" / "burnin" / "ports.csv"
PLANTED_DISABLE = {("gpu-008", "mlx5_1"), ("gpu-017", "mlx5_3"), ("gpu-023", "mlx5_5"), ("gpu-031", "mlx5_6"),
                   ("gpu-036", "mlx5_2")}  # fmt: skip
PLANTED_WATCH = {("gpu-012", "mlx5_4"), ("gpu-027", "mlx5_0")}
HEADER = ",".join(COLUMNS)
GOOD = "gpu-1,mlx5_0,1,3600,392,400,0,0,0,pass"


def csv_text(*rows: str, header: str = HEADER) -> str:
    return "\n".join((header, *rows)) + "\n"


def test_fixture_finds_exactly_the_planted_ports() -> None:
    report = decide(read_burnin(FIXTURE))
    assert (report.ports, report.nodes) == (360, 40)
    assert {(d.node, d.device) for d in report.of("disable")} == PLANTED_DISABLE
    assert {(d.node, d.device) for d in report.of("watch")} == PLANTED_WATCH
    by_port = {(d.node, d.device): d for d in report.decisions}
    assert by_port[("gpu-031", "mlx5_6")].rules == ("slow_vs_peers",)  # above 90% of line rate, below its peers
    assert by_port[("gpu-023", "mlx5_5")].rules == ("link_downed", "slow_vs_peers", "link_recoveries")
    assert by_port[("gpu-008", "mlx5_1")].command == "ibportstate 164 1 disable"
    assert all(d.command is None for d in report.of("watch"))
    assert report.peer_median_gbps[400.0] == pytest.approx(392, abs=1)


def test_decisions_do_not_depend_on_row_order() -> None:
    lines = FIXTURE.read_text().splitlines()
    shuffled = [lines[0], *np.random.default_rng(3).permutation(lines[1:]).tolist()]
    a, b = decide(read_burnin(FIXTURE)), decide(parse_burnin("\n".join(shuffled), "shuffled"))
    assert a.decisions == b.decisions


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        (csv_text(GOOD, header=HEADER.replace(",result", "")), ":1:", "header lacks result"),
        (csv_text(GOOD, "gpu-2,mlx5_0,1,3600,fast,400,0,0,0,pass"), ":3:", "avg_gbps 'fast' is not a number"),
        (csv_text("gpu-2,mlx5_0,1,3600,390,400,-1,0,0,pass"), ":2:", "symbol_errors -1 must be >= 0"),
        (csv_text("gpu-2,mlx5_0,1,0,390,400,0,0,0,pass"), ":2:", "duration_s 0 must be > 0"),
        (csv_text("gpu-2,mlx5_0,1,3600,nan,400,0,0,0,pass"), ":2:", "avg_gbps nan"),
        (csv_text("gpu-2,mlx5_0,1.5,3600,390,400,0,0,0,pass"), ":2:", "port 1.5 is not an integer"),
        (csv_text("gpu-2,mlx5_0,1,3600,390,400,0,0,0,maybe"), ":2:", "result 'maybe'"),
        (csv_text(",mlx5_0,1,3600,390,400,0,0,0,pass"), ":2:", "node is empty"),
        (csv_text(GOOD, GOOD), ":3:", "already given on line 2"),
    ],
)
def test_bad_rows_name_the_line(text: str, where: str, message: str) -> None:
    with pytest.raises(BurninError, match=r"ports\.csv") as info:
        parse_burnin(text, "ports.csv")
    assert where in str(info.value) and message in str(info.value)


def test_unknown_values_never_fire_a_rule() -> None:
    """Two ports of a speed are too few for a peer median: the peer rule stays silent, the others do not."""
    text = csv_text("a,mlx5_0,1,3600,150,200,0,0,0,pass", "a,mlx5_1,1,3600,196,200,0,0,0,pass")
    results = parse_burnin(text, "t")
    assert np.isnan(measures(results)["vs_peers"]).all()
    report = decide(results)
    assert [(d.device, d.rules) for d in report.decisions] == [("mlx5_0", ("slow_vs_line_rate",))]


def test_bit_error_rate_is_per_bit_of_line_rate() -> None:
    results = parse_burnin(csv_text("a,mlx5_0,1,100,392,400,100,0,0,pass"), "t")
    assert measures(results)["symbol_ber"][0] == pytest.approx(100 / (100 * 400e9))
    assert decide(results).decisions[0].rules == ("bit_errors",)


def test_missing_lid_gives_no_command_unless_the_template_needs_none() -> None:
    results = parse_burnin(csv_text("a,mlx5_0,1,3600,392,400,0,1,0,pass"), "t")
    assert decide(results).decisions[0].command is None
    ssh = "ssh {node} ibportstate -C {device} -D 0 {port} disable"
    assert decide(results, command=ssh).decisions[0].command == "ssh a ibportstate -C mlx5_0 -D 0 1 disable"
    assert decide(results, command="ibportstate {lid:>5} {port} disable").decisions[0].command is None
    with pytest.raises(BurninError, match="allowed"):
        decide(results, command="ibportstate {guid} {port} disable")


def test_names_from_the_file_are_quoted_for_the_shell() -> None:
    results = parse_burnin(csv_text("a;reboot,mlx5_0 $(id),1,3600,392,400,0,1,0,pass"), "t")
    ssh = "ssh {node} ibportstate -C {device} -D 0 {port} disable"
    assert (
        decide(results, command=ssh).decisions[0].command
        == "ssh 'a;reboot' ibportstate -C 'mlx5_0 $(id)' -D 0 1 disable"
    )


def test_custom_rules_from_toml(tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"
    path.write_text(
        '[[rule]]\nname = "any_recovery"\nmeasure = "link_error_recovery"\nop = ">="\nthreshold = 1\n'
        'action = "disable"\nreason = "{value:g} recoveries"\n'
    )
    rules = load_rules(path)
    assert rules == (PortRule("any_recovery", "link_error_recovery", ">=", 1.0, "disable", "{value:g} recoveries"),)
    report = decide(read_burnin(FIXTURE), rules)
    assert {(d.node, d.device) for d in report.decisions} == {("gpu-012", "mlx5_4"), ("gpu-023", "mlx5_5")}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('[[rule]]\nname = "x"\n', "needs exactly the keys"),
        ('[[rule]]\nname="x"\nmeasure="speed"\nop="<"\nthreshold=1\naction="disable"\nreason="r"\n', "measure"),
        ('[[rule]]\nname="x"\nmeasure="failed"\nop="<"\nthreshold="1"\naction="disable"\nreason="r"\n', "number"),
        ('[[rule]]\nname="x"\nmeasure="failed"\nop="<"\nthreshold=1\naction="disable"\nreason="{speed}"\n', "speed"),
        ('[rules]\nname = "x"\n', "only [[rule]]"),
        ("[[rule]\n", "rules.toml"),
    ],
)
def test_bad_rule_tables_are_rejected(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "rules.toml"
    path.write_text(body)
    with pytest.raises(BurninError, match=r"rules\.toml") as info:
        load_rules(path)
    assert message in str(info.value)


def test_default_table_is_well_formed() -> None:
    names = [r.name for r in DEFAULT_RULES]
    assert len(names) == len(set(names))
    for rule in DEFAULT_RULES:
        rule.reason.format(value=1.0, threshold=rule.threshold, avg_gbps=1.0, expected_gbps=1.0, peer_gbps=1.0)
        assert math.isfinite(rule.threshold)


def test_cli_burnin_report(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(burnin_app, ["report", str(FIXTURE), "--json"])
    assert result.exit_code == 0, result.output
    data = orjson.loads(result.output)
    assert sum(d["action"] == "disable" for d in data["decisions"]) == 5
    text = runner.invoke(burnin_app, ["report", str(FIXTURE)])
    assert text.exit_code == 0 and "ibportstate 417 1 disable" in text.output
    bad = tmp_path / "ports.csv"
    bad.write_text(csv_text("gpu-2,mlx5_0,1,3600,390,400,0,0,0,maybe"))
    result = runner.invoke(burnin_app, ["report", str(bad)])
    assert result.exit_code == 2 and "ports.csv:2" in result.output
