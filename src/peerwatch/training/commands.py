"""`peerwatch training ...`: thin commands over :mod:`peerwatch.training` (parse, call, print)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer

from peerwatch.model import ProblemLog
from peerwatch.training.classify import classify_series
from peerwatch.training.features import SeriesError
from peerwatch.training.inputs import load_series
from peerwatch.training.nccl import HangVerdict, group_label
from peerwatch.training.nccl_logs import LogDirError
from peerwatch.training.nccl_report import find_culprits
from peerwatch.training.series import InputError
from peerwatch.training.shapes import Shape, ShapeResult

app = typer.Typer(
    help="Training-level signals: throughput/MFU curve shapes and NCCL hang culprits.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def _emit_json(obj: dict[str, Any]) -> None:
    sys.stdout.write(orjson.dumps(obj, option=orjson.OPT_INDENT_2).decode() + "\n")


def _problems(problems: ProblemLog) -> list[str]:
    return [str(p) for p in problems] + ([f"... and {problems.dropped} more"] if problems.dropped else [])


@app.command("classify")
def classify(
    file: Annotated[Path, typer.Argument(help="CSV ts,value[,expected] / ts,rank,value[,expected], or a step log.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    expected: Annotated[float | None, typer.Option("--expected", help="Full-speed value in the series' unit.")] = None,
) -> None:
    """Classify the shape of a job's throughput or MFU curve and say what it points to."""
    problems = ProblemLog()
    try:
        series = load_series(file, problems, expected)
        result = classify_series(
            series.ts, series.values, series.expected, series.per_rank, rank_ids=series.rank_ids or None
        )
    except (InputError, SeriesError) as exc:
        _fail(f"{file}: {exc}" if str(file) not in str(exc) else str(exc))
        return
    if json_out:
        _emit_json(
            {
                **result.to_dict(),
                "source": series.source,
                "unit": series.unit,
                "notes": list(series.notes),
                "samples": int(series.ts.size),
                "problems": _problems(problems),
            }
        )
        return
    _print_shape(result, series.source, series.unit, series.notes, len(problems))


def _print_shape(r: ShapeResult, source: str, unit: str, notes: tuple[str, ...], skipped: int) -> None:
    colour = typer.colors.GREEN if r.shape is Shape.healthy else typer.colors.RED
    typer.echo(typer.style(f"{r.shape.value}", fg=colour, bold=True) + f"  (confidence {r.confidence:.2f})")
    typer.echo(f"likely cause: {r.likely_cause}")
    typer.echo(f"check: {r.suggested_check}")
    if r.ranks:
        typer.echo("rank(s): " + ", ".join(map(str, r.ranks)))
    typer.echo("evidence:")
    for line in r.evidence:
        typer.echo(f"  - {line}")
    typer.echo(f"input: {source}, unit {unit}" + "".join(f"; {n}" for n in notes))
    if skipped:
        typer.echo(f"{skipped} bad line(s) skipped (listed on stderr)")


@app.command("nccl-hang")
def nccl_hang(
    paths: Annotated[
        list[Path],
        typer.Argument(help="Log files or folders: one log per host or rank, a pasted excerpt, dumps, RAS output."),
    ],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    world_size: Annotated[int | None, typer.Option("--world-size", min=1, help="Number of ranks in the job.")] = None,
) -> None:
    """Name the rank(s) and host(s) that never reached the collective an NCCL watchdog timed out on."""
    problems = ProblemLog()
    try:
        verdict = find_culprits(paths, problems, world_size)
    except LogDirError as exc:
        _fail(str(exc))
        return
    if json_out:
        _emit_json({**verdict.to_dict(), "problems": _problems(problems)})
        return
    _print_verdict(verdict)


def _print_verdict(v: HangVerdict) -> None:
    if v.hang is None and not v.culprit_ranks:
        typer.echo("no hang found")
    else:
        who = ", ".join(map(str, v.culprit_ranks)) or "none identified"
        typer.echo(
            typer.style(f"culprit rank(s): {who}", fg=typer.colors.RED, bold=True)
            + f"  host(s): {', '.join(v.culprit_hosts) or 'unknown'}  (confidence {v.confidence:.2f})"
        )
    if v.hang is not None:
        h = v.hang
        desc = f" ({h.desc})" if h.desc else ""
        typer.echo(f"waited on: {group_label(h)}{desc} SeqNum {h.seq} {h.op or ''}".rstrip())
    typer.echo(f"confidence: {v.level}: {v.reason}")
    typer.echo("evidence:")
    for line in v.evidence:
        typer.echo(f"  - {line}")
    if v.watchdog:
        typer.echo(f"stuck watchdog / heartbeat monitor: rank(s) {', '.join(str(r) for r, _, _ in v.watchdog)}")
    if v.ranks:
        counts: dict[str, int] = {}
        for s in v.ranks:
            counts[s.reason] = counts.get(s.reason, 0) + 1
        typer.echo("ranks: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) + " (--json lists each)")
