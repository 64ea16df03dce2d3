"""The alarm timeline as inline SVG (one bar per alarm): readable without JavaScript, no fonts fetched."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from peerwatch.web.format import clock

W, PAD_R, PAD_T, PAD_B = 640, 10, 10, 22


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
    """One bar per alarm from opening to resolution (open alarms run to ``end``)."""
    if not spans or end <= start:
        return ""
    width, left = W + 200, 180
    sx = (width - left - PAD_R) / (end - start)
    height = PAD_T + row * len(spans) + PAD_B
    out = [f'<svg class="timeline" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img">']
    for i, s in enumerate(spans):
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
    out += [
        f'<text x="{left}" y="{height - 6}">{escape(clock(start))}</text>',
        f'<text x="{width - PAD_R}" y="{height - 6}" text-anchor="end">{escape(clock(end))}</text>',
        "</svg>",
    ]
    return "\n".join(out)
