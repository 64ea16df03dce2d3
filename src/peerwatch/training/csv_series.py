"""CSV throughput series: ``ts,value[,expected]`` or per rank ``ts,rank,value[,expected]``.

Header optional; ``ts`` is epoch seconds (milliseconds and microseconds are recognised by size) or
ISO 8601; separators ``,`` ``;`` or tab. Header names pick the columns. Without a header, three
columns are per rank when timestamps repeat. A value column named like a time (``step_time``,
``*_ms``, ``latency``) is lower-is-better and becomes a rate (1/x). One bad row is reported with
its file and line and skipped; it never stops the rest.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from peerwatch.model import FloatArray, ProblemLog
from peerwatch.training.series import InputError, TrainingSeries, align_steps, job_median, parse_ts

RANK_NAMES = frozenset({"rank", "global_rank", "worker", "process"})
EXPECTED_NAMES = frozenset({"expected", "target", "peak", "expected_value", "nominal"})
LOWER_IS_BETTER = re.compile(r"time|_ms$|_s$|latency|elapsed|duration|seconds", re.IGNORECASE)
_SPLIT = re.compile(r"\s*[,;\t]\s*")


def _float(text: str) -> float:
    text = text.strip()
    return float("nan") if text.lower() in ("", "nan", "null", "none", "-") else float(text)


def looks_like_csv(content: Sequence[tuple[int, str]]) -> bool:
    """Most of the first rows (after an optional header) are 2-4 fields starting with a timestamp."""
    rows = [_SPLIT.split(line.strip()) for _, line in content[:21]]
    body = rows[1:] if rows and not _is_ts(rows[0][0]) else rows
    if not body:
        return False
    good = sum(1 for r in body if 2 <= len(r) <= 4 and _is_ts(r[0]))
    return good >= 0.8 * len(body)


def _is_ts(field: str) -> bool:
    try:
        parse_ts(field)
    except ValueError:
        return False
    return True


def read_csv(content: Sequence[tuple[int, str]], where: str, problems: ProblemLog) -> TrainingSeries:
    """Parse numbered CSV lines into a job-level or per-rank series."""
    header = [h.strip().lower() for h in _SPLIT.split(content[0][1].strip())]
    has_header = not _is_ts(header[0])
    rows = content[1:] if has_header else content
    width = len(header)
    parsed: list[list[float]] = []
    for lineno, line in rows:
        fields = _SPLIT.split(line.strip())
        if len(fields) != width:
            problems.add(f"{where}:{lineno}", f"expected {width} fields, got {len(fields)}")
            continue
        try:
            parsed.append([parse_ts(fields[0]), *(_float(f) for f in fields[1:])])
        except ValueError as exc:
            problems.add(f"{where}:{lineno}", f"not a number or timestamp: {exc}")
    if not parsed:
        raise InputError(f"{where}: no usable rows")
    table = np.asarray(parsed, dtype=np.float64)
    cols = _columns(header if has_header else [], width, table)
    notes: list[str] = []
    value = table[:, cols["value"]]
    name = header[cols["value"]] if has_header else "value"
    if has_header and LOWER_IS_BETTER.search(name):
        value = np.where(value > 0, 1.0 / value, np.nan)
        notes.append(f"column {name!r} is a time: converted to a rate (1/{name})")
        name = f"1/{name}"
    exp = None
    if "expected" in cols:
        e = table[:, cols["expected"]]
        exp = float(np.nanmedian(e)) if np.isfinite(e).any() else None
    if "rank" not in cols:
        return TrainingSeries(table[:, 0], value, exp, unit=name, source=f"{where} (CSV)", notes=tuple(notes))
    return _per_rank(table[:, 0], table[:, cols["rank"]], value, exp, name, where, notes, problems)


def _columns(header: list[str], width: int, table: FloatArray) -> dict[str, int]:
    if header:
        cols = {"ts": 0}
        for i, h in enumerate(header[1:], 1):
            if h in RANK_NAMES:
                cols["rank"] = i
            elif h in EXPECTED_NAMES:
                cols["expected"] = i
            elif "value" not in cols:
                cols["value"] = i
        if "value" not in cols:
            raise InputError(f"no value column in header {','.join(header)}")
        return cols
    if width == 2:
        return {"ts": 0, "value": 1}
    if width == 4:
        return {"ts": 0, "rank": 1, "value": 2, "expected": 3}
    repeated = np.unique(table[:, 0]).size < table.shape[0]
    return {"ts": 0, "rank": 1, "value": 2} if repeated else {"ts": 0, "value": 1, "expected": 2}


def _per_rank(
    ts: FloatArray,
    rank: FloatArray,
    value: FloatArray,
    exp: float | None,
    unit: str,
    where: str,
    notes: list[str],
    problems: ProblemLog,
) -> TrainingSeries:
    ok = np.isfinite(rank) & (rank >= 0) & (rank == np.round(rank))
    if not ok.all():
        problems.add(where, f"{np.count_nonzero(~ok)} row(s) without a valid integer rank skipped")
    ts, rank, value = ts[ok], rank[ok].astype(np.int64), value[ok]
    ids, row = np.unique(rank, return_inverse=True)
    grid_ts, cell = align_steps(ts, row)
    per_rank = np.full((ids.size, grid_ts.size), np.nan)
    per_rank[row, cell] = value
    job = job_median(per_rank)
    notes.append(f"{ids.size} ranks; job series is the median rank at each step")
    return TrainingSeries(
        grid_ts, job, exp, per_rank, tuple(int(i) for i in ids), unit, f"{where} (per-rank CSV)", tuple(notes)
    )
