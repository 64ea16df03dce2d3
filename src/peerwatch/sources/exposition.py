"""Prometheus text exposition (format 0.0.4, and what exporters and OpenMetrics add) into samples.

Two modes share one grammar:

- **lenient** (default), the hot path for real exporters: never raises on content. A bad line
  is skipped and recorded in the :class:`ProblemLog` as ``source:line`` with expfmt's wording,
  and parsing goes on. It also takes repeated identical HELP/TYPE lines (all-smi), CRLF and
  trailing blanks, a missing final newline, OpenMetrics types, ``# EOF``/``# UNIT``, exemplars
  (dropped), unknown escapes (kept as written, as Prometheus' own scraper does) and float
  timestamps in seconds.
- **strict** reads as prometheus/common ``expfmt.TextParser`` does and raises
  :class:`ExpositionError` with its message at the first error.

Ordinary lines (``name{a="b",c="d"} 1.5 [ms]``) take a regex fast path; everything else goes
to the careful reader in :mod:`peerwatch.sources.exposition_scan`, which decides identically.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import NamedTuple

import numpy as np

from peerwatch.model import Labels, ProblemLog, SeriesBlock, SeriesKey
from peerwatch.sources.exposition_families import HISTOGRAMS, SUMMARY, Families, Role
from peerwatch.sources.exposition_scan import read_comment, read_sample
from peerwatch.sources.exposition_text import LineError


class ParsedSample(NamedTuple):
    """One sample line."""

    name: str  # as exposed: node_cpu_seconds_total, x_bucket, ...
    labels: Labels  # sorted by name, no __name__
    value: float
    timestamp: float | None  # epoch seconds; None if the line has none


class ExpositionError(ValueError):
    """Strict mode: the first error, worded as Prometheus words it (``str`` starts with its text)."""

    def __init__(self, line: int, msg: str, source: str = "<input>") -> None:
        text = f"text format parsing error in line {line}: {msg}"
        super().__init__(text if source == "<input>" else f"{text} (in {source})")
        self.line = line
        self.msg = msg
        self.source = source


_PAIR_TEXT = r'(?!__name__=)[a-zA-Z_][a-zA-Z0-9_]*="[^"\\\n\ud800-\udfff]*"'
_LINE_HEAD = (
    r"([a-zA-Z_:][a-zA-Z0-9_:]*)"
    rf"(?:\{{((?:{_PAIR_TEXT}(?:, ?{_PAIR_TEXT})*+,?)?)\}})?"
    r" ([-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|NaN|[-+]?Inf)"
)
# The fast path: plain names, unescaped label values, one blank between fields, integer ms.
_FAST_STRICT = re.compile(_LINE_HEAD + r"(?: ([-+]?[0-9]{1,18}))?\Z")
_FAST_LENIENT = re.compile(_LINE_HEAD + r"(?: ([-+]?[0-9]{1,18}(?:\.[0-9]+)?))?[ \t\r]*\Z")
_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"')
_META = re.compile(r"[ \t]*#[ \t]*(HELP|TYPE)[ \t]+([a-zA-Z_:][a-zA-Z0-9_:]*)(?:[ \t]+(.*))?\Z")
_LABEL_CACHE_LIMIT = 200_000


class ExpositionParser:
    """Parses one exposition input; keeps its families' declared ``types`` and ``helps``."""

    def __init__(self, source: str = "<input>", *, strict: bool = False, problems: ProblemLog | None = None) -> None:
        self.source = source
        self.strict = strict
        self.problems = problems if problems is not None else ProblemLog()
        self._families = Families(lenient=not strict)
        self.types: dict[str, str] = self._families.types
        self.helps: dict[str, str] = self._families.helps
        self._fast = _FAST_STRICT if strict else _FAST_LENIENT
        self._plain: dict[str, str] = {}  # names the fast path may take -> one shared str
        self._label_cache: dict[str, Labels] = {}
        self._lineno = 0
        self._tail: str | None = None  # a last line without its newline

    def parse(self, lines: Iterable[bytes | str]) -> Iterator[ParsedSample]:
        """Samples of ``lines`` (one line per item, with or without its ``\\n``), streamed.

        A last item without ``\\n`` after items that had one (or a lone such item) is an
        unterminated last line: strict mode reports it as expfmt does, lenient mode takes it.
        Give lines as a binary file yields them: ``str.splitlines`` also splits at characters
        such as ``\\x1c`` that label values may hold.
        """
        return self._run(self._split(lines))

    def parse_text(self, text: str | bytes) -> list[ParsedSample]:
        """All samples of a whole text (bytes are UTF-8)."""
        whole = _decode(text) if isinstance(text, bytes) else text
        lines = whole.split("\n")  # only "\n" ends a line, as in expfmt
        tail = lines.pop()
        self._tail = tail or None
        return list(self._run(lines))

    def declared_type(self, sample_name: str) -> str | None:
        """The TYPE declared for a sample's family (x_bucket, x_sum, x_count, x_total, x_created -> x)."""
        return self._families.declared_type(sample_name)

    def _split(self, lines: Iterable[bytes | str]) -> Iterator[str]:
        pending: str | None = None
        stripped = False  # items come without their newlines: none of them is unterminated
        for item in lines:
            if isinstance(item, bytes):
                try:
                    text = item.decode("utf-8")
                except UnicodeDecodeError:
                    text = item.decode("utf-8", "surrogateescape")
            else:
                text = item
            if pending is not None:
                yield pending
                pending, stripped = None, True
            if text.endswith("\n"):
                text = text[:-1]
                if "\n" not in text:
                    yield text
                    continue
                yield from text.split("\n")
            elif stripped:
                yield from text.split("\n")
            else:
                *whole, pending = text.split("\n")
                yield from whole
        self._tail = pending

    def _run(self, lines: Iterable[str]) -> Iterator[ParsedSample]:
        match = self._fast.match
        meta_match = _META.match
        strict = self.strict
        plain = self._plain
        cache = self._label_cache
        new = tuple.__new__
        lineno = self._lineno
        for line in lines:
            lineno += 1
            m = match(line)
            if m is not None:
                name, body, text, stamp = m.groups()
                labels = (cache.get(body) or self._labels(body)) if body else ()
                value = float(text)
                known = plain.get(name) or self._admit(name)
                # inf from an overflowing literal (1e400) is an error: the careful path says so.
                if labels is not None and known and (value - value == 0.0 or text[-1] in "fN"):
                    seconds = None if stamp is None else (int(stamp) / 1000 if "." not in stamp else float(stamp))
                    yield new(ParsedSample, (known, labels, value, seconds))
                    continue
            elif line[:1] == "#" and (strict or line[-1:] not in " \t\r"):
                meta = meta_match(line)
                if meta is not None:
                    try:
                        self._meta(meta)
                    except LineError as exc:
                        self._lineno = lineno
                        self._report(exc)
                    continue
            self._lineno = lineno
            sample = self._careful(line, terminated=True)
            if sample is not None:
                yield sample
        self._lineno = lineno
        if self._tail is not None:
            tail, self._tail = self._tail, None
            self._lineno += 1
            sample = self._careful(tail, terminated=False)
            if sample is not None:
                yield sample

    def _labels(self, body: str) -> Labels | None:
        pairs = _PAIR.findall(body)
        if len(pairs) > 1:
            if len(dict(pairs)) < len(pairs):
                return None  # duplicate label names: the careful path reports them
            pairs.sort()
        labels: Labels = tuple(pairs)
        if len(self._label_cache) >= _LABEL_CACHE_LIMIT:  # series churn: start afresh rather than grow
            self._label_cache.clear()
        self._label_cache[body] = labels
        return labels

    def _admit(self, name: str) -> str | None:
        # A name the fast path may take: its family needs no le/quantile/negative-count checks.
        fam, role = self._families.of_sample(name)
        if role is not Role.plain or fam.mtype == SUMMARY or fam.mtype in HISTOGRAMS:
            return None
        self._plain[name] = name
        return name

    def _careful(self, line: str, terminated: bool) -> ParsedSample | None:
        lenient = not self.strict
        if lenient:
            line = line.rstrip(" \t\r")
            terminated = True
        head = line.lstrip(" \t")
        if not head:
            return None
        try:
            if head[0] == "#":
                self._comment(line, terminated)
                return None
            name, pairs, value, stamp = read_sample(line, terminated, self._families, lenient)
        except LineError as exc:
            self._report(exc)
            return None
        return ParsedSample(name, tuple(sorted(pairs)), value, stamp)

    def _report(self, exc: LineError) -> None:
        if self.strict:
            raise ExpositionError(self._lineno, exc.msg, self.source) from None
        self.problems.add(f"{self.source}:{self._lineno}", exc.msg)

    def _comment(self, line: str, terminated: bool) -> None:
        m = _META.match(line) if terminated else None
        if m is None:
            read_comment(line, terminated, self._families, not self.strict)
        else:
            self._meta(m)

    def _meta(self, m: re.Match[str]) -> None:
        # A HELP or TYPE line of a plain name on a terminated line.
        keyword, name, text = m.groups()
        if text is not None:  # expfmt knows the family only once a blank follows its name
            families = self._families
            fam = families.by_name.get(name) or families.of_comment(name)
            if text:
                families.declare(fam, keyword, text, True)


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("utf-8", "surrogateescape")  # the careful path reports the bad bytes


