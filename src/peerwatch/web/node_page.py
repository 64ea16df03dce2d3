"""The node page: standing, alarms, latest scores, and each deviating metric against its peers' band."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from peerwatch.alarms.store import StoredAlarm
from peerwatch.catalog.load import Catalog
from peerwatch.model import ScoreKey
from peerwatch.web.alarms import plot_box, plot_url
from peerwatch.web.format import clock, labels_text, number
from peerwatch.web.page import badge, esc, link, table
from peerwatch.web.standing import Standing

DEVIATING = 4.0  # a score from here on is plotted
MAX_PLOTS = 12


def evidence_component(metric: str, labels: Mapping[str, str]) -> str:
    """The component the engine scores an evidence series under (as ``detect.context`` names it), so a
    score and the evidence it produced are recognised as one plot."""
    return Catalog.default().classify(metric, frozenset(labels)).component(labels)


def render_node(
    prefix: str,
    view: Mapping[str, Any] | None,
    node: str,
    alarms: Sequence[StoredAlarm],
    scores: Mapping[ScoreKey, float],
    standing: Standing | None = None,
) -> str:
    """Everything known of ``node``; plots load lazily (each reads a family's judged frames)."""
    mine = sorted(((c, m, s) for (n, c, m), s in scores.items() if n == node), key=lambda x: -x[2])
    head = (
        f"<p>status {badge(str(view['status']))}"
        + (f" · spare {badge(str(view['spare']), 'spare')}" if view.get("spare") else "")
        + f" · lemon risk: {esc(standing.text())}"
        f" · first seen {esc(clock(view.get('first_seen')))}"
        f" · last seen {esc(clock(view.get('last_seen')))}</p>"
        if view is not None and standing is not None
        else "<p class=muted>this node has not been seen by the service</p>"
    )
    alarm_rows = [
        [
            link(f"{prefix}/alarms/{s.id}", s.id),
            esc(s.alarm.component),
            esc(s.alarm.diagnosis),
            badge(s.alarm.severity),
            esc(s.alarm.action),
            esc(clock(s.alarm.ts)),
            badge(s.status),
        ]
        for s in alarms
    ]
    alarm_table = (
        table(["alarm", "component", "diagnosis", "severity", "action", "opened", "status"], alarm_rows, "alarms")
        if alarm_rows
        else '<p class="muted">no alarm on this node</p>'
    )
    score_table = (
        table(
            ["component", "metric", "score"],
            ([esc(c), esc(m), number(s)] for c, m, s in mine),
            "scores",
        )
        if mine
        else '<p class="muted">no detector finding at the last evaluated step</p>'
    )
    # One plot per metric and component: an alarm's evidence series, else the component's mean for a
    # score; an evidence series is also scored under its component, which must not plot it again.
    plots: dict[tuple[str, str], tuple[str, str, str]] = {}  # (metric, component) -> title, detail, url
    for s in alarms:
        if not s.open:
            continue
        for e in s.alarm.evidence:
            key = (e.metric, evidence_component(e.metric, dict(e.labels)))
            if key not in plots and e.peer_median is not None:
                detail = f"{labels_text(dict(e.labels))} — evidence of {s.id}"
                plots[key] = (e.metric, detail, plot_url(node, e.metric, labels=dict(e.labels)))
    for c, m, score in mine:
        if score >= DEVIATING and (m, c) not in plots:
            plots[(m, c)] = (m, f"{c}, score {number(score)}", plot_url(node, m, component=c))
    plot_html = (
        "\n".join(
            f'<div class="evidence"><h3>{esc(t)} <small>{esc(d)}</small></h3>{plot_box(u)}</div>'
            for t, d, u in list(plots.values())[:MAX_PLOTS]
        )
        if plots
        else '<p class="muted">nothing deviates from its peers</p>'
    )
    return "\n".join(
        [
            head,
            "<h2>Alarms</h2>",
            alarm_table,
            "<h2>Against its peers</h2>",
            "<p class=\"muted\">over the service's window: the node (dark line), its peers' median (dashed) and "
            "10th–90th percentile (band)</p>",
            plot_html,
            "<h2>Latest scores</h2>",
            score_table,
        ]
    )
