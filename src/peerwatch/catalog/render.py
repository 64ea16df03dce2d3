"""Rich tables of the catalogue report, for a terminal."""

from __future__ import annotations

from collections.abc import Mapping

from rich.console import Console, Group
from rich.table import Table

from peerwatch.catalog.activity import Tally
from peerwatch.catalog.report import CatalogReport


def _aside(t: Tally) -> str:
    return ", ".join(f"{k} {v}" for k, v in t.set_aside.items()) or "-"


def _tally_table(title: str, column: str, tallies: Mapping[str, Tally]) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column(column)
    table.add_column("seen", justify="right")
    table.add_column("active", justify="right")
    table.add_column("set aside")
    for name, t in sorted(tallies.items(), key=lambda kv: -kv[1].seen):
        table.add_row(name, str(t.seen), str(t.active), _aside(t))
    return table


def render_report(report: CatalogReport, console: Console, *, top: int = 25) -> None:
    """Print the summary, the tallies by category and unit, the largest and the unknown families."""
    total = report.summary.total
    series = sum(r.series for r in report.rows)
    console.print(
        f"[bold]{total.seen}[/] families seen → [bold green]{total.active}[/] active "
        f"(set aside: {_aside(total)}); {series:,} series, {report.samples:,} samples"
    )
    console.print(
        Group(
            _tally_table("By category", "category", {str(k): v for k, v in report.summary.by_category.items()}),
            _tally_table("By comparison unit", "unit", {str(k): v for k, v in report.summary.by_unit.items()}),
        )
    )
    largest = Table(title=f"Families by series count (top {top} of {len(report.rows)})", title_justify="left")
    for col in ("family", "exporter", "category", "unit", "series", "active"):
        largest.add_column(col, justify="right" if col == "series" else "left")
    for r in report.rows[:top]:
        state = "yes" if r.activity.active else f"no ({r.activity.reason})"
        largest.add_row(r.family.name, r.family.exporter, r.family.category, r.family.unit, f"{r.series:,}", state)
    console.print(largest)
    unknown = report.unknown
    if unknown:
        table = Table(
            title=f"Families not in the catalogue ({len(unknown)}), classified by rules", title_justify="left"
        )
        for col in ("family", "category", "unit", "bad", "rule", "series"):
            table.add_column(col)
        for r in unknown:
            f = r.family
            table.add_row(f.name, f.category, f.unit, f.bad, f.source.removeprefix("rule:"), f"{r.series:,}")
        console.print(table)
    else:
        console.print("Every family is in the catalogue.")
    if report.problem_count:
        console.print(f"[yellow]{report.problem_count} input problems[/]; the first ones:")
        for p in report.problems[:10]:
            console.print(f"  {p.where}: {p.message}", markup=False, highlight=False)
