"""The catalogue report: which families a cluster exports, what they mean, which carry signal.

This is the table the reference team wrote by hand (751 families seen, 305 active): families
seen and active, by category and by comparison unit, the series count of each family, and the
families the catalogue did not know with what the rules made of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from peerwatch.catalog.activity import Activity, ActivityFilter, ActivitySummary, Tally, summarize
from peerwatch.catalog.load import Catalog
from peerwatch.catalog.schema import Family
from peerwatch.frames import Frame, FrameBuilder
from peerwatch.model import Problem, ProblemLog
from peerwatch.sources.inputs import read_inputs
from peerwatch.sources.tsdb_http import HttpOptions


@dataclass(frozen=True, slots=True)
class FamilyRow:
    """One family as seen in the data."""

    family: Family
    activity: Activity
    series: int  # cardinality: every series of the family, histogram buckets included
    samples: int  # steps holding a sample, over all series


@dataclass(frozen=True, slots=True)
class CatalogReport:
    rows: tuple[FamilyRow, ...]  # by series count, largest first
    summary: ActivitySummary
    samples: int
    problems: tuple[Problem, ...]
    problem_count: int

    @property
    def unknown(self) -> tuple[FamilyRow, ...]:
        return tuple(r for r in self.rows if not r.family.known)


def build_report(
    frames: Mapping[str, Frame],
    catalog: Catalog,
    activity: ActivityFilter,
    problems: Sequence[Problem] = (),
    problem_count: int = 0,
) -> CatalogReport:
    """Group frames (raw values, not rates) into families and judge each over the frames' window."""
    groups: dict[str, tuple[Family, list[Frame]]] = {}
    for name in sorted(frames):
        frame = frames[name]
        labels = frozenset(k for key in frame.keys for k, _ in key.labels)
        family = catalog.classify(name, labels, frame.declared_type, frame.values)
        groups.setdefault(family.name, (family, []))[1].append(frame)
    rows = []
    for family, members in groups.values():
        values = members[0].values if len(members) == 1 else np.vstack([f.values for f in members])
        rows.append(
            FamilyRow(
                family=family,
                activity=activity.judge(family, values),
                series=int(values.shape[0]),
                samples=int(np.count_nonzero(~np.isnan(values))),
            )
        )
    rows.sort(key=lambda r: (-r.series, r.family.name))
    return CatalogReport(
        rows=tuple(rows),
        summary=summarize(r.activity for r in rows),
        samples=sum(r.samples for r in rows),
        problems=tuple(problems),
        problem_count=problem_count,
    )


def report_inputs(
    inputs: Sequence[str],
    *,
    step: float = 30.0,
    start: float | None = None,
    end: float | None = None,
    catalog: Catalog | None = None,
    http: HttpOptions | None = None,
) -> CatalogReport:
    """Read every input, align it and report on it; problems are collected, never raised."""
    problems = ProblemLog()
    catalog = catalog if catalog is not None else Catalog.default()
    # Raw values, not rates: activity asks whether anything moved, and one snapshot has no rate.
    builder = FrameBuilder(
        step, problems=problems, kind_of=lambda _name, _declared, _values: "gauge", node_labels_for=catalog.node_labels
    )
    builder.add_all(read_inputs(inputs, problems, start=start, end=end, http=http))
    frames = joined([builder.frames(span, rates=False) for span in builder.spans()])
    return build_report(
        frames,
        catalog,
        ActivityFilter.default(),
        problems.problems,
        len(problems),
    )


def _tally(t: Tally) -> dict[str, Any]:
    return {"seen": t.seen, "active": t.active, "set_aside": {str(k): v for k, v in t.set_aside.items()}}


def report_json(report: CatalogReport) -> dict[str, Any]:
    """The report as plain JSON-able data (``peerwatch catalog --json``)."""
    s = report.summary
    return {
        "families_seen": s.total.seen,
        "families_active": s.total.active,
        "set_aside": {str(k): v for k, v in s.total.set_aside.items()},
        "series": sum(r.series for r in report.rows),
        "samples": report.samples,
        "by_category": {str(k): _tally(v) for k, v in s.by_category.items()},
        "by_unit": {str(k): _tally(v) for k, v in s.by_unit.items()},
        "families": [
            {
                "name": r.family.name,
                "exporter": r.family.exporter,
                "type": r.family.mtype,
                "category": str(r.family.category),
                "unit": str(r.family.unit),
                "entity_labels": list(r.family.entity_labels),
                "bad": str(r.family.bad),
                "source": r.family.source,
                "series": r.series,
                "active": r.activity.active,
                "set_aside": None if r.activity.reason is None else str(r.activity.reason),
            }
            for r in report.rows
        ],
        "unknown": [r.family.name for r in report.unknown],
        "problems": [{"where": p.where, "message": p.message} for p in report.problems],
        "problem_count": report.problem_count,
    }


def joined(parts: Sequence[Mapping[str, Frame]]) -> dict[str, Frame]:
    """Every stretch's frames side by side, the gaps between them left out: the catalogue asks what
    the data holds, not when (snapshots taken hours apart are stretches of one step each)."""
    if len(parts) <= 1:
        return dict(parts[0]) if parts else {}
    out: dict[str, Frame] = {}
    for name in dict.fromkeys(n for p in parts for n in p):
        frames = [p[name] for p in parts if name in p]
        keys = list(dict.fromkeys(k for f in frames for k in f.keys))
        index = {k: i for i, k in enumerate(keys)}
        nodes = {k: n for f in frames for k, n in zip(f.keys, f.nodes, strict=True)}
        values = np.full((len(keys), sum(f.steps for f in frames)), np.nan)
        last = np.full(len(keys), -np.inf)
        col = 0
        for f in frames:
            rows = [index[k] for k in f.keys]
            values[rows, col : col + f.steps] = f.values
            last[rows] = np.maximum(last[rows], f.last_seen)
            col += f.steps
        out[name] = replace(
            frames[0], keys=tuple(keys), nodes=tuple(nodes[k] for k in keys), values=values, last_seen=last
        )
    return out
