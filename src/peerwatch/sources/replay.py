"""Recorded metrics: VictoriaMetrics JSON-lines export and Prometheus text, plain or gzip.

The format is detected from content, never from the file name, and files are streamed line by
line so that a recording larger than memory can be read. Bad lines are reported with file and
line number and skipped; a truncated gzip keeps everything read before the cut.
"""

from __future__ import annotations

import gzip
import itertools
import re
import zlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from sys import intern
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np
import orjson
import simdjson

from peerwatch.model import FloatArray, ProblemLog, SeriesBlock, SeriesKey, labels_of

if TYPE_CHECKING:
    from peerwatch.sources.exposition import ParsedSample

GZIP_MAGIC = b"\x1f\x8b"
BOM = b"\xef\xbb\xbf"  # UTF-8 byte-order mark some editors and exporters put first
HEAD_LINES = 64  # lines read ahead to decide a file's format
HEAD_VOTES = 5  # the first lines that parse as one format or the other decide it
READ_BUFFER = 1 << 20  # an export line is ~15 KB: the default 8 KB buffer made line splitting 2-5x slower


def read_vm_jsonl(
    lines: Iterable[bytes], source: str, problems: ProblemLog, first_line: int = 1
) -> Iterator[SeriesBlock]:
    """Series blocks from VictoriaMetrics ``/api/v1/export`` lines (timestamps in ms); ``first_line``:
    the number of the first line in its file, for problems."""
    keys: dict[tuple[tuple[str, object], ...], SeriesKey] = {}  # one series comes in many lines
    quoted: set[SeriesKey] = set()
    typed = _Typed()
    metric: Any
    values: Any
    stamps: Any
    for lineno, line in enumerate(lines, first_line):
        if not line.strip():
            continue
        fast = typed(line)
        try:
            if fast is not None:
                metric, values, stamps = fast
            else:
                obj = _loads(line)
                if not isinstance(obj, dict):
                    kind = (
                        "list" if isinstance(obj, list) else "string" if isinstance(obj, str) else "number or constant"
                    )
                    problems.add(
                        f"{source}:{lineno}", f"not a VictoriaMetrics export line (a JSON {kind}, not an object)"
                    )
                    continue
                metric, values, stamps = obj["metric"], obj["values"], obj["timestamps"]
            name = metric["__name__"]
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            problems.add(f"{source}:{lineno}", f"not a VictoriaMetrics export line ({type(exc).__name__}: {exc})")
            continue
        if not isinstance(name, str) or (fast is None and not (isinstance(values, list) and isinstance(stamps, list))):
            problems.add(f"{source}:{lineno}", "metric name, values or timestamps have the wrong type")
            continue
        if len(values) != len(stamps):
            problems.add(f"{source}:{lineno}", f"{name}: {len(values)} values but {len(stamps)} timestamps")
            continue
        try:
            raw = tuple(metric.items())
            key = keys.get(raw)
            if key is None:
                # Interned: series repeat their label names and values (jobs, nodes, GPUs), so keys
                # share one string each, in memory and when they cross to another process.
                labels = labels_of({intern(str(k)): intern(str(v)) for k, v in raw})
                key = keys[raw] = SeriesKey(intern(name), labels)
            ts = stamps if fast is not None else np.asarray(stamps, dtype=np.float64) / 1000.0
        except (TypeError, ValueError, AttributeError):
            problems.add(f"{source}:{lineno}", f"{name}: labels or timestamps are not valid")
            continue
        if fast is not None:
            yield SeriesBlock(key, ts, fast[1])
            continue
        if key not in quoted and _has_strings(line) and any(type(v) is str and _number(v) for v in values):
            quoted.add(key)  # once per series: a writer that quotes numbers quotes them all
            problems.add(f"{source}:{lineno}", f"{key}: numbers given as strings, read as numbers")
        yield SeriesBlock(key, ts, _floats(values, f"{source}:{lineno}", problems))


STAMPS_KEY = b',"timestamps":['  # VictoriaMetrics writes it last: {"metric":…,"values":[…],"timestamps":[…]}
STAMPS_KEPT = 2048  # distinct timestamp arrays remembered (~16 KB each); more and the memory is cleared


