"""One entry for every command's INPUT arguments: files, folders, TSDB URLs or exporter URLs.

A URL whose path ends in ``/metrics`` is an exporter and is scraped once; any other URL is a
Prometheus-API server (Prometheus or VictoriaMetrics) read over ``[start, end]``; anything else
is a recorded file, or a folder of them. Nothing here raises for one bad input: problems are
collected and the other inputs are still read.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from importlib import resources
from pathlib import Path
from urllib.parse import urlsplit

from peerwatch.model import ProblemLog, SeriesBlock
from peerwatch.redact import redact_url
from peerwatch.series_budget import SeriesBudget
from peerwatch.sources.replay import read_recording
from peerwatch.sources.tsdb_http import HttpOptions

ALL_SERIES = '{__name__=~".+"}'


def bundled_samples() -> list[Path]:
    """The real exporter outputs shipped with peerwatch: the embedded default input."""
    folder = resources.files("peerwatch") / "data" / "samples"
    return sorted(Path(str(p)) for p in folder.iterdir() if p.name.endswith(".prom"))


def input_kind(item: str) -> str:
    """``exporter``, ``tsdb`` or ``file`` for one INPUT argument."""
    parts = urlsplit(item)
    if parts.scheme in ("http", "https"):
        return "exporter" if parts.path.rstrip("/").endswith("/metrics") else "tsdb"
    return "file"


def read_inputs(
    inputs: Sequence[str],
    problems: ProblemLog,
    *,
    start: float | None = None,
    end: float | None = None,
    matchers: Sequence[str] = (ALL_SERIES,),
    timeout: float = 30.0,
    node: str | None = None,
    budget: SeriesBudget | None = None,
    http: HttpOptions | None = None,
) -> Iterator[SeriesBlock]:
    """Series blocks of every input in turn; TSDB reads default to the last hour and use ``http``. ``node``: the
    node of recorded series that name none (see ``read_recording``); ``budget``: its ``per_input``
    series are kept of each input, the others left out and reported."""
    for item in inputs:
        blocks = _read_one(item, problems, start, end, matchers, timeout, node, http)
        yield from blocks if budget is None else InputBudget(item, budget, problems).within(blocks)


class InputBudget:
    """The gate of one input: the blocks of its first ``budget.per_input`` series pass (``kept``,
    by hash), the others are left out (``over``) and reported once, when the input ends."""

    def __init__(self, item: str, budget: SeriesBudget, problems: ProblemLog) -> None:
        self.item, self.budget, self.problems = item, budget, problems
        self.kept: set[int] = set()
        self.over: set[int] = set()

    def within(self, blocks: Iterator[SeriesBlock]) -> Iterator[SeriesBlock]:
        kept, over, limit = self.kept, self.over, self.budget.per_input
        for block in blocks:
            h = hash(block.key)
            if h not in kept and len(kept) >= limit:
                over.add(h)
                continue
            kept.add(h)
            yield block
        if over:
            self.problems.add(self.item, self.budget.message(len(kept), len(over), "per input"))


def _read_one(
    item: str,
    problems: ProblemLog,
    start: float | None,
    end: float | None,
    matchers: Sequence[str],
    timeout: float,
    node: str | None,
    http: HttpOptions | None,
) -> Iterator[SeriesBlock]:
    kind = input_kind(item)
    if kind == "exporter":
        from peerwatch.sources.scrape import Target, scrape

        yield from scrape([Target(item)], timeout=timeout, problems=problems).blocks
    elif kind == "tsdb":
        from peerwatch.sources.tsdb import TSDBClient, TSDBError

        end = time.time() if end is None else end
        start = end - 3600.0 if start is None else start
        try:
            with TSDBClient(item, timeout=timeout, problems=problems, http=http) as client:
                yield from client.read(matchers, start, end)
        except TSDBError as exc:
            problems.add(redact_url(item), str(exc))
    else:
        yield from _read_path(Path(item), problems, node)


# Files met in a folder that are documentation or configuration, never metrics.
NOT_METRICS = (".md", ".rst", ".html", ".yaml", ".yml", ".toml", ".csv", ".py", ".sh", ".png", ".svg", ".pdf")


def _read_path(path: Path, problems: ProblemLog, node: str | None) -> Iterator[SeriesBlock]:
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
        if not files:
            problems.add(str(path), "folder holds no files")
        for file in files:
            if file.name == "labels.json":  # scenario ground truth beside a recording, not metrics
                continue
            if file.name.lower().endswith(NOT_METRICS):
                problems.add(str(file), "not metrics (a documentation or configuration file), skipped")
                continue
            yield from read_recording(file, problems, node, only_metrics=True)
    else:
        yield from read_recording(path, problems, node)
