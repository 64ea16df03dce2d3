"""Spare recommendations: which spare to swap in for each node an alarm takes out, and how many to keep.

Nodes an open alarm wants out of service (action ``swap`` or ``drain``) are matched, most severe
first, with the available spares of lowest lemon risk (``alarms.spares``, which the remediation API
also picks from). Pool sizing comes from the fleet report
over the service's own alarm history (``act.fleet``): the 99th percentile of nodes down at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from peerwatch.act.fleet import FleetReport, fleet_report
from peerwatch.act.history import make_history
from peerwatch.alarms.spares import Swap, recommend
from peerwatch.alarms.store import StoredAlarm, fault_events
from peerwatch.web.format import clock, count
from peerwatch.web.page import badge, esc, link, table
from peerwatch.web.paths import node_url
from peerwatch.web.standing import standings

__all__ = ["Swap", "recommend", "render_spares", "sizing"]

LEMONS = 10


def sizing(alarms: Sequence[StoredAlarm], fleet: int) -> FleetReport | None:
    """The fleet report over the alarms that took nodes out; None without any."""
    events = fault_events(alarms)
    if not events:
        return None
    history = make_history(events, fleet_size=max(fleet, len({e.node for e in events})), source="peerwatch alarms")
    return fleet_report(history)


def render_spares(
    prefix: str, swaps: Sequence[Swap], views: Sequence[Mapping[str, Any]], report: FleetReport | None
) -> str:
    """Recommended swaps, the pool, the sizing advice and the nodes most likely to fail next."""
    pool = [v for v in views if v.get("spare")]
    ranks = standings(views)
    rows = [
        [
            link(node_url(f"{prefix}/nodes", s.alarm.alarm.node), s.alarm.alarm.node),
            esc(s.alarm.alarm.component),
            esc(s.alarm.alarm.diagnosis),
            badge(s.alarm.alarm.severity),
            esc(s.alarm.alarm.action),
            link(f"{prefix}/alarms/{s.alarm.id}", s.alarm.id),
            link(node_url(f"{prefix}/nodes", s.spare), s.spare) + f" ({esc(ranks[s.spare].text())})"
            if s.spare
            else '<b class="warn">no spare available</b>',
        ]
        for s in swaps
    ]
    needs = (
        table(["node", "component", "diagnosis", "severity", "action", "alarm", "swap in"], rows, "swaps")
        if rows
        else '<p class="muted">no open alarm asks for a node to be taken out</p>'
    )
    pool_table = (
        table(
            ["spare", "state", "status", "lemon risk"],
            (
                [
                    link(node_url(f"{prefix}/nodes", v["node"]), v["node"]),
                    esc(v["spare"]),
                    badge(str(v["status"])),
                    esc(ranks[str(v["node"])].text()),
                ]
                for v in pool
            ),
        )
        if pool
        else '<p class="muted">no spare pool configured (setting <code>spares</code>)</p>'
    )
    available = sum(1 for v in pool if v["spare"] == "available" and v["status"] != "alarm")
    out_now = len({s.alarm.alarm.node for s in swaps})
    need = max(out_now, report.spares_p99 if report is not None else 0)
    now = (
        f"<b>{count(out_now, 'node')}</b> an open alarm takes out of service now; "
        f"keep at least <b>{count(need, 'spare')}</b>"
        + (" (as many as are out now)" if need == out_now and out_now else "")
        + f"; {available} available now"
        + ('. <b class="warn">Too few spares.</b>' if available < need else ".")
    )
    if report is None:
        advice = f"<p>{now} No node has been taken out before: no history to size the pool from.</p>"
    else:
        advice = (
            f"<p>{now}</p><p>Over {count(report.faults, 'fault')} on {count(report.nodes_faulted, 'node')} since "
            f"{esc(clock(report.start_ts))}: at most <b>{report.spares_peak}</b> out at once, "
            f"<b>{report.spares_p99}</b> at the 99th percentile of time. 10% of the fleet "
            f"({report.rule_of_thumb[0]}) would have covered every outage "
            f"{100 * report.rule_of_thumb_coverage:.1f}% of the time.</p>"
        )
    lemons = sorted((v for v in views if ranks[str(v["node"])].incidents), key=lambda v: ranks[str(v["node"])].rank)
    lemon_table = (
        table(
            ["node", "rank by lemon risk", "incidents so far", "status"],
            (
                [
                    link(node_url(f"{prefix}/nodes", v["node"]), v["node"]),
                    f"{ranks[str(v['node'])].rank} of {len(views)} (top {ranks[str(v['node'])].top_percent}%)",
                    str(ranks[str(v["node"])].incidents),
                    badge(str(v["status"])),
                ]
                for v in lemons[:LEMONS]
            ),
        )
        if lemons
        else '<p class="muted">no node has been taken out of service yet</p>'
    )
    return "\n".join(
        [
            "<h2>Swaps to make</h2>",
            needs,
            "<h2>Spare pool</h2>",
            pool_table,
            "<h2>How many spares</h2>",
            advice,
            "<h2>Likeliest to fail next</h2>",
            '<p class="muted">ranked by lemon risk (docs/fleet.md: past incidents, recent ones weighing more); '
            "keep these out of the spare pool</p>",
            lemon_table,
        ]
    )
