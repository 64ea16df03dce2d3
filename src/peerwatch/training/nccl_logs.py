"""Reading a job's logs and giving each event the global rank and host that logged it.

The input is one or more files or folders: one file per host or per rank, any names, optionally in
subfolders, gzip or plain, a single pasted excerpt, flight-recorder dumps and their analysis, RAS
output. Wrapped messages are re-joined first (:mod:`nccl_wrap`). Who logged a line is taken, in
this order, from the line's own ``[rankN]:`` prefix (or mpirun's ``[1,N]<stdout>:``), its torchrun
local rank mapped to a global rank (learned in the same file from lines that carry both, from
``global rank:`` init lines, from NCCL communicator init lines and from torchelastic's failure
summary), its default-group tag ``[PG 0 Rank N]`` / ``[Rank N]``, the file name (``rank3.log``),
or the single rank the file speaks for.
"""

from __future__ import annotations

import gzip
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from peerwatch.model import ProblemLog
from peerwatch.training.flight import DumpError, FlightDump, is_dump, read_dump
from peerwatch.training.nccl_lines import LineEvent, parse_line
from peerwatch.training.nccl_prefix import split_prefix
from peerwatch.training.nccl_reports import NamedReport, ras_world, read_reports
from peerwatch.training.nccl_wrap import rejoin

_NCCL_HOST = re.compile(r"^\s*([A-Za-z0-9][\w.-]*):\d+:\d+ \[\d+\]")
_HOSTY = re.compile(r"^[A-Za-z][A-Za-z0-9.-]*$")  # no "_": host names have none, paste names often do
_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])(?:rank|r)[_-]?(\d+)(?=$|[^0-9])", re.IGNORECASE)
_NOT_HOST = frozenset(
    {
        "log",
        "logs",
        "out",
        "err",
        "stdout",
        "stderr",
        "train",
        "training",
        "job",
        "output",
        "nccl",
        "torch",
        "slurm",
        "worker",
        "trace",
        "debug",
        "console",
    }
)
_SUFFIXES = (".gz", ".log", ".out", ".err", ".txt", ".json", ".pkl", ".pickle")


class LogDirError(ValueError):
    """An input path is missing, or no file was given."""


@dataclass
class RankLog:
    """Everything attributed to one global rank."""

    rank: int
    hosts: Counter[str] = field(default_factory=Counter)
    files: set[str] = field(default_factory=set)
    lines: int = 0  # lines of any kind attributed to it: "present" even without NCCL events
    events: list[LineEvent] = field(default_factory=list)

    @property
    def host(self) -> str | None:
        return self.hosts.most_common(1)[0][0] if self.hosts else None


@dataclass
class JobLogs:
    """The whole directory, by rank."""

    ranks: dict[int, RankLog] = field(default_factory=dict)
    unattributed: list[tuple[str, LineEvent]] = field(default_factory=list)
    world: Counter[str] = field(default_factory=Counter)  # "size|source" votes
    reports: list[NamedReport] = field(default_factory=list)  # desync, flight-recorder analysis, RAS
    members: dict[str, set[int]] = field(default_factory=dict)  # process group -> ranks that joined it
    files: int = 0
    rank_named_files: int = 0

    def rank(self, r: int) -> RankLog:
        return self.ranks.setdefault(r, RankLog(r))


def names_from_path(path: Path, root: Path) -> tuple[int | None, str | None]:
    """Rank and host a file name (or its folder) suggests: ``gpu068-rank3.log`` -> (3, 'gpu068')."""
    stem = path.name
    while stem.lower().endswith(_SUFFIXES):
        stem = stem[: stem.rfind(".")]
    m = _RANK_IN_NAME.search(stem)
    rank = int(m.group(1)) if m else None
    rest = (stem[: m.start() + (1 if m.start() else 0)] + stem[m.end() :]) if m else stem
    tokens = [t for t in re.split(r"[-_.]+", rest) if t]
    hosty = [t for t in tokens if t.lower() not in _NOT_HOST and not t.isdigit()]
    host = rest.strip("-_.") if hosty else None
    if host is not None and not (_HOSTY.match(host) and re.search(r"[\d-]", host)):
        host = None  # "first.log" or "basicsr_737.log" name a paste, not a host
    if host is None and path.parent != root:
        host = path.parent.name
    return rank, host


