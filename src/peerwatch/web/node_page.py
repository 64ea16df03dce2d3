"""The node page: standing, alarms, latest scores, and each deviating metric against its peers' band."""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from peerwatch.service.evaluation import ScoreKey
from peerwatch.service.store import StoredAlarm
from peerwatch.web.alarms import plot_url
from peerwatch.web.format import clock, labels_text, number
from peerwatch.web.page import badge, esc, link, table
from peerwatch.web.paths import node_url

DEVIATING = 4.0  # a score from here on is plotted
MAX_PLOTS = 12


def component_plot_url(prefix: str, node: str, metric: str, component: str) -> str:
    query = urllib.parse.urlencode({"metric": metric, "component": component})
    return node_url(f"{prefix}/nodes", node, f"/plot?{query}")


def render_node(
    prefix: str,
    view: Mapping[str, Any] | None,
    node: str,
    alarms: Sequence[StoredAlarm],
    scores: Mapping[ScoreKey, float],
) -> str:
    """Everything known of ``node``; plots load lazily (each reads a family's judged frames)."""
    mine = sorted(((c, m, s) for (n, c, m), s in scores.items() if n == node), key=lambda x: -x[2])
    head = (
        f"<p>status {badge(str(view['status']))}"
        + (f" · spare {badge(str(view['spare']), 'spare')}" if view.get("spare") else "")
        + f" · lemon risk {float(view['risk']):.2f}× · first seen {esc(clock(view.get('first_seen')))}"
        f" · last seen {esc(clock(view.get('last_seen')))}</p>"
        if view is not None
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
    plots: list[tuple[str, str, str]] = []  # title, detail, url
    seen: set[tuple[str, str]] = set()
    for s in alarms:
        if not s.open:
            continue
        for e in s.alarm.evidence:
            key = (e.metric, repr(e.labels))
            if key not in seen and e.peer_median is not None:
                seen.add(key)
                plots.append(
                    (e.metric, f"{labels_text(dict(e.labels))} — evidence of {s.id}", plot_url(prefix, node, e))
                )
    for c, m, score in mine:
        if score >= DEVIATING and (m, c) not in seen:
            seen.add((m, c))
            plots.append((m, f"{c}, score {number(score)}", component_plot_url(prefix, node, m, c)))
    plot_html = (
        "\n".join(
            f'<div class="evidence"><h3>{esc(t)} <small>{esc(d)}</small></h3>'
            f'<div class="plot" data-src="{esc(u)}"><span class="muted">loading plot…</span></div></div>'
            for t, d, u in plots[:MAX_PLOTS]
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
