"""The catalogue report over the frames the service judged in its window (what ``peerwatch catalog`` prints for files).

Building it aligns every series of the window (seconds on a large cluster), so it is built in the
background and kept for ``EVERY`` steps of data time: what a cluster exports changes slowly.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from peerwatch.catalog.activity import ActivityFilter
from peerwatch.catalog.load import Catalog
from peerwatch.catalog.report import build_report, report_json
from peerwatch.web.page import esc, table
from peerwatch.web.state import FrameWindow

EVERY = 20  # steps of data time a report is kept
EMPTY: dict[str, Any] = {"families": []}  # before the first sample


class CatalogCache:
    """The last report, rebuilt in a background thread when the data has moved ``EVERY`` steps on, so a
    page never waits for it (the first one says it is being built)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: float | None = None
        self._report: dict[str, Any] | None = None
        self._building: threading.Thread | None = None

    def report(self, history: FrameWindow, window: float) -> dict[str, Any] | None:
        """The newest report built (None before the first), starting a rebuild if it is stale."""
        end = history.newest
        if end is None:
            return EMPTY
        key = end // (EVERY * history.step)
        with self._lock:
            stale = self._report is None or key != self._key
            if stale and self._building is None:
                self._building = threading.Thread(target=self._build, args=(history, window, key), daemon=True)
                self._building.start()
            return self._report

    def wait(self, timeout: float = 60.0) -> None:
        """Until the rebuild in progress, if any, is done (tests)."""
        thread = self._building
        if thread is not None:
            thread.join(timeout)

    def _build(self, history: FrameWindow, window: float, key: float | None) -> None:
        try:
            report = build(history, window)
            with self._lock:
                self._key, self._report = key, report
        finally:
            with self._lock:
                self._building = None


def build(history: FrameWindow, window: float) -> dict[str, Any]:
    """The catalogue report (``report_json``) over the judged frames of the window (counters as rates)."""
    end = history.newest
    frames = {} if end is None else history.frames(end - window, end)
    return report_json(build_report(frames, Catalog.default(), ActivityFilter.default()))


def _tallies(title: str, tallies: Mapping[str, Any]) -> str:
    rows = (
        [esc(name), str(t["seen"]), str(t["active"]), esc(", ".join(f"{k} {v}" for k, v in t["set_aside"].items()))]
        for name, t in sorted(tallies.items(), key=lambda kv: -kv[1]["seen"])
    )
    return table([title, "families seen", "active", "set aside"], rows, "tally")


def render_catalog(report: Mapping[str, Any] | None) -> str:
    """Summary, tallies by category and comparison unit, every family, and the unknown ones."""
    if report is None:
        return (
            '<meta http-equiv="refresh" content="3">'
            '<p class="building">building the report over the judged window; this page reloads by itself</p>'
        )
    if not report["families"]:
        return '<p class="muted">nothing judged yet</p>'
    aside = ", ".join(f"{k}: {v}" for k, v in report["set_aside"].items()) or "none"
    families = table(
        ["family", "exporter", "type", "category", "comparison unit", "bad", "series", "signal", "from"],
        (
            [
                esc(f["name"]),
                esc(f["exporter"]),
                esc(f["type"]),
                esc(f["category"]),
                esc(f["unit"]),
                esc(f["bad"]),
                str(f["series"]),
                "active" if f["active"] else f'<span class="muted">set aside: {esc(f["set_aside"])}</span>',
                esc(f["source"]),
            ]
            for f in report["families"]
        ),
        "families",
    )
    unknown = ", ".join(esc(n) for n in report["unknown"]) or "none"
    return "\n".join(
        [
            f"<p><b>{report['families_seen']}</b> families seen, <b>{report['families_active']}</b> carry signal "
            f"over the window; set aside: {esc(aside)}. {report['series']} series, {report['samples']} samples.</p>",
            '<div class="columns">',
            _tallies("category", report["by_category"]),
            _tallies("comparison unit", report["by_unit"]),
            "</div>",
            f"<h2>Families the catalogue did not know</h2><p>{unknown}</p>",
            "<h2>Families</h2>",
            '<p class="muted">click a column to sort; filter by any text</p>',
            f'<div class="tall">{families}</div>',
        ]
    )
