"""Decoding TSDB answers into SeriesBlocks: Prometheus API JSON and VictoriaMetrics CSV export.

Timestamps are taken to the millisecond (the resolution both servers store) and returned as epoch
seconds; values keep every bit the server sent ("NaN", "+Inf" strings included).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from peerwatch.model import FloatArray, ProblemLog, SeriesBlock, SeriesKey, labels_of

# Fields of VictoriaMetrics' CSV export: quoted ones are JSON strings (its template writes them with %q).
_CSV_FIELD = re.compile(rb'"(?:[^"\\]|\\.)*"|[^,]*')
IntArray = npt.NDArray[np.int64]


def seconds_to_ms(stamps: Sequence[float]) -> IntArray:
    """Epoch seconds (as JSON numbers like 1700000000.123) to integer milliseconds."""
    return np.rint(np.asarray(stamps, dtype=np.float64) * 1000.0).astype(np.int64)


def block_of(
    metric: Mapping[str, str], ts_ms: IntArray, values: FloatArray, window: tuple[int, int] | None = None
) -> SeriesBlock:
    """A block from server labels, ms timestamps and values, keeping only samples inside ``window`` if given."""
    if window is not None:
        keep = (ts_ms >= window[0]) & (ts_ms < window[1])
        if not keep.all():
            ts_ms, values = ts_ms[keep], values[keep]
    key = SeriesKey(str(metric.get("__name__", "")), labels_of(metric))
    return SeriesBlock(key, ts_ms / 1000.0, values)


def prom_blocks(
    data: Any, where: str, problems: ProblemLog, window: tuple[int, int] | None = None
) -> list[SeriesBlock]:
    """Blocks of a Prometheus API ``data`` object (vector, matrix or scalar); other results are problems."""
    if not isinstance(data, dict) or "resultType" not in data:
        problems.add(where, "answer has no resultType")
        return []
    rtype, result = data["resultType"], data.get("result")
    if rtype == "scalar" and isinstance(result, list):
        return [block_of({}, seconds_to_ms([result[0]]), np.array([float(result[1])]), window)]
    if rtype not in ("vector", "matrix") or not isinstance(result, list):
        problems.add(where, f"cannot use a {rtype} result")
        return []
    blocks: list[SeriesBlock] = []
    for item in result:
        metric = item.get("metric", {})
        pairs = item.get("values") if rtype == "matrix" else [item["value"]] if "value" in item else None
        if pairs is None:  # native histograms only
            problems.add(f"{where} {metric}", "series has no float samples (native histogram?); skipped")
            continue
        try:
            stamps = [p[0] for p in pairs]
            values = np.array([float(p[1]) for p in pairs], dtype=np.float64)
        except (TypeError, ValueError, IndexError) as exc:
            problems.add(f"{where} {metric}", f"bad sample in answer: {exc}")
            continue
        block = block_of(metric, seconds_to_ms(stamps), values, window)
        if len(block) or window is None:
            blocks.append(block)
    return blocks


def csv_format(label_names: Iterable[str]) -> tuple[str, list[str]]:
    """VictoriaMetrics ``format=`` argument (timestamp, value, then labels) and the label columns, in order."""
    labels = sorted(set(label_names) - {"__name__"})
    columns = ["__name__", *labels]
    return ",".join(["__timestamp__:unix_ms", "__value__", *columns]), columns


def vm_csv_blocks(
    body: bytes, columns: Sequence[str], where: str, problems: ProblemLog, window: tuple[int, int] | None = None
) -> Iterator[SeriesBlock]:
    """Blocks from a VictoriaMetrics ``/api/v1/export/csv`` answer written with :func:`csv_format`.

    Rows are grouped by their label text (the bytes after the second comma), so labels are parsed
    once per series and the numbers are converted by numpy in bulk.
    """
    stamps: dict[bytes, list[bytes]] = {}
    values: dict[bytes, list[bytes]] = {}
    bad = 0
    for line in body.split(b"\n"):
        parts = line.split(b",", 2)
        if len(parts) != 3:
            bad += bool(line.strip())
            continue
        ts, value, rest = parts
        group = stamps.get(rest)
        if group is None:
            stamps[rest] = [ts]
            values[rest] = [value]
        else:
            group.append(ts)
            values[rest].append(value)
    if bad:
        problems.add(where, f"{bad} lines are not CSV rows of timestamp,value,labels; skipped")
    for rest, ts_list in stamps.items():
        try:
            metric = _csv_labels(rest, columns)
            ts_ms = np.array(ts_list, dtype=np.bytes_).astype(np.int64)
            vals = np.array(values[rest], dtype=np.bytes_).astype(np.float64)
        except ValueError as exc:
            problems.add(f"{where} {rest[:200]!r}", f"bad CSV row: {exc}")
            continue
        if len(ts_ms) > 1 and np.any(np.diff(ts_ms) < 0):  # rows of a series may come in several runs
            order = np.argsort(ts_ms, kind="stable")
            ts_ms, vals = ts_ms[order], vals[order]
        block = block_of(metric, ts_ms, vals, window)
        if len(block):
            yield block


def _csv_labels(rest: bytes, columns: Sequence[str]) -> dict[str, str]:
    fields: list[str] = []
    pos = 0
    while pos <= len(rest):
        m = _CSV_FIELD.match(rest, pos)
        raw = m.group(0) if m else b""
        fields.append(orjson.loads(raw) if raw.startswith(b'"') else raw.decode())
        pos += len(raw) + 1
    if len(fields) != len(columns):
        raise ValueError(f"{len(fields)} label fields for {len(columns)} columns")
    return {name: value for name, value in zip(columns, fields, strict=True) if value}


def merge_blocks(blocks: Iterable[SeriesBlock]) -> list[SeriesBlock]:
    """Blocks with one block per series: pieces of the same series joined in time order."""
    by_key: dict[SeriesKey, list[SeriesBlock]] = {}
    for block in blocks:
        by_key.setdefault(block.key, []).append(block)
    out: list[SeriesBlock] = []
    for key, parts in by_key.items():
        if len(parts) == 1:
            out.append(parts[0])
            continue
        ts = np.concatenate([p.timestamps for p in parts])
        vals = np.concatenate([p.values for p in parts])
        order = np.argsort(ts, kind="stable")
        out.append(SeriesBlock(key, ts[order], vals[order], parts[0].mtype))
    return out