def parse_text(
    text: str | bytes, source: str = "<input>", *, strict: bool = False, problems: ProblemLog | None = None
) -> list[ParsedSample]:
    """All samples of an exposition text; see :class:`ExpositionParser` for the two modes."""
    return ExpositionParser(source, strict=strict, problems=problems).parse_text(text)


def blocks_from_samples(
    samples: Iterable[ParsedSample],
    declared_type: Callable[[str], str | None],
    default_timestamp: float,
    chunk: int = 200_000,
) -> Iterator[SeriesBlock]:
    """Series blocks of ``samples``: within each run of ``chunk`` samples, one block per series.

    Blocks come in order of each series' first sample and keep the samples' order; samples
    without a timestamp get ``default_timestamp``; ``mtype`` is ``declared_type(name)``.
    """
    it = iter(samples)
    while batch := list(islice(it, chunk)):
        yield from _blocks_of(batch, declared_type, default_timestamp)


def _blocks_of(
    batch: list[ParsedSample], declared_type: Callable[[str], str | None], default: float
) -> Iterator[SeriesBlock]:
    index: dict[tuple[str, Labels], int] = {}
    ids = [index.setdefault((s[0], s[1]), len(index)) for s in batch]
    values = np.fromiter((s[2] for s in batch), np.float64, len(batch))
    stamps = np.fromiter((default if s[3] is None else s[3] for s in batch), np.float64, len(batch))
    if len(index) < len(batch):  # some series have several samples: bring each series together
        order = np.argsort(np.array(ids, dtype=np.int64), kind="stable")
        values, stamps = values[order], stamps[order]
        ends = np.cumsum(np.bincount(ids, minlength=len(index))).tolist()
    else:
        ends = list(range(1, len(batch) + 1))
    mtypes: dict[str, str | None] = {}
    start = 0
    for (name, labels), end in zip(index, ends, strict=True):
        if name not in mtypes:
            mtypes[name] = declared_type(name)
        yield SeriesBlock(SeriesKey(name, labels), stamps[start:end], values[start:end], mtypes[name])
        start = end
