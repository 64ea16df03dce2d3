"""The alarm pages: the list with its timeline, and one alarm with evidence, plots and acknowledgement."""

from __future__ import annotations

import shlex
import urllib.parse
from collections.abc import Mapping, Sequence

import orjson

from peerwatch.alarms.store import ActionRecord, StoredAlarm
from peerwatch.web.format import clock, count, duration, labels_text, number
from peerwatch.web.page import badge, esc, link, table
from peerwatch.web.paths import node_url
from peerwatch.web.timeline import Span, timeline_svg

DRY_RUN = "dry-run"  # remediation.mode (docs/service.md)
TIMELINE_ROWS = 200  # newest alarms drawn; the table lists them all
LEAD_IN = 1800.0  # seconds of data before an alarm that its plots show


def plot_url(
    node: str,
    metric: str,
    *,
    labels: Mapping[str, str] | None = None,
    component: str | None = None,
    start: float | None = None,
    end: float | None = None,
    mark: float | None = None,
) -> str:
    r"""The JSON of one plot (``GET /api/v1/nodes/{node}/peers``), which the pages' script draws: the
    series with ``labels`` (or the mean over ``component``) from ``start`` to ``end`` (None: the newest
    data, so a refresh extends it), with the alarm's opening ``mark``\ed."""
    query: dict[str, str] = {"metric": metric}
    if labels is not None:
        query["labels"] = orjson.dumps(dict(labels)).decode()
    if component is not None:
        query["component"] = component
    query |= {k: repr(v) for k, v in (("start", start), ("end", end), ("mark", mark)) if v is not None}
    return node_url("/api/v1/nodes", node, f"/peers?{urllib.parse.urlencode(query)}")


def plot_box(url: str) -> str:
    """Where the script draws the plot of ``url``; without JavaScript it says so."""
    return f'<div class="plot" data-src="{esc(url)}"><span class="muted">loading plot (needs JavaScript)…</span></div>'


def _mode(x: ActionRecord) -> str:
    """A remediation's mode: a dry run rendered its commands and ran nothing, which must not read as done."""
    if x.mode == DRY_RUN:
        return badge("dry-run: nothing run", "dry-run")
    if x.mode is None:
        return ""
    code = "not run" if x.exit_code is None else f"exit {x.exit_code}"
    return badge(f"executed ({code})", "ok" if x.exit_code == 0 else "failed")


def _commands(x: ActionRecord) -> str:
    if not x.argv:
        return ""
    done = "would run" if x.mode == DRY_RUN else "ran"
    return f"<br><small>{done}: <code>{esc(' ; '.join(shlex.join(a) for a in x.argv))}</code></small>"


def _status(s: StoredAlarm) -> str:
    return badge(s.status)


def render_alarm_list(prefix: str, rows: Sequence[StoredAlarm], now: float, open_only: bool) -> str:
    """The timeline of the newest alarms and a table of all of them."""
    switch = link(f"{prefix}/alarms", "all") if open_only else link(f"{prefix}/alarms?status=open", "open only")
    if not rows:
        return f"<p>no alarms{' open' if open_only else ''} · {switch}</p>"
    drawn = rows[:TIMELINE_ROWS]
    start = min(s.alarm.ts for s in drawn) - 600
    end = max([now, *(s.alarm.resolved_ts or s.alarm.updated_ts for s in drawn)])
    spans = [
        Span(
            f"{s.alarm.node} {s.alarm.component}",
            f"{prefix}/alarms/{s.id}",
            s.alarm.ts,
            s.alarm.resolved_ts,
            s.alarm.severity,
            s.status,
        )
        for s in drawn
    ]
    body = [
        f"<p>{count(len(rows), 'alarm')} · show {switch}</p>",
        f'<div class="scroll">{timeline_svg(spans, start, end)}</div>',
        table(
            ["alarm", "node", "component", "diagnosis", "severity", "action", "score", "opened", "for", "status"],
            (
                [
                    link(f"{prefix}/alarms/{s.id}", s.id),
                    link(node_url(f"{prefix}/nodes", s.alarm.node), s.alarm.node),
                    esc(s.alarm.component),
                    esc(s.alarm.diagnosis),
                    badge(s.alarm.severity),
                    esc(s.alarm.action),
                    number(s.alarm.score),
                    esc(clock(s.alarm.ts)),
                    esc(duration((s.alarm.resolved_ts or now) - s.alarm.ts)),
                    _status(s),
                ]
                for s in rows
            ),
            "alarms",
        ),
    ]
    return "\n".join(body)


