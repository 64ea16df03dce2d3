"""Rich rendering of alarms for a terminal."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from rich.console import Console
from rich.table import Table

from peerwatch.model import Alarm, ProblemLog


def render_alarms(alarms: Sequence[Alarm], problems: ProblemLog, console: Console) -> None:
    """A table of alarms, strongest evidence first, then a word on input problems."""
    table = Table(title=f"{len(alarms)} alarms", title_justify="left")
    for col in ("raised (UTC)", "node", "component", "diagnosis", "severity", "action", "score", "evidence"):
        table.add_column(col)
    for a in alarms:
        when = datetime.fromtimestamp(a.ts, UTC).strftime("%Y-%m-%d %H:%M:%S")
        top = a.evidence[0] if a.evidence else None
        note = f"{top.metric}: {top.note}" if top else ""
        table.add_row(when, a.node, a.component, a.diagnosis, a.severity, a.action, f"{a.score:.1f}", note)
    console.print(table)
    if len(problems):
        console.print(f"[yellow]{len(problems)} input problems[/]; the first ones:")
        for p in problems.problems[:5]:
            console.print(f"  {p}", markup=False, highlight=False)