def _files(paths: list[Path]) -> list[tuple[Path, Path]]:
    """(file, the folder its name is read against) for every file given or found under a folder given."""
    out: list[tuple[Path, Path]] = []
    for root in paths:
        if root.is_file():
            out.append((root, root.parent))
        elif root.is_dir():
            found = sorted(
                p
                for p in root.rglob("*")
                if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
            )
            out += [(p, root) for p in found]
        else:
            raise LogDirError(f"{root}: no such file or directory")
    if not out:
        raise LogDirError(f"{', '.join(map(str, paths))}: no files")
    return out


def read_logdir(root: Path, problems: ProblemLog) -> JobLogs:
    """Read every file under ``root`` (kept for callers that pass one folder)."""
    return read_logs([root], problems)


def read_logs(paths: list[Path], problems: ProblemLog) -> JobLogs:
    """Read every file given or under a folder given; a file that cannot be read is a problem, not a stop."""
    job = JobLogs()
    for path, root in _files(paths):
        try:
            data = path.read_bytes()
            if data[:2] == b"\x1f\x8b":
                data = gzip.decompress(data)
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            problems.add(str(path), f"cannot read: {exc}")
            continue
        job.files += 1
        file_rank, file_host = names_from_path(path, root)
        job.rank_named_files += file_rank is not None
        if is_dump(data[:4096]):
            try:
                _add_dump(job, read_dump(path, data), file_host)
            except DumpError as exc:
                problems.add(str(path), str(exc))
            continue
        _add_text(job, str(path), data.decode("utf-8", errors="replace").splitlines(), file_rank, file_host)
    return job


def _add_dump(job: JobLogs, dump: FlightDump, file_host: str | None) -> None:
    if dump.rank is None:
        job.unattributed.extend(("flight recorder", e) for e in dump.events)
        return
    log = job.rank(dump.rank)
    log.events.extend(dump.events)
    log.lines += 1
    if dump.host or file_host:
        log.hosts[dump.host or file_host or ""] += 1
    for pg, ranks in dump.members.items():
        job.members.setdefault(pg, set()).update(ranks)


@dataclass
class _Scan:
    """One text file, read once: its events and what they say about who is who."""

    events: list[LineEvent] = field(default_factory=list)
    presence: Counter[tuple[str, int]] = field(default_factory=Counter)  # ("g"|"l"|"f", rank) -> lines
    local_map: dict[int, int] = field(default_factory=dict)  # torchrun local rank -> global rank
    rank_hosts: dict[int, str] = field(default_factory=dict)
    widest: int = 0  # ranks in the widest NCCL communicator


def _scan(records: list[tuple[int, str]]) -> _Scan:
    scan = _Scan()
    comm: list[LineEvent] = []
    elastic_host: str | None = None
    for lineno, line in records:
        p = split_prefix(line)
        g, loc = p.global_rank, p.local_rank
        scan.presence[("g", g) if g is not None else ("l", loc) if loc is not None else ("f", 0)] += 1
        host = p.host or ((m := _NCCL_HOST.match(p.rest)) and m.group(1)) or None
        if g is not None and host:  # a launcher's host prefix, or mpirun's rank tag before NCCL's host:pid:tid
            scan.rank_hosts.setdefault(g, host)
        e = parse_line(line, lineno)
        if e is None:
            continue
        if e.global_rank is not None and e.local_rank is not None and e.kind != "elastic_rank":
            scan.local_map.setdefault(e.local_rank, e.global_rank)
        if e.kind == "comm":
            comm.append(e)
        elif e.kind == "elastic_host":
            elastic_host = e.host
        elif e.kind == "elastic_rank" and e.global_rank is not None:
            if elastic_host:  # torchelastic's summary: "host : X" precedes "rank : N (local_rank: M)"
                scan.rank_hosts[e.global_rank] = elastic_host
            if e.local_rank is not None:
                scan.local_map.setdefault(e.local_rank, e.global_rank)
        scan.events.append(e)
    # NCCL communicator lines give (local rank -> rank) only for the communicator spanning the world.
    scan.widest = max((e.size or 0 for e in comm), default=0)
    for e in comm:
        if e.size == scan.widest and e.local_rank is not None and e.comm_rank is not None:
            scan.local_map.setdefault(e.local_rank, e.comm_rank)
            if e.host:
                scan.rank_hosts.setdefault(e.comm_rank, e.host)
    return scan


