"""Planning large TSDB reads: time windows, and series selectors split so no request is too big.

A high-cardinality family read in one request hits server limits (series, samples, query length),
so :func:`split_selector` cuts a selector into narrower ones by the values of one label, chosen
from the series the server listed, and recurses when one value alone still has too many series.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import orjson

# Preferred split labels when several would do equally well.
PREFERRED_SPLIT_LABELS = ("__name__", "instance", "job", "Hostname", "hostname", "node", "gpu")
# VictoriaMetrics rejects queries longer than -search.maxQueryLen (16 KiB by default).
MAX_REGEX_CHARS = 4000
_RE2_SPECIAL = frozenset("\\.+*?()|[]{}^$")


def time_windows(start_ms: int, end_ms: int, window_ms: int) -> list[tuple[int, int]]:
    """Half-open windows ``[a, b)`` covering ``[start_ms, end_ms]`` (both included), each at most ``window_ms``."""
    if window_ms <= 0:
        raise ValueError(f"window must be positive, got {window_ms} ms")
    if end_ms < start_ms:
        raise ValueError(f"end {end_ms} ms is before start {start_ms} ms")
    stop = end_ms + 1
    return [(a, min(a + window_ms, stop)) for a in range(start_ms, stop, window_ms)]


def promql_string(value: str) -> str:
    """A PromQL double-quoted string literal for ``value``."""
    return orjson.dumps(value).decode()


def regex_escape(value: str) -> str:
    """Escape RE2 metacharacters only (Python's re.escape also escapes characters RE2 rejects escaped)."""
    return "".join("\\" + c if c in _RE2_SPECIAL else c for c in value)


def with_matcher(selector: str, label: str, op: str, value: str) -> str:
    """``selector`` narrowed by one more label matcher, e.g. ``foo{a="b"}`` + ``instance="x"``."""
    sel = selector.strip()
    matcher = f"{label}{op}{promql_string(value)}"
    if not sel.endswith("}"):
        return f"{sel}{{{matcher}}}"
    # The first "{" opens the matcher list: metric names cannot hold one, label values come after it.
    head, body = sel[: sel.index("{") + 1], sel[sel.index("{") + 1 : -1].rstrip()
    if not body:
        return f"{head}{matcher}}}"
    return f"{head}{body.removesuffix(',')},{matcher}}}"


def split_selector(
    selector: str,
    series: Sequence[Mapping[str, str]],
    max_series: int,
    prefer: Sequence[str] = PREFERRED_SPLIT_LABELS,
) -> list[tuple[str, list[Mapping[str, str]]]]:
    """Selectors that together match ``series`` (as listed by the server), each at most ``max_series`` if possible.

    Returns ``(selector, its series)`` pairs. The split label is the one whose largest group fits
    ``max_series`` with the fewest distinct values (shortest regexes); failing that, the one with the
    smallest largest group, recursing into groups that are still too big. Series that no label tells
    apart are returned together, however many.
    """
    if max_series <= 0:
        raise ValueError(f"max_series must be positive, got {max_series}")
    if len(series) <= max_series:
        return [(selector, list(series))]
    label = _split_label(series, max_series, prefer)
    if label is None:
        return [(selector, list(series))]
    groups: dict[str, list[Mapping[str, str]]] = {}
    for s in series:
        groups.setdefault(s.get(label, ""), []).append(s)
    out: list[tuple[str, list[Mapping[str, str]]]] = []
    for values in _pack(groups, max_series):
        members = [s for v in values for s in groups[v]]
        if len(values) == 1:
            narrowed = with_matcher(selector, label, "=", values[0])
            out.extend(split_selector(narrowed, members, max_series, prefer))
        else:
            out.append((with_matcher(selector, label, "=~", "|".join(map(regex_escape, values))), members))
    return out


def _split_label(series: Sequence[Mapping[str, str]], max_series: int, prefer: Sequence[str]) -> str | None:
    names = sorted({k for s in series for k in s})
    best: tuple[tuple[int, int, int], str] | None = None
    for name in names:
        counts: dict[str, int] = {}
        for s in series:
            v = s.get(name, "")
            counts[v] = counts.get(v, 0) + 1
        if len(counts) < 2:
            continue
        largest = max(counts.values())
        rank = prefer.index(name) if name in prefer else len(prefer)
        # Fitting labels first, then fewest values; otherwise the smallest largest group.
        score = (0, len(counts), rank) if largest <= max_series else (1, largest, rank)
        if best is None or score < best[0]:
            best = (score, name)
    return best[1] if best else None


def _pack(groups: Mapping[str, Sequence[object]], max_series: int) -> list[list[str]]:
    """Label values packed greedily into bins of at most ``max_series`` series and bounded regex length."""
    bins: list[list[str]] = []
    current: list[str] = []
    size = chars = 0
    for value in sorted(groups):
        n = len(groups[value])
        width = len(regex_escape(value)) + 1
        if current and (size + n > max_series or chars + width > MAX_REGEX_CHARS):
            bins.append(current)
            current, size, chars = [], 0, 0
        current.append(value)
        size += n
        chars += width
    if current:
        bins.append(current)
    return bins
