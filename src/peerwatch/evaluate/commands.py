"""``peerwatch evaluate``: score alarms against scenario labels, optionally beside the VM baseline.

The CLI adds it with ``app.command("evaluate")(evaluate_command)``; the command only parses
arguments, calls :func:`peerwatch.evaluate.run.evaluate_dirs` and prints. Exit code 0 whatever the
scores (they are information); 2 when the scenarios, alarms or VictoriaMetrics cannot be used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, NoReturn

import orjson
import typer

from peerwatch.evaluate.alarms import AlarmsError
from peerwatch.evaluate.baseline_vm import BaselineConfig
from peerwatch.evaluate.labels import LabelsError
from peerwatch.evaluate.run import EvaluateError, Evaluation, evaluate_dirs
from peerwatch.sources.tsdb import TSDBError

BASELINES = ("vm",)


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def evaluate_command(
    dirs: Annotated[list[Path], typer.Argument(help="Scenario folders (labels.json + recording), or folders of them.")],
    alarms: Annotated[
        Path | None,
        typer.Option(
            "--alarms",
            help="Score this analyze output instead of running the engine (a file name "
            "inside each scenario folder, or one file for one scenario).",
        ),
    ] = None,
    baseline: Annotated[
        str | None, typer.Option("--baseline", help="Also score a baseline: 'vm' (VictoriaMetrics outliers_mad).")
    ] = None,
    vm_url: Annotated[
        str | None, typer.Option("--vm-url", help="VictoriaMetrics to import scenarios into for --baseline vm.")
    ] = None,
    tolerance: Annotated[float, typer.Option("--tolerance", min=0.0, help="outliers_mad tolerance (x MAD).")] = 3.0,
    json_out: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
) -> None:
    """Score detection against simulated scenarios: recall, precision, false alarms, lead time, accuracy."""
    if baseline is not None and baseline not in BASELINES:
        _fail(f"unknown baseline {baseline!r}; known: {', '.join(BASELINES)}")
    if baseline == "vm" and not vm_url:
        _fail("--baseline vm needs --vm-url http://HOST:8428 (a VictoriaMetrics to import the scenarios into)")
    progress = None if json_out else (lambda msg: typer.echo(msg, err=True))
    try:
        result = evaluate_dirs(
            dirs,
            alarms=alarms,
            baseline_url=vm_url if baseline == "vm" else None,
            baseline=BaselineConfig(tolerance=tolerance),
            progress=progress,
        )
    except (EvaluateError, LabelsError, AlarmsError, TSDBError) as exc:
        _fail(str(exc))
    _print(result, json_out)


def _print(result: Evaluation, json_out: bool) -> None:
    if json_out:
        typer.echo(orjson.dumps(result.as_json(), option=orjson.OPT_INDENT_2).decode())
        return
    from rich.console import Console

    from peerwatch.evaluate.table import render

    render(result, Console())
