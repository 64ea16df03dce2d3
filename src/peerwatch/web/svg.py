"""Inline SVG: a node's series against its peers' band, and the alarm timeline. No scripts, no fonts fetched."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

import numpy as np

from peerwatch.model import FloatArray
from peerwatch.web.format import clock, number
from peerwatch.web.peers import PeerBand

W, H, PAD_L, PAD_R, PAD_T, PAD_B = 640, 170, 64, 10, 10, 22


def _segments(x: FloatArray, y: FloatArray) -> list[list[tuple[float, float]]]:
    """Runs of consecutive finite points (a gap in the data is a gap in the line)."""
    out: list[list[tuple[float, float]]] = []
    run: list[tuple[float, float]] = []
    for a, b in zip(x.tolist(), y.tolist(), strict=True):
        if math.isnan(b):
            if run:
                out.append(run)
            run = []
        else:
            run.append((a, b))
    if run:
        out.append(run)
    return out


def _line(x: FloatArray, y: FloatArray) -> str:
    return " ".join("M" + " L".join(f"{a:.1f},{b:.1f}" for a, b in seg) for seg in _segments(x, y) if seg)


def _area(x: FloatArray, lo: FloatArray, hi: FloatArray) -> str:
    """Closed polygons over each run of steps where the band is known."""
    ok = np.r_[False, ~(np.isnan(lo) | np.isnan(hi)), False].astype(np.int8)
    edges = np.flatnonzero(np.diff(ok))
    parts = []
    for a, b in zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True):
        top = " L".join(f"{x[i]:.1f},{hi[i]:.1f}" for i in range(a, b))
        bottom = " L".join(f"{x[i]:.1f},{lo[i]:.1f}" for i in range(b - 1, a - 1, -1))
        parts.append(f"M{top} L{bottom} Z")
    return " ".join(parts)


def band_svg(band: PeerBand, marks: Sequence[tuple[float, str]] = (), title: str = "") -> str:
    """The node's series (``path.value``) over the peers' median (``path.median``) and 10–90 % band."""
    t = band.timestamps
    stacked = np.concatenate([band.value, band.low, band.high, band.median])
    finite = stacked[np.isfinite(stacked)]
    if not finite.size or len(t) < 2:
        return '<p class="muted">no samples of this series in the window</p>'
    y0, y1 = float(finite.min()), float(finite.max())
    if y1 - y0 < 1e-12 * max(1.0, abs(y1)):
        y0, y1 = y0 - 1.0, y1 + 1.0
    t0, t1 = float(t[0]), float(t[-1])
    sx = (W - PAD_L - PAD_R) / (t1 - t0)
    sy = (H - PAD_T - PAD_B) / (y1 - y0)
    x = PAD_L + (t - t0) * sx

    def y(v: FloatArray) -> FloatArray:
        return PAD_T + (y1 - v) * sy

    lines = [
        f'<svg class="band-plot" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
        f'aria-label="{escape(title or band.metric)}">',
        f"<title>{escape(title or band.metric)}: {escape(band.node)} against {band.peers} peers</title>",
        f'<rect class="frame" x="{PAD_L}" y="{PAD_T}" width="{W - PAD_L - PAD_R}" height="{H - PAD_T - PAD_B}"/>',
        f'<path class="band" d="{_area(x, y(band.low), y(band.high))}"/>',
        f'<path class="median" d="{_line(x, y(band.median))}"/>',
        f'<path class="value" d="{_line(x, y(band.value))}"/>',
    ]
    for ts, label in marks:
        if t0 <= ts <= t1:
            mx = PAD_L + (ts - t0) * sx
            lines.append(
                f'<line class="mark" x1="{mx:.1f}" x2="{mx:.1f}" y1="{PAD_T}" y2="{H - PAD_B}">'
                f"<title>{escape(label)}</title></line>"
            )
    lines += [
        f'<text x="{PAD_L - 4}" y="{PAD_T + 9}" text-anchor="end">{escape(number(y1))}</text>',
        f'<text x="{PAD_L - 4}" y="{H - PAD_B}" text-anchor="end">{escape(number(y0))}</text>',
        f'<text x="{PAD_L}" y="{H - 6}">{escape(clock(t0))}</text>',
        f'<text x="{W - PAD_R}" y="{H - 6}" text-anchor="end">{escape(clock(t1))}</text>',
        "</svg>",
    ]
    return "\n".join(lines)


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
