"""What a user sees of the CLI itself: help that stands alone, flags as flags, `--out -`, what simulate injects."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

from peerwatch.cli import LAZY, app
from peerwatch.simulate import FaultRequest, Scenario, default_spec, simulate, write_recording
from peerwatch.simulate.commands import describe_faults


def _commands(group: TyperGroup, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and subcommand, those imported only when named (cli.LAZY) too."""
    ctx = typer.Context(group)
    out = []
    for name in group.list_commands(ctx):
        out.append((*prefix, name))
        cmd = group.get_command(ctx, name)
        if isinstance(cmd, TyperGroup):
            out.extend(_commands(cmd, (*prefix, name)))
    return out


COMMANDS = _commands(typer.main.get_command(app))  # type: ignore[arg-type]


def test_every_command_is_listed_and_analyze_loads_none_of_the_others(tmp_path: Path) -> None:
    assert {path[0] for path in COMMANDS} == {"catalog", "analyze", *LAZY}
    assert ("fleet", "report") in COMMANDS and ("training", "nccl-hang") in COMMANDS  # subcommands too
    # In a fresh interpreter: analyze (here of a file that is not there) imports no other command's
    # modules, which made its start 0.66 s slower.
    code = (
        "import sys; from typer.testing import CliRunner; from peerwatch.cli import app;"
        f"CliRunner().invoke(app, ['analyze', {str(tmp_path / 'none.jsonl')!r}, '--out', '-']);"
        "print(sorted({m.split('.')[1] for m in sys.modules if m.startswith('peerwatch.')}))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "'engine'" in loaded
    for other in ("service", "agent", "simulate", "evaluate", "act", "web", "alarms"):
        assert f"'{other}'" not in loaded, f"analyze loads peerwatch.{other}"


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_help_shows_flags_as_flags_and_cites_nothing_users_lack(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.output, "a flag is shown as if it took a value"
    assert "GUIDE" not in result.output, "help cites the internal guide, which users do not have"


def test_analyze_out_dash_writes_the_alarms_to_stdout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rec = tmp_path / "rec"
    faults = (FaultRequest("gpu_card_drop", node="gpu004", gpu=1, at=0.6),)
    write_recording(simulate(Scenario("one", default_spec(8), hours=1.0, seed=3, faults=faults)), rec)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["analyze", str(rec), "--out", "-"])
    assert result.exit_code == 0, result.output
    alarms = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert any(a["node"] == "gpu004" for a in alarms)
    assert not (tmp_path / "-").exists(), "`--out -` wrote a file named '-'"


def test_simulate_says_what_it_injects() -> None:
    healthy = simulate(Scenario("h", default_spec(4), hours=0.1, seed=1))
    assert "injecting no faults" in describe_faults(healthy.faults, healthy.grid.start)
    sim = simulate(
        Scenario("f", default_spec(4), hours=0.5, seed=1, faults=(FaultRequest("nic_dropout", node="gpu002", at=0.5),))
    )
    text = describe_faults(sim.faults, sim.grid.start)
    assert "injecting 1 fault:" in text and "nic_dropout on gpu002" in text