def render_alarm(
    prefix: str, s: StoredAlarm, actions: Sequence[ActionRecord], can_change: bool, runbook: str | None = None
) -> str:
    """One alarm: what, where, its lifecycle, its diagnosis' runbook (when published), each evidence with
    its plot, and the acknowledge form."""
    a = s.alarm
    end = a.resolved_ts  # None while open: the plot runs to the newest data
    facts = table(
        ["node", "component", "diagnosis", "severity", "action", "score", "opened", "updated", "resolved", "status"],
        [
            [
                link(node_url(f"{prefix}/nodes", a.node), a.node),
                esc(a.component),
                esc(a.diagnosis),
                badge(a.severity),
                esc(a.action),
                number(a.score),
                esc(clock(a.ts)),
                esc(clock(a.updated_ts)),
                esc(clock(a.resolved_ts)) + (f" ({esc(s.resolved_by)})" if s.resolved_by else ""),
                f'<span id="alarm-status">{_status(s)}</span>',
            ]
        ],
        "facts",
    )
    evidence = []
    for e in a.evidence:
        plot = plot_box(plot_url(a.node, e.metric, labels=dict(e.labels), start=a.ts - LEAD_IN, end=end, mark=a.ts))
        evidence.append(
            f'<div class="evidence"><h3>{esc(e.metric)} <small>{esc(labels_text(dict(e.labels)))}</small></h3>'
            f"<p>{esc(e.note)} · value {esc(number(e.value))} · peer median {esc(number(e.peer_median))}"
            f" · robust z {esc(number(e.robust_z))}</p>{plot}</div>"
        )
    history = (
        table(
            ["when (wall)", "what", "mode", "by", "note"],
            ([esc(clock(x.wall)), esc(x.kind), _mode(x), esc(x.by), esc(x.note) + _commands(x)] for x in actions),
            "actions",
            row_classes=["dry-run" if x.mode == DRY_RUN else "" for x in actions],
        )
        if actions
        else '<p class="muted">no action taken yet</p>'
    )
    ack = ""
    if s.open:
        ack = (
            _ack_form(prefix, s)
            if can_change
            else ('<p class="muted">acknowledging is disabled: the service has no api.token</p>')
        )
    acked = f"<p>acknowledged by {esc(s.ack_by)} at {esc(clock(s.ack_wall))}: {esc(s.ack_note)}</p>" if s.ack_by else ""
    guide = f'<p id="runbook">runbook: {link(runbook, a.diagnosis)}</p>' if runbook else ""
    return "\n".join(
        [
            facts,
            guide,
            acked,
            ack,
            "<h2>Evidence</h2>",
            '<p class="muted">each plot: the node\'s series (dark line) against the median of its peers (dashed) and '
            "their 10th–90th percentile (band); the vertical line is the alarm's opening</p>",
            *evidence,
            "<h2>Actions</h2>",
            history,
        ]
    )


def _ack_form(prefix: str, s: StoredAlarm) -> str:
    # The token is typed by the user and sent only as an Authorization header; it is never stored.
    return (
        f'<form id="ack" class="ack" data-url="/api/v1/alarms/{esc(s.id)}/acknowledge" data-reload="{prefix}/alarms/'
        f'{esc(s.id)}">'
        '<label>token <input type="password" name="token" autocomplete="off" required></label> '
        '<label>by <input name="by" value="dashboard" maxlength="200"></label> '
        '<label>note <input name="note" maxlength="2000"></label> '
        f'<button type="submit">{"acknowledge again" if s.ack_by else "acknowledge"}</button> '
        '<span class="result" role="status"></span></form>'
    )
