"""The `peerwatch` command: parses arguments and calls the library; no logic of its own."""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from typer.core import TyperGroup

from peerwatch import __version__
from peerwatch.series_budget import SeriesBudget

if TYPE_CHECKING:
    from peerwatch.settings import DetectionSettings
    from peerwatch.sources.tsdb_http import HttpOptions

T = TypeVar("T")

# The commands beside analyze and catalog, each imported when named: loading them all (the service's
# pydantic config models, the agent, the simulator) made importing this module take 0.76 s, now 0.10 s.
LAZY: dict[str, tuple[str, str]] = {
    "fleet": ("peerwatch.act.commands", "fleet_app"),
    "burnin": ("peerwatch.act.commands", "burnin_app"),
    "agent": ("peerwatch.agent.command", "agent_app"),
    "evaluate": ("peerwatch.evaluate.commands", "evaluate_command"),
    "serve": ("peerwatch.service.commands", "serve_command"),
    "demo": ("peerwatch.service.commands", "demo_command"),
    "simulate": ("peerwatch.simulate.commands", "simulate_command"),
    "training": ("peerwatch.training.commands", "app"),
}


def _subcommand(name: str, target: typer.Typer | Callable[..., object]) -> Any:
    """The click command of a sub-app or function, as ``add_typer`` / ``command`` would make it."""
    holder = typer.Typer(add_completion=False, rich_markup_mode=None)
    holder.callback()(lambda: None)  # a group, even around one command
    if isinstance(target, typer.Typer):
        holder.add_typer(target, name=name)
    else:
        holder.command(name)(target)
    group = typer.main.get_command(holder)
    assert isinstance(group, TyperGroup)
    return group.commands[name]