class _Typed:
    """Well-formed lines read by simdjson straight into typed buffers (no Python object per number:
    4x faster than orjson then numpy on 720-sample lines). A scrape target's series share their
    timestamps, so each timestamp array is parsed once and found again by its text (a third less
    parsing on a 63-node export)."""

    def __init__(self) -> None:
        self.parser = simdjson.Parser()
        self.stamps: dict[bytes, FloatArray] = {}

    def __call__(self, line: bytes) -> tuple[dict[str, Any], FloatArray, FloatArray] | None:
        """A line's labels, values and timestamps (seconds, read-only: the lines that wrote the same
        share one array); None where the careful path must look: bare NaN/Inf, numbers as strings,
        nulls, keys in another order, a malformed line."""
        at = line.rfind(STAMPS_KEY)
        end = line.rfind(b"]}")
        if at < 0 or end < at or line[end + 2 :].strip():
            return self._whole(line)
        text = line[at + len(STAMPS_KEY) : end]
        stamps = self.stamps.get(text)
        if stamps is None:
            ms = self._array(b"[" + text + b"]", "i", np.int64)
            if ms is None:
                return self._whole(line)
            stamps = _seconds(ms)
            if len(self.stamps) >= STAMPS_KEPT:
                self.stamps.clear()
            self.stamps[text] = stamps
        try:
            doc: Any = self.parser.parse(line[:at] + b"}")
            metric = doc["metric"].as_dict()
            values = np.frombuffer(doc["values"].as_buffer(of_type="d"), dtype=np.float64)
        except (ValueError, TypeError, KeyError, RuntimeError, AttributeError, IndexError):
            return None
        finally:
            doc = None  # the parser cannot parse again while parts of its document live
        return metric, values, stamps

    def _array(self, text: bytes, of_type: str, dtype: type[np.generic]) -> np.ndarray | None:
        try:
            doc: Any = self.parser.parse(text)
            return np.frombuffer(doc.as_buffer(of_type=of_type), dtype=dtype)
        except (ValueError, TypeError, RuntimeError, AttributeError):
            return None
        finally:
            doc = None

    def _whole(self, line: bytes) -> tuple[dict[str, Any], FloatArray, FloatArray] | None:
        try:
            doc: Any = self.parser.parse(line)
            metric = doc["metric"].as_dict()
            values = np.frombuffer(doc["values"].as_buffer(of_type="d"), dtype=np.float64)
            stamps = _seconds(np.frombuffer(doc["timestamps"].as_buffer(of_type="i"), dtype=np.int64))
        except (ValueError, TypeError, KeyError, RuntimeError, AttributeError, IndexError):
            return None
        finally:
            doc = None
        return metric, values, stamps


def _seconds(ms: np.ndarray) -> FloatArray:
    out: FloatArray = ms / 1000.0
    out.flags.writeable = False  # shared by many blocks
    return out


_SPECIAL = frozenset({"NaN", "+Inf", "-Inf", "Inf"})  # VictoriaMetrics quotes these itself


def _has_strings(line: bytes) -> bool:
    """Whether the line's values array holds a string at all (a byte search, cheaper than a look at each value)."""
    at = line.find(b'"values":[')
    return at >= 0 and b'"' in line[at + 10 : line.find(b"]", at)]


def _number(text: str) -> bool:
    """A number written as a string (VictoriaMetrics' own quoted NaN and Inf do not count)."""
    if text in _SPECIAL:
        return False
    try:
        float(text)
    except ValueError:
        return False
    return True


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
    raw = path.open("rb", buffering=READ_BUFFER)
    if raw.read(2) == GZIP_MAGIC:
        raw.seek(0)
        return gzip.open(raw, "rb")  # type: ignore[return-value]
    raw.seek(0)
    return raw