def _default_group(e: LineEvent) -> bool:
    return e.pg in (None, "0") or e.pg_desc == "default_pg"


def _add_text(job: JobLogs, where: str, lines: list[str], file_rank: int | None, file_host: str | None) -> None:
    records = rejoin(lines)
    scan = _scan(records)
    reports = read_reports(records)
    job.reports += reports
    for size, source in [(r.world, f"{r.kind} report") for r in reports] + [(ras_world(records), "NCCL RAS")]:
        if size:
            job.world[f"{size}|{source}"] += 1
    for report in reports:
        for rank, host in report.hosts:
            job.rank(rank).hosts[host] += 1
    named = {g for kind, g in scan.presence if kind == "g"} | set(scan.local_map.values())
    named |= {e.global_rank for e in scan.events if e.global_rank is not None and e.kind != "elastic_rank"}
    named |= {e.pg_rank for e in scan.events if e.pg_rank is not None and _default_group(e)}
    single = file_rank if file_rank is not None else (next(iter(named)) if len(named) == 1 else None)

    def resolve(e: LineEvent) -> int | None:
        if e.global_rank is not None:
            return e.global_rank
        if e.local_rank is not None and e.local_rank in scan.local_map:
            return scan.local_map[e.local_rank]
        if e.pg_rank is not None and _default_group(e):
            return e.pg_rank
        return single

    # 2.4+ prints the timeout line without its group and the next line with it: carry the group over.
    groups: dict[tuple[int | None, int | None], tuple[str | None, str | None, str | None]] = {
        (resolve(e), e.seq): (e.pg, e.pg_guid, e.pg_desc) for e in scan.events if e.pg is not None and e.seq is not None
    }
    for e in scan.events:
        if e.kind == "timeout" and e.pg is None and (found := groups.get((resolve(e), e.seq))):
            e = replace(e, pg=found[0], pg_guid=found[1], pg_desc=found[2])
        if e.kind == "world" and e.size:
            job.world[f"{e.size}|world size line"] += 1
        elif e.kind == "pg_init" and e.size and _default_group(e):
            job.world[f"{e.size}|process-group init"] += 1
        if e.kind == "pg_init" and e.pg is not None and e.global_rank is not None:
            job.members.setdefault(e.pg, set()).add(e.global_rank)
        if e.kind in ("comm", "elastic_host", "world"):
            continue
        r = resolve(e)
        if r is None:
            job.unattributed.append((where, e))
            continue
        log = job.rank(r)
        log.events.append(e)
        log.files.add(where)
        if e.host:
            log.hosts[e.host] += 1
    for (kind, n), count in scan.presence.items():
        r = n if kind == "g" else scan.local_map.get(n) if kind == "l" else single
        if r is not None:
            log = job.rank(r)
            log.lines += count
            log.files.add(where)
            if file_host and not log.hosts:
                log.hosts[file_host] += 1
    for r, host in scan.rank_hosts.items():
        job.rank(r).hosts[host] += 1
    if scan.widest:
        job.world[f"{scan.widest}|NCCL communicator"] += 1