class _LazyGroup(TyperGroup):
    """Imports a subcommand of ``LAZY`` when it is named (or help lists them all)."""

    def list_commands(self, ctx: Any) -> list[str]:  # click's Context, whichever typer vendors
        return [*super().list_commands(ctx), *(name for name in LAZY if name not in self.commands)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name in LAZY and cmd_name not in self.commands:
            module, attr = LAZY[cmd_name]
            self.commands[cmd_name] = _subcommand(cmd_name, getattr(importlib.import_module(module), attr))
        return super().get_command(ctx, cmd_name)


app = typer.Typer(
    cls=_LazyGroup,
    name="peerwatch",
    help="Detect failing GPUs, links and hosts in GPU training clusters by comparing peers.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,  # typer's rich help prints flags as `--json <bool>`, as if they took a value
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"peerwatch {__version__}")
        raise typer.Exit()


HttpConfigFile = Annotated[
    Path | None,
    typer.Option(
        "--http-config-file",
        help="YAML with headers, bearer_token(_file), basic_auth, tls_config and tenant for TSDB URLs "
        "(the keys of source.tsdb in docs/service.md).",
    ),
]


def _from_file(load: Callable[[Path], T], path: Path | None) -> T | None:
    """A configuration file read by ``load``; a bad file ends the command with its message."""
    if path is None:
        return None
    from peerwatch.alarms.errors import ConfigError

    try:
        return load(path)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def _http_options(path: Path | None) -> HttpOptions | None:
    """The ``--http-config-file`` options."""
    if path is None:  # before the import: the service's config models take ~0.3 s to load
        return None
    from peerwatch.service.config import load_http_config

    return _from_file(load_http_config, path)


def _cores() -> int:
    """Cores this process may run on (a container's CPU set, not the host's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _detection(path: Path | None) -> DetectionSettings | None:
    """The ``--config`` file's detection settings."""
    if path is None:
        return None
    from peerwatch.service.config import load_detection

    return _from_file(load_detection, path)


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """peerwatch command line."""


@app.command()
def catalog(
    inputs: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="INPUT",
            help="Recorded files or folders, a Prometheus/VictoriaMetrics URL, or an exporter's /metrics URL.",
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    step: Annotated[float, typer.Option(help="Step of the alignment grid, seconds.")] = 30.0,
    start: Annotated[
        float | None, typer.Option(help="Start of a TSDB read, epoch seconds (default: end - 1 h).")
    ] = None,
    end: Annotated[float | None, typer.Option(help="End of a TSDB read, epoch seconds (default: now).")] = None,
    top: Annotated[int, typer.Option(help="How many of the largest families to list.")] = 25,
    http_config_file: HttpConfigFile = None,
) -> None:
    """Report the metric families in INPUT: seen, active, by category and unit, series counts, unknowns.

    With no INPUT, reports on the real exporter outputs bundled with peerwatch.
    """
    from rich.console import Console

    from peerwatch.catalog.render import render_report
    from peerwatch.catalog.report import report_inputs, report_json
    from peerwatch.sources.inputs import bundled_samples

    items = inputs or [str(p) for p in bundled_samples()]
    report = report_inputs(items, step=step, start=start, end=end, http=_http_options(http_config_file))
    if json_out:
        typer.echo(json.dumps(report_json(report), indent=2))
    else:
        render_report(report, Console(), top=top)
    if not report.rows:
        typer.echo("error: nothing usable was read from " + ", ".join(items), err=True)
        raise typer.Exit(1)


@app.command()
def analyze(
    inputs: Annotated[
        list[str],
        typer.Argument(metavar="INPUT", help="Recorded files or folders, a TSDB URL, or exporter URLs."),
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            help="Write one JSON line per alarm here ('-': standard output); the fields are listed in "
            "docs/detection.md.",
        ),
    ],
    step: Annotated[
        float | None,
        typer.Option(help="Step of the alignment grid, seconds (default: the data's scrape interval, at least 30)."),
    ] = None,
    start: Annotated[float | None, typer.Option(help="Start of a TSDB read, epoch seconds.")] = None,
    end: Annotated[float | None, typer.Option(help="End of a TSDB read, epoch seconds.")] = None,
    http_config_file: HttpConfigFile = None,
    node: Annotated[
        str | None,
        typer.Option(
            help="Node of recorded series that name none (no instance/hostname label); "
            "default for a Prometheus text file: its file name."
        ),
    ] = None,
    max_series_per_family: Annotated[
        int, typer.Option(min=1, help="Series kept per metric family; those beyond are left out and reported.")
    ] = SeriesBudget.per_family,
    max_series_per_input: Annotated[
        int, typer.Option(min=1, help="Series kept of each INPUT; those beyond are left out and reported.")
    ] = SeriesBudget.per_input,
    max_series: Annotated[
        int, typer.Option(min=1, help="Series kept in all; those beyond are left out and reported.")
    ] = SeriesBudget.total,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="YAML whose detection: section sets detector and policy thresholds (docs/settings.md); "
            "a peerwatch.yaml of serve will do.",
        ),
    ] = None,
    jobs: Annotated[
        int,
        typer.Option(
            "--jobs",
            "-j",
            min=0,
            help="Processes at work at once: 1 reads and judges in this process alone; 0 (default) uses "
            "the machine's cores (a large export read in parts, the peer detector in a second process). "
            "The alarms are the same.",
        ),
    ] = 0,
) -> None:
    """Detect failing nodes, GPUs, ports and mounts in recorded metrics; write the alarms as JSON lines."""
    from rich.console import Console

    from peerwatch.detect.group_summary import summary
    from peerwatch.engine import Judged, analyze_segments, read_frames
    from peerwatch.model import Alarm, ProblemLog
    from peerwatch.progress import working
    from peerwatch.redact import redact_url
    from peerwatch.render import render_alarms

    problems = ProblemLog()
    http = _http_options(http_config_file)
    settings = _detection(config)
    shown = ", ".join(redact_url(i) for i in inputs)  # a URL may carry a password
    budget = SeriesBudget(max_series_per_family, max_series_per_input, max_series)
    jobs = jobs or _cores()
    with working("reading " + shown):
        builder = read_frames(
            inputs, step=step, start=start, end=end, problems=problems, node=node, budget=budget, http=http,
            jobs=jobs,
        )  # fmt: skip
    alarms: list[Alarm] = []
    longest: Judged | None = None  # its peer groups are the ones summed up
    with working("judging"):
        for judged in analyze_segments(builder, settings=settings, jobs=jobs):
            alarms.extend(judged.alarms)
            if longest is None or judged.steps > longest.steps:
                longest = judged
    if longest is None:
        typer.echo("error: nothing usable was read from " + shown, err=True)
        for p in problems.problems[:10]:
            typer.echo(f"  {p}", err=True)
        raise typer.Exit(1)
    lines = "".join(json.dumps(alarm.as_json()) + "\n" for alarm in alarms)
    if str(out) == "-":
        sys.stdout.write(lines)
    else:
        out.write_text(lines)
    console = Console(stderr=True)
    console.print(summary(longest.nodes, longest.groups), markup=False, highlight=False, soft_wrap=True)
    render_alarms(alarms, problems, console)
