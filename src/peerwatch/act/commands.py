"""`peerwatch fleet …` and `peerwatch burnin …`: parse arguments, call the library, print."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn

import orjson
import typer
from rich.console import Console
from rich.table import Table

from peerwatch.act.burnin import DEFAULT_COMMAND, DEFAULT_RULES, BurninError, BurninReport, decide, load_rules
from peerwatch.act.burnin import read_burnin as read_burnin_file
from peerwatch.act.fleet import BASELINES, ComparisonRow, FleetReport, compare_rankers, fleet_report, risk_ranker
from peerwatch.act.history import FaultHistory, HistoryError, load_history, parse_ts
from peerwatch.act.risk import DEFAULT_PARAMS, RiskParams, select_risk_params

fleet_app = typer.Typer(
    help="Fault history of the fleet: lemons, spares, risk ranking.", no_args_is_help=True, rich_markup_mode=None
)
burnin_app = typer.Typer(
    help="InfiniBand burn-in results: which ports to disable.", no_args_is_help=True, rich_markup_mode=None
)

SPARK = "▁▂▃▄▅▆▇█"
JSON_OPTS = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
HistoryArg = Annotated[Path, typer.Argument(help="InfiniteHBD trace, or peerwatch history (JSONL/CSV).")]
FleetSize = Annotated[
    int | None,
    typer.Option("--fleet-size", help="Nodes in the fleet (default: 400 for InfiniteHBD, else those named)."),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


@burnin_app.callback()
def burnin_group() -> None:
    """InfiniBand burn-in results: which ports to disable."""  # a group even with a single command


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def _history(path: Path, fleet_size: int | None) -> FaultHistory:
    try:
        return load_history(path, fleet_size)
    except HistoryError as exc:
        _fail(str(exc))


def _when(text: str | None) -> float | None:
    try:
        return None if text is None else parse_ts(text)
    except ValueError as exc:
        _fail(str(exc))


def _date(ts: float | None) -> str:
    return "-" if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M")


def _json(value: Any) -> None:
    typer.echo(orjson.dumps(value, option=JSON_OPTS, default=_plain).decode())


def _plain(value: Any) -> Any:
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    raise TypeError


def _params_json(p: RiskParams) -> dict[str, Any]:
    return {"half_lives_days": [h if math.isfinite(h) else "inf" for h in p.half_lives_days], "weights": p.weights}


@fleet_app.command("report")
def report_cmd(
    history: HistoryArg,
    as_json: AsJson = False,
    fleet_size: FleetSize = None,
    at: Annotated[
        str | None, typer.Option(help="Report as of this time (epoch or ISO 8601; default: last event).")
    ] = None,
    lemons: Annotated[int, typer.Option(min=1, help="How many lemons to list.")] = 10,
    trusted_days: Annotated[float, typer.Option(min=0.0, help="Trusted: up, no fault for this many days.")] = 90.0,
) -> None:
    """Lemons versus the trusted pool, machines down at once, spare headroom."""
    report = fleet_report(_history(history, fleet_size), DEFAULT_PARAMS, _when(at), lemons, trusted_days)
    if as_json:
        _json(report)
    else:
        _print_report(report, Console())


def _print_report(r: FleetReport, out: Console) -> None:
    days = (r.at_ts - r.start_ts) / 86400
    out.print(
        f"[bold]{r.source}[/]: {r.fleet_size} nodes, {r.faults} faults on {r.nodes_faulted} nodes "
        f"over {days:.0f} days (to {_date(r.at_ts)})"
    )
    table = Table(title=f"Lemons (risk relative to a node with no history, as of {_date(r.at_ts)})")
    for col in ("node", "risk", "faults", "last fault", "state", "components"):
        table.add_column(col, justify="right" if col in ("risk", "faults") else "left")
    for n in r.lemons:
        parts = ", ".join(f"{c} ×{k}" for c, k in n.components)
        table.add_row(n.node, f"{n.risk:.1f}", str(n.faults), _date(n.last_fault_ts), "down" if n.down else "up", parts)
    out.print(table)
    out.print(f"Trusted pool: {len(r.trusted)} of {r.fleet_size} nodes up with no fault in {r.trusted_days:g} days")
    d = r.down
    spark = "".join(SPARK[min(len(SPARK) - 1, v * len(SPARK) // (d.peak + 1))] for v in d.timeline)
    out.print(f"Down at once: peak {d.peak} ({_date(d.peak_ts)}), mean {d.mean:.1f}, p95 {d.p95:g}, p99 {d.p99:g}")
    out.print(f"  {spark}  (max per {d.bin_seconds / 86400:.1f} days)")
    weekly = r.weekly_failing_fraction
    if weekly:
        out.print(
            f"Machines failing per week: mean {sum(weekly) / len(weekly):.1%} of the fleet, "
            f"worst week {max(weekly):.1%} (rule of thumb: ~3%)"
        )
    low, high = r.rule_of_thumb
    out.print(
        f"Spares: {r.spares_p99} ({r.spares_p99 / max(r.fleet_size, 1):.1%}) cover 99% of the time, "
        f"{r.spares_peak} the worst moment; rule of thumb 10–20% = {low}–{high} machines "
        f"({r.rule_of_thumb_coverage:.1%} of the time covered by {low})"
    )
    for note in r.notes:
        out.print(f"[dim]note: {note}[/]")


@fleet_app.command("evaluate")
def evaluate_cmd(
    trace: HistoryArg,
    as_json: AsJson = False,
    fleet_size: FleetSize = None,
    split: Annotated[str | None, typer.Option(help="Split the halves here (default: middle of the span).")] = None,
    keep_down: Annotated[bool, typer.Option("--keep-down", help="Rank nodes that are down too.")] = False,
    refit: Annotated[
        bool, typer.Option("--refit", help="Also fit the risk model on this history's first half.")
    ] = False,
) -> None:
    """Replay in time order: was the failing node in the top 5% / 10% by risk just before it failed?"""
    hist = _history(trace, fleet_size)
    split_ts = _when(split)
    rankers: dict[str, Callable[..., Any]] = {**BASELINES, "risk model": risk_ranker()}
    if refit:
        first, last = hist.span()
        params, _ = select_risk_params(hist, (first + last) / 2 if split_ts is None else split_ts)
        rankers["risk model (refit)"] = risk_ranker(params)
    rows = compare_rankers(hist, rankers, split_ts, exclude_down=not keep_down)
    if as_json:
        _json(
            {
                "source": hist.source,
                "fleet_size": hist.fleet_size,
                "exclude_down": not keep_down,
                "params": _params_json(DEFAULT_PARAMS),
                "rows": rows,
            }
        )
        return
    _print_rows(rows, Console())


def _print_rows(rows: list[ComparisonRow], out: Console) -> None:
    table = Table(title="Failing node in the top k just before it failed (fractional ties)")
    for col in ("ranker", "window", "faults", *(f"top {k}" for k in rows[0].top_k)):
        table.add_column(col, justify="left" if col in ("ranker", "window") else "right")
    for r in rows:
        table.add_row(r.ranker, r.window, str(r.faults), *(f"{v:.1%}" for v in r.rates))
    out.print(table)


@fleet_app.command("fit")
def fit_cmd(
    history: HistoryArg,
    until: Annotated[
        str | None, typer.Option(help="Use only faults before this (default: middle of the span).")
    ] = None,
    as_json: AsJson = False,
    fleet_size: FleetSize = None,
) -> None:
    """Choose the risk model's half-lives, ridge and weights from past faults only."""
    hist = _history(history, fleet_size)
    first, last = hist.span()
    cut = _when(until)
    try:
        params, table = select_risk_params(hist, (first + last) / 2 if cut is None else cut)
    except ValueError as exc:
        _fail(str(exc))
    if as_json:
        _json({"params": _params_json(params), "candidates": sorted(table, key=lambda c: -c.validation_loglik)})
        return
    out = Console()
    out.print(f"half-lives (days): {params.half_lives_days}\nweights: {params.weights}")
    for c in sorted(table, key=lambda c: -c.validation_loglik)[:5]:
        out.print(f"  {c.half_lives_days} ridge {c.ridge:g}: validation log-likelihood {c.validation_loglik:.4f}")


