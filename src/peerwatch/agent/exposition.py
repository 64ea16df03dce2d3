"""Render a run's results as Prometheus text exposition (format 0.0.4), by hand.

Hand-rendering keeps prometheus_client out of the runtime dependencies; the tests parse the
output with prometheus_client's parser to hold it to the format.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from peerwatch.agent.checks import CheckResult, LabelPairs, Measurement
from peerwatch.agent.families import FAMILIES
from peerwatch.promtext import escape_help, sample_line

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def status_measurements(results: Iterable[CheckResult]) -> list[Measurement]:
    """The ``check_status`` and ``check_info`` samples of ``results``."""
    out = []
    for r in results:
        out.append(Measurement.of("peerwatch_agent_check_status", r.status.value, check=r.check, component=r.component))
        out.append(
            Measurement.of(
                "peerwatch_agent_check_info", 1, check=r.check, component=r.component, status=r.status.name, hint=r.hint
            )
        )
    return out


def render(measurements: Iterable[Measurement]) -> str:
    """Text exposition of ``measurements``, grouped by family in catalogue order.

    Raises ``ValueError`` for an undeclared family or labels other than the family declares
    (a programming error, caught by tests). A repeated series keeps its last value, since the
    format forbids duplicates.
    """
    by_family: dict[str, dict[LabelPairs, float]] = defaultdict(dict)
    for m in measurements:
        spec = FAMILIES.get(m.family)
        if spec is None:
            raise ValueError(f"metric family {m.family!r} is not declared in peerwatch.agent.families")
        names = tuple(k for k, _ in m.labels)
        if sorted(names) != sorted(spec.labels):
            raise ValueError(f"{m.family}: labels {names} differ from the declared {spec.labels}")
        values = dict(m.labels)
        ordered = tuple((k, values[k]) for k in spec.labels)
        by_family[m.family][ordered] = m.value
    lines: list[str] = []
    for name, spec in FAMILIES.items():
        series = by_family.get(name)
        if not series:
            continue
        lines.append(f"# HELP {name} {escape_help(spec.help)}")
        lines.append(f"# TYPE {name} {spec.type}")
        lines.extend(sample_line(name, labels, value) for labels, value in sorted(series.items()))
    return "\n".join(lines) + "\n" if lines else ""