class _Lines:
    """Lines of a stream, a UTF-8 byte-order mark stripped; a truncated or corrupt gzip ends them with
    a problem and sets ``truncated``, keeping everything read before the cut. With ``size``, the
    lines that start in the next ``size`` bytes (a part of a file: ``line_cuts``)."""

    def __init__(self, stream: BinaryIO, source: str, problems: ProblemLog, size: int | None = None) -> None:
        self.stream, self.source, self.problems = stream, source, problems
        self.truncated = False
        self.size = size

    def __iter__(self) -> Iterator[bytes]:
        if self.size is not None:
            yield from self._part(self.size)
            return
        lineno = 0
        try:
            for line in self.stream:
                lineno += 1
                yield line[len(BOM) :] if lineno == 1 and line.startswith(BOM) else line
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            self.truncated = True
            where = f"{self.source}:{lineno + 1}"
            self.problems.add(where, f"compressed stream is truncated or corrupt ({exc}); kept {lineno} lines")

    def _part(self, size: int) -> Iterator[bytes]:
        read = 0
        for line in self.stream:
            yield line[len(BOM) :] if read == 0 and self.stream.tell() == len(line) and line.startswith(BOM) else line
            read += len(line)
            if read >= size:
                return


def line_cuts(path: Path, shares: Sequence[float]) -> list[int]:
    """Byte offsets cutting a plain file into runs of whole lines of about these shares of its size:
    ``[0, ..., size]``, each run from one offset to the next (fewer where runs would be empty)."""
    size = path.stat().st_size
    ends = np.cumsum(shares) / sum(shares) * size
    cuts = [0]
    with path.open("rb") as f:
        for end in ends[:-1].tolist():
            f.seek(max(int(end), cuts[-1]))
            f.readline()  # on to the next line's start
            if cuts[-1] < f.tell() < size:
                cuts.append(f.tell())
    return [*cuts, size]


def lines_before(path: Path, offset: int) -> int:
    """How many lines end before byte ``offset`` of a plain file."""
    n = 0
    with path.open("rb", buffering=0) as f:
        while offset > 0 and (block := f.read(min(offset, READ_BUFFER << 4))):
            n += block.count(b"\n")
            offset -= len(block)
    return n


# A HELP/TYPE/UNIT line, or a sample: name, optional labels, a number, an optional timestamp.
_TEXT_LINE = re.compile(
    rb"# (HELP|TYPE|UNIT) |[A-Za-z_:][A-Za-z0-9_:]*\s*(\{.*\})?\s+[-+]?([0-9.]|Inf|NaN)[^ ]*(\s+-?[0-9]+)?\s*$"
)


def line_format(line: bytes) -> str | None:
    """``vm-jsonl`` or ``prometheus-text`` if the line parses as one, else None (blank or bad)."""
    text = line.removeprefix(BOM).strip()
    if text.startswith(b"{"):
        try:
            obj = _loads(text)
        except (orjson.JSONDecodeError, ValueError):
            return None
        return "vm-jsonl" if isinstance(obj, dict) and isinstance(obj.get("metric"), dict) else None
    return "prometheus-text" if _TEXT_LINE.match(text) else None


def detect_format(head: bytes) -> str:
    """The format most of the first lines that parse have, so one bad line cannot decide it; when
    none parses, ``vm-jsonl`` if the first non-blank byte opens a JSON object, else ``prometheus-text``."""
    votes = [f for f in map(line_format, head.split(b"\n")[:HEAD_LINES]) if f][:HEAD_VOTES]
    if votes:
        return max(dict.fromkeys(votes), key=votes.count)  # a tie goes to the first line's format
    return "vm-jsonl" if head.removeprefix(BOM).lstrip().startswith(b"{") else "prometheus-text"


