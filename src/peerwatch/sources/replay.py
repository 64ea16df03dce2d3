"""Recorded metrics: VictoriaMetrics JSON-lines export and Prometheus text, plain or gzip.

The format is detected from content, never from the file name, and files are streamed line by
line so that a recording larger than memory can be read. Bad lines are reported with file and
line number and skipped; a truncated gzip keeps everything read before the cut.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import orjson

from peerwatch.model import FloatArray, ProblemLog, SeriesBlock, SeriesKey, labels_of

GZIP_MAGIC = b"\x1f\x8b"


def read_vm_jsonl(lines: Iterable[bytes], source: str, problems: ProblemLog) -> Iterator[SeriesBlock]:
    """Series blocks from VictoriaMetrics ``/api/v1/export`` lines (timestamps in ms)."""
    keys: dict[tuple[tuple[str, object], ...], SeriesKey] = {}  # one series comes in many lines
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = _loads(line)
            metric, values, stamps = obj["metric"], obj["values"], obj["timestamps"]
            name = metric["__name__"]
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            problems.add(f"{source}:{lineno}", f"not a VictoriaMetrics export line ({type(exc).__name__}: {exc})")
            continue
        if not isinstance(name, str) or not isinstance(values, list) or not isinstance(stamps, list):
            problems.add(f"{source}:{lineno}", "metric name, values or timestamps have the wrong type")
            continue
        if len(values) != len(stamps):
            problems.add(f"{source}:{lineno}", f"{name}: {len(values)} values but {len(stamps)} timestamps")
            continue
        try:
            raw = tuple(metric.items())
            key = keys.get(raw)
            if key is None:
                key = keys[raw] = SeriesKey(name, labels_of({str(k): str(v) for k, v in raw}))
            ts = np.array(stamps, dtype=np.float64) / 1000.0
        except (TypeError, ValueError, AttributeError):
            problems.add(f"{source}:{lineno}", f"{name}: labels or timestamps are not valid")
            continue
        yield SeriesBlock(key, ts, _floats(values, f"{source}:{lineno}", problems))


_SPECIAL_VALUE = re.compile(rb"(?<![\"\w.])([+-]?Inf|NaN)(?![\"\w])")


def _loads(line: bytes) -> Any:
    """Parse one line; VictoriaMetrics writes +Inf/-Inf/NaN bare, which is not JSON, so quote them and retry."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        head, sep, tail = line.partition(b'"values":[')
        if not sep:
            raise
        values, _, rest = tail.partition(b"]")  # the array holds only numbers: its first "]" closes it
        return orjson.loads(head + sep + _SPECIAL_VALUE.sub(rb'"\1"', values) + b"]" + rest)


def _floats(values: list[object], where: str, problems: ProblemLog) -> FloatArray:
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        pass
    # Rare slow path: VictoriaMetrics writes special values as JSON strings or null.
    out = np.empty(len(values), dtype=np.float64)
    bad = 0
    for i, v in enumerate(values):
        try:
            out[i] = float(v)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            out[i] = np.nan
            bad += 1
    if bad:
        problems.add(where, f"{bad} values are not numbers (kept as missing)")
    return out


def write_vm_jsonl(blocks: Iterable[SeriesBlock], out: BinaryIO) -> int:
    """Write blocks as VictoriaMetrics JSON lines (importable with ``/api/v1/import``); returns lines written."""
    n = 0
    for block in blocks:
        metric = {"__name__": block.key.name, **dict(block.key.labels)}
        ms = np.rint(block.timestamps * 1000.0).astype(np.int64)
        out.write(orjson.dumps({"metric": metric, "values": block.values.tolist(), "timestamps": ms.tolist()}))
        out.write(b"\n")
        n += 1
    return n


def open_recording(path: Path) -> BinaryIO:
    """Open a file for binary reading, transparently un-gzipping by magic bytes."""
    raw = path.open("rb")
    if raw.read(2) == GZIP_MAGIC:
        raw.seek(0)
        return gzip.open(raw, "rb")  # type: ignore[return-value]
    raw.seek(0)
    return raw


def _guarded_lines(stream: BinaryIO, source: str, problems: ProblemLog) -> Iterator[bytes]:
    """Lines of a stream; a truncated or corrupt gzip ends the stream with a problem, keeping what was read."""
    lineno = 0
    try:
        for line in stream:
            lineno += 1
            yield line
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        where = f"{source}:{lineno + 1}"
        problems.add(where, f"compressed stream is truncated or corrupt ({exc}); kept {lineno} lines")


def detect_format(head: bytes) -> str:
    """``vm-jsonl`` when the first non-blank byte opens a JSON object, else ``prometheus-text``."""
    stripped = head.lstrip()
    return "vm-jsonl" if stripped.startswith(b"{") else "prometheus-text"


def read_recording(path: Path, problems: ProblemLog) -> Iterator[SeriesBlock]:
    """Series blocks of one recorded file, whatever its format; problems name the file and line."""
    source = str(path)
    try:
        stream = open_recording(path)
    except OSError as exc:
        problems.add(source, f"cannot open: {exc.strerror or exc}")
        return
    with stream:
        try:
            head = stream.peek(4096) if hasattr(stream, "peek") else b""
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            problems.add(source, f"compressed stream is truncated or corrupt ({exc})")
            return
        lines = _guarded_lines(stream, source, problems)
        if detect_format(head) == "vm-jsonl":
            yield from read_vm_jsonl(lines, source, problems)
        else:
            yield from _read_text(lines, source, problems, default_ts=path.stat().st_mtime)


def _read_text(lines: Iterable[bytes], source: str, problems: ProblemLog, default_ts: float) -> Iterator[SeriesBlock]:
    from peerwatch.sources.exposition import ExpositionParser, blocks_from_samples

    parser = ExpositionParser(source, problems=problems)
    yield from blocks_from_samples(parser.parse(lines), parser.declared_type, default_ts)


def read_recordings(paths: Iterable[Path], problems: ProblemLog) -> Iterator[SeriesBlock]:
    """Blocks of several files in turn."""
    for path in paths:
        yield from read_recording(Path(path), problems)
