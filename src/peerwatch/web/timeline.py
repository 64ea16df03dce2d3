"""The alarm timeline as inline SVG (one bar per alarm): readable without JavaScript, no fonts fetched."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from peerwatch.web.format import clock

W, PAD_R, PAD_T, PAD_B = 640, 10, 10, 22
STEPS = (60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800)  # tick spacing, s
MAX_TICKS = 10


def ticks(start: float, end: float) -> list[tuple[float, str]]:
    """Round UTC times between ``start`` and ``end``, at most ``MAX_TICKS``, labelled ``HH:MM``; the first
    and the first of each day also carry the date."""
    step = next((x for x in STEPS if (end - start) / x <= MAX_TICKS), STEPS[-1])
    out, day = [], ""
    t = (start // step + 1) * step
    while t <= end:
        date, hm = time.strftime("%Y-%m-%d", time.gmtime(t)), time.strftime("%H:%M", time.gmtime(t))
        out.append((t, f"{date} {hm}" if date != day else hm))
        day, t = date, t + step
    return out


@dataclass(frozen=True, slots=True)
class Span:
    """One alarm on the timeline."""

    label: str
    href: str
    start: float
    end: float | None  # None: still open
    severity: str
    status: str


def timeline_svg(spans: Sequence[Span], start: float, end: float, row: int = 14) -> str:
    """One bar per alarm from opening to resolution (open alarms run to ``end``), over UTC time ticks."""
    if not spans or end <= start:
        return ""
    width, left = W + 200, 180
    sx = (width - left - PAD_R) / (end - start)
    height = PAD_T + row * len(spans) + PAD_B
    width += 40  # room for the last tick's label
    out = [f'<svg class="timeline" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img">']
    for t, label in ticks(start, end):
        x = left + (t - start) * sx
        out.append(
            f'<line class="tick" x1="{x:.1f}" x2="{x:.1f}" y1="{PAD_T}" y2="{height - PAD_B + 3}"/>'
            f'<text class="tick" x="{x:.1f}" y="{height - 6}" text-anchor="middle">{escape(label)}</text>'
        )
    for i, s in enumerate(spans):  # bars over the grid
        y = PAD_T + i * row
        a = left + (max(s.start, start) - start) * sx
        b = left + (min(s.end if s.end is not None else end, end) - start) * sx
        cls = f"bar {escape(s.severity)} {escape(s.status)}"
        out.append(
            f'<a href="{escape(s.href)}"><text x="{left - 6}" y="{y + row - 4}" text-anchor="end">'
            f"{escape(s.label)}</text>"
            f'<rect class="{cls}" x="{a:.1f}" y="{y + 2}" width="{max(b - a, 2.0):.1f}" height="{row - 4}">'
            f"<title>{escape(s.label)}: {escape(clock(s.start))} – "
            f"{escape(clock(s.end) if s.end is not None else 'open')}</title></rect></a>"
        )
    out += [f'<text x="{width - PAD_R}" y="{PAD_T - 1}" text-anchor="end">time (UTC)</text>', "</svg>"]
    return "\n".join(out)