@burnin_app.command("report")
def burnin_cmd(
    file: Annotated[Path, typer.Argument(help="Per-port burn-in CSV (see docs/fleet.md).")],
    as_json: AsJson = False,
    rules: Annotated[
        Path | None, typer.Option(help="Decision table in TOML ([[rule]] …) instead of the default.")
    ] = None,
    command: Annotated[
        str, typer.Option(help="Command template; fields {node} {device} {port} {lid}.")
    ] = DEFAULT_COMMAND,
) -> None:
    """Which ports to disable (and which to watch) after an InfiniBand burn-in."""
    try:
        report = decide(read_burnin_file(file), load_rules(rules) if rules else DEFAULT_RULES, command)
    except BurninError as exc:
        _fail(str(exc))
    if as_json:
        _json(report)
    else:
        _print_burnin(report, Console())


def _print_burnin(r: BurninReport, out: Console) -> None:
    speeds = ", ".join(f"{s:g} Gb/s ports: median {m:g}" for s, m in sorted(r.peer_median_gbps.items()))
    out.print(f"[bold]{r.source}[/]: {r.ports} ports on {r.nodes} nodes ({speeds})")
    table = Table(title=f"{len(r.of('disable'))} ports to disable, {len(r.of('watch'))} to watch")
    for col in ("action", "node", "port", "reasons"):
        table.add_column(col)
    for d in r.decisions:
        table.add_row(d.action, d.node, f"{d.device}/{d.port}", "; ".join(d.reasons))
    out.print(table)
    for d in r.of("disable"):
        out.print(d.command or f"# {d.node} {d.device}/{d.port}: no lid in the file; pass --command without {{lid}}")