def read_recording(
    path: Path,
    problems: ProblemLog,
    node: str | None = None,
    *,
    only_metrics: bool = False,
    part: tuple[int, int] | None = None,
) -> Iterator[SeriesBlock]:
    """Series blocks of one recorded file, whatever its format; problems name the file and line.

    Series of a Prometheus text file without an ``instance``, ``hostname`` or ``Hostname`` label
    (one target's scrape saved as is) get ``instance`` = ``node``, else the file's name
    (``gpu07.prom`` -> ``gpu07``); with ``node``, so do a JSON-lines export's. ``only_metrics``
    (a file met in a folder): a file none of whose first lines parses is skipped with one note.
    A truncated gzip keeps what was read before the cut, less the series the cut went through:
    its unread tail would read as the series stopping. ``part``: only the lines that start in this
    byte range of a plain JSON-lines export (``line_cuts``), numbered as in the whole file.
    """
    source = str(path)
    try:
        stream = open_recording(path)
    except OSError as exc:
        problems.add(source, f"cannot open: {exc.strerror or exc}")
        return
    with stream:
        first_line = 1
        if part is not None:
            stream.seek(part[0])
            first_line += lines_before(path, part[0])
        lines = _Lines(stream, source, problems, None if part is None else part[1] - part[0])
        it = iter(lines)
        head = list(itertools.islice(it, HEAD_LINES))
        rest = itertools.chain(head, it)
        if only_metrics and not any(map(line_format, head)):
            problems.add(source, f"not metrics (none of its first {len(head)} lines parses), skipped")
            return
        last: list[SeriesKey] = []  # the series of the last sample read (text: where a cut falls)
        # A part is of a file already judged an export: its own lines must not decide otherwise.
        if part is not None or detect_format(b"".join(head)) == "vm-jsonl":
            blocks = read_vm_jsonl(rest, source, problems, first_line)
        else:
            blocks = _read_text(rest, source, problems, path.stat().st_mtime, last)
            node = node or file_node(path)
        if isinstance(stream, gzip.GzipFile):  # only a gzip tells that it was cut (a plain file just ends)
            blocks = _less_cut_family(blocks, lines, last, problems)
        yield from blocks if node is None else _with_node(blocks, node)


def file_node(path: Path) -> str:
    """The node a file's name gives: its name without suffixes (``gpu07.prom.gz`` -> ``gpu07``)."""
    return path.name.split(".", 1)[0] or path.name


_NODE_LABELS = ("instance", "hostname", "Hostname")


def _with_node(blocks: Iterable[SeriesBlock], node: str) -> Iterator[SeriesBlock]:
    """Blocks, those of series that name no node labelled ``instance=node``."""
    for block in blocks:
        labels = dict(block.key.labels)
        if any(labels.get(n) for n in _NODE_LABELS):
            yield block
        else:
            key = SeriesKey(block.key.name, labels_of({**labels, "instance": node}))
            yield SeriesBlock(key, block.timestamps, block.values, block.mtype)


def _less_cut_family(
    blocks: Iterable[SeriesBlock], lines: _Lines, last: list[SeriesKey], problems: ProblemLog
) -> Iterator[SeriesBlock]:
    """``blocks`` less, after a truncation, the family it cut part way (the last sample's: ``last``,
    text; else the last block's): some nodes' series of it were read, the others' never were, and
    the cut one stops early. Each run of blocks of one metric is held until another metric comes."""
    held: list[SeriesBlock] = []
    for block in blocks:
        if held and block.key.name != held[-1].key.name:
            yield from held
            held = []
        held.append(block)
    name = last[0].name if last else held[-1].key.name if held else None
    kept = [b for b in held if not (lines.truncated and b.key.name == name)]
    yield from kept
    if len(kept) < len(held):
        problems.add(
            lines.source,
            f"{name}: {len(held) - len(kept)} series read before the truncation set aside "
            "(the cut went through this metric; its unread part is not an outage)",
        )


def _read_text(
    lines: Iterable[bytes], source: str, problems: ProblemLog, default_ts: float, last: list[SeriesKey]
) -> Iterator[SeriesBlock]:
    from peerwatch.sources.exposition import ExpositionParser, blocks_from_samples

    parser = ExpositionParser(source, problems=problems)
    samples = parser.parse(lines)
    yield from blocks_from_samples(_tracked(samples, last), parser.declared_type, default_ts)


def _tracked(samples: Iterable[ParsedSample], last: list[SeriesKey]) -> Iterator[ParsedSample]:
    """``samples``, keeping the series of the one last read in ``last``."""
    sample = None
    for sample in samples:
        yield sample
    if sample is not None:
        last.append(SeriesKey(sample[0], sample[1]))


def read_recordings(paths: Iterable[Path], problems: ProblemLog, node: str | None = None) -> Iterator[SeriesBlock]:
    """Blocks of several files in turn."""
    for path in paths:
        yield from read_recording(Path(path), problems, node)
