"""Rich rendering of an evaluation: one row per fault kind and system, then the overall block."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from peerwatch.evaluate.run import Evaluation, SystemResult
from peerwatch.evaluate.score import FaultTally, Summary


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100.0 * x:.0f}%"


def duration(seconds: float | None) -> str:
    """Seconds as a short human duration; negative stays negative (an alarm after the failure)."""
    if seconds is None:
        return "-"
    a = abs(seconds)
    if a < 120:
        return f"{seconds:.0f} s"
    if a < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _kind_cells(t: FaultTally) -> list[str]:
    lead = "-" if not t.leads else f"{duration(t.lead_median)} / {duration(t.lead_p10)} (n={len(t.leads)})"
    sudden = "-" if not t.sudden else f"{t.sudden_fast}/{t.sudden}"
    return [
        f"{t.detected}/{t.faults}",
        pct(t.recall),
        pct(t.diagnosis),
        pct(t.localisation),
        lead,
        duration(t.detect_median),
        sudden,
    ]


def kinds_table(systems: Sequence[SystemResult]) -> Table:
    """Rows: fault kind x system; the scores of each kind side by side."""
    table = Table(title="Per fault kind", show_lines=False)
    for col in ("kind", "system", "detected", "recall", "diagnosis", "localisation"):
        label = col in ("kind", "system")
        table.add_column(col, justify="left" if label else "right", no_wrap=label)
    table.add_column("lead median / p10", justify="right")
    table.add_column("time to detect", justify="right")
    table.add_column("sudden, fast", justify="right")
    summaries = [(s.name, s.summary) for s in systems]
    kinds = sorted({k for _, summ in summaries for k in summ.kinds})
    for kind in kinds:
        for i, (name, summ) in enumerate(summaries):
            tally = summ.kinds.get(kind, FaultTally())
            table.add_row(kind if i == 0 else "", name, *_kind_cells(tally), end_section=i == len(summaries) - 1)
    for i, (name, summ) in enumerate(summaries):
        table.add_row("all" if i == 0 else "", name, *_kind_cells(summ.overall), style="bold")
    return table


def _overall_rows(s: Summary, seconds: float) -> list[str]:
    a, o = s.alarms, s.overall
    return [
        str(a.scenarios),
        f"{a.node_hours:.1f}",
        f"{o.detected}/{o.faults}",
        pct(o.recall),
        pct(a.precision),
        f"{a.node_alarms} ({a.false_alarms} false)",
        "-" if a.false_per_1000_node_hours is None else f"{a.false_per_1000_node_hours:.1f}",
        f"{a.cluster_alarms} ({a.cluster_alarms_matched} matched)",
        pct(o.diagnosis),
        pct(o.localisation),
        duration(o.lead_median),
        duration(o.lead_p10),
        duration(o.detect_median),
        f"{o.sudden_fast}/{o.sudden}",
        f"{seconds:.1f} s",
    ]


OVERALL_FIGURES = (
    "scenarios",
    "node-hours",
    "faults detected",
    "recall",
    "precision (node alarms)",
    "node alarms",
    "false alarms / 1,000 node-hours",
    "cluster alarms",
    "diagnosis accuracy",
    "localisation accuracy",
    "lead time median",
    "lead time p10",
    "time to detect median",
    "no-precursor faults caught within 2 steps",
    "run time",
)


def overall_table(systems: Sequence[SystemResult]) -> Table:
    """Figures as rows, one column per system."""
    table = Table(title="Overall")
    table.add_column("figure", no_wrap=True)
    columns = [_overall_rows(s.summary, sum(s.seconds)) for s in systems]
    for s in systems:
        table.add_column(s.name, justify="right")
    for i, figure in enumerate(OVERALL_FIGURES):
        table.add_row(figure, *(col[i] for col in columns))
    return table


def render(evaluation: Evaluation, console: Console) -> None:
    """Print the per-kind table and the overall block."""
    console.print(kinds_table(evaluation.systems))
    console.print(overall_table(evaluation.systems))
    problems = [s for s in evaluation.systems if s.input_problems]
    for s in problems:
        console.print(f"[yellow]{s.name}: {s.input_problems} input problems while reading the recordings[/]")
