"""Parsing single log lines of a PyTorch/NCCL job into events.

Recognised (PyTorch 1.13 to 2.6+, NCCL 2.x):

* line prefixes: torchrun's ``[default3]:`` (local rank) and PyTorch's ``[rank11]:`` (global rank),
  glog headers ``[E ProcessGroupNCCL.cpp:475]`` and ``[E1016 09:12:45.123456 1234 .../ProcessGroupNCCL.cpp:616]``,
  Python logging ``[2024-10-16 09:12:45,123]``, NCCL's ``host:pid:tid [dev]``;
* process-group tags ``[Rank 3]``, ``[PG 0 Rank 3]``, ``[PG 0 (default_pg) Rank 3]``,
  ``[PG ID 0 PG GUID 0(default_pg) Rank 3]`` (the rank inside that group);
* ``Watchdog caught collective operation timeout: WorkNCCL(SeqNum=.., OpType=.., [NumelIn=.., NumelOut=..,]
  Timeout(ms)=..) ran for .. milliseconds``;
* ``last enqueued NCCL work: N, last completed NCCL work: M`` in its forms ("Timeout at NCCL work",
  "Exception ... detected by watchdog at work", "Received a dump signal ... from rank R");
* the heartbeat monitor ("watchdog got stuck", "Heartbeat monitor timed out", "detected no heartbeat"),
  GIL warnings,
  NCCL WARN lines, CUDA/NCCL errors, world size, process-group init options, NCCL communicator
  init lines and torchelastic's failure summary (``host :``, ``rank : 9 (local_rank: 1)``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal

from peerwatch.training.nccl_prefix import split_prefix

Kind = Literal[
    "timeout",
    "progress",
    "watchdog_stuck",
    "gil",
    "nccl_warn",
    "error",
    "world",
    "pg_init",
    "comm",
    "elastic_host",
    "elastic_rank",
    "other",
]

_GLOG = re.compile(r"\[([EWIF])(?:(\d\d)(\d\d) (\d\d):(\d\d):(\d\d(?:\.\d+)?) +\d+)? *[^\]\s]+:\d+\]\s*")
_PYLOG = re.compile(r"^\[?(\d{4})-(\d\d)-(\d\d)[ T_](\d\d):(\d\d):(\d\d(?:[.,]\d+)?)\]?\s*")
_NCCL = re.compile(r"^([A-Za-z0-9][\w.-]*):(\d+):(\d+) \[(\d+)\] (?:\S+:\d+ )?NCCL (INFO|WARN|ERROR|TRACE)\s?(.*)$")
_PG = re.compile(r"\[PG (?:ID )?(\d+)(?: PG GUID ([^\s()\]]+))?\s*(?:\(([^)]*)\))?\s*Rank (\d+)\]")
_OLD_RANK = re.compile(r"\[Rank (\d+)\]")
_TIMEOUT = re.compile(
    r"Watchdog caught collective operation timeout:\s*WorkNCCL\(((?:[^()]|\([a-z]+\))*)(\)|$)"
    r"(?:\s*ran for (\d+)\s*milliseconds)?"
)
_FIELD = re.compile(r"(SeqNum|OpType|NumelIn|NumelOut|Timeout\(ms\))=([^,)\s]+)")
_ENQUEUED = re.compile(r"last enqueued (?:NCCL )?work: (-?\d+)", re.IGNORECASE)
_COMPLETED = re.compile(r"last completed (?:NCCL )?work: (-?\d+)", re.IGNORECASE)
_AT_WORK = re.compile(r"(?:Timeout at NCCL work|detected\s*by watchdog at work(?: sequence id)?):? (\d+)")
_FROM_RANK = re.compile(r"dump signal.*?from\s+rank (\d+)", re.IGNORECASE)
_STUCK = re.compile(r"watchdog got stuck for (\d+) seconds|Heartbeat monitor timed out|detected no heartbeat")
_GIL = re.compile(r"Could not acquire GIL")
_ERROR = re.compile(
    r"CUDA error|NCCL error|ncclInternalError|ncclSystemError|ncclRemoteError|ncclUnhandledCudaError|"
    r"uncorrectable ECC|Xid|illegal memory access|DistBackendError|Segmentation fault|SIGSEGV"
)
_WORLD = re.compile(r"\bworld[_ ]size\s*[=:]?\s*(\d+)", re.IGNORECASE)
_PG_INIT = re.compile(r"ProcessGroupNCCL initialization options:.*?\bsize: (\d+), global rank: (\d+)")
_COMM = re.compile(r"\bcomm 0x[0-9a-fA-F]+ rank (\d+) n[Rr]anks (\d+)(?:.*?\blocalRank (\d+))?")
_ELASTIC_HOST = re.compile(r"^\s*host\s*:\s*([A-Za-z0-9][\w.-]*)\s*$")
_ELASTIC_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)")


@dataclass(frozen=True, slots=True)
class LineEvent:
    """What one line says, and who said it as far as the line itself tells."""

    kind: Kind
    lineno: int
    text: str  # the line without prefixes, for evidence
    global_rank: int | None = None  # from [rankN]: or a rank field
    local_rank: int | None = None  # from [defaultN]: or NCCL's [dev]
    pg: str | None = None  # process-group id (None: not said; old releases only had the default group)
    pg_guid: str | None = None  # PG GUID (2.5+): unique across ranks where the id is not
    pg_desc: str | None = None
    pg_rank: int | None = None  # rank inside that group
    host: str | None = None
    ts: float | None = None  # seconds within the year (glog has no year); for ordering only
    seq: int | None = None
    op: str | None = None
    timeout_ms: int | None = None
    ran_ms: int | None = None
    enqueued: int | None = None
    completed: int | None = None
    from_rank: int | None = None
    size: int | None = None  # world, process-group or communicator size
    comm_rank: int | None = None  # rank inside an NCCL communicator


_DAYS = (0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334)


def _seconds(month: str, day: str, hh: str, mm: str, ss: str) -> float:
    return ((_DAYS[int(month) - 1] + int(day)) * 24 + int(hh)) * 3600 + int(mm) * 60 + float(ss.replace(",", "."))


def parse_line(line: str, lineno: int) -> LineEvent | None:
    """The event a line reports, or None for a line that says nothing useful."""
    prefix = split_prefix(line)
    global_rank, local_rank, host, line = prefix.global_rank, prefix.local_rank, prefix.host, prefix.rest
    ts = None
    # A glog header may follow a progress bar that had no newline: the record starts at the header.
    if m := _GLOG.search(line, 0, 600):
        if m.group(2):
            ts = _seconds(m.group(2), m.group(3), m.group(4), m.group(5), m.group(6))
        line = line[m.end() :]
    elif m := _PYLOG.match(line):
        ts = _seconds(m.group(2), m.group(3), m.group(4), m.group(5), m.group(6))
        line = line[m.end() :]
    nccl = _NCCL.match(line)
    if nccl:
        host, local_rank = nccl.group(1), local_rank if local_rank is not None else int(nccl.group(4))
    pg = pg_guid = pg_desc = pg_rank = None
    if m := _PG.search(line):
        pg, pg_guid, pg_desc, pg_rank = m.group(1), m.group(2), m.group(3), int(m.group(4))
    elif m := _OLD_RANK.search(line):
        pg_rank = int(m.group(1))
    base = LineEvent(
        "other",
        lineno,
        line.strip(),
        global_rank=global_rank,
        local_rank=local_rank,
        pg=pg,
        pg_guid=pg_guid,
        pg_desc=pg_desc,
        pg_rank=pg_rank,
        host=host,
        ts=ts,
    )
    return _classify(base, nccl)


def _classify(e: LineEvent, nccl: re.Match[str] | None) -> LineEvent | None:
    text = e.text
    if m := _TIMEOUT.search(text):
        found = _FIELD.findall(m.group(1))
        if not m.group(2) and found and not m.group(1).rstrip().endswith(","):
            found = found[:-1]  # a paste cut the line: its last field may be cut too ("OpType=ALLR")
        fields = dict(found)
        if "SeqNum" not in fields:
            # PyTorch 1.x prints no SeqNum: a timeout all the same, though not matched across ranks.
            return replace(e, kind="timeout", op=fields.get("OpType")) if m.group(2) else None
        return replace(
            e,
            kind="timeout",
            seq=int(fields["SeqNum"]),
            op=fields.get("OpType"),
            timeout_ms=int(fields["Timeout(ms)"]) if "Timeout(ms)" in fields else None,
            ran_ms=int(m.group(3)) if m.group(3) else None,
        )
    enq, comp = _ENQUEUED.search(text), _COMPLETED.search(text)
    if enq or comp:
        at, src = _AT_WORK.search(text), _FROM_RANK.search(text)
        return replace(
            e,
            kind="progress",
            enqueued=int(enq.group(1)) if enq else None,
            completed=int(comp.group(1)) if comp else None,
            seq=int(at.group(1)) if at else None,
            from_rank=int(src.group(1)) if src else None,
        )
    if _STUCK.search(text):
        return replace(e, kind="watchdog_stuck")
    if _GIL.search(text):
        return replace(e, kind="gil")
    if m := _PG_INIT.search(text):
        return replace(e, kind="pg_init", size=int(m.group(1)), global_rank=int(m.group(2)))
    if nccl:
        if m := _COMM.search(nccl.group(6)):
            local = int(m.group(3)) if m.group(3) else e.local_rank
            return replace(e, kind="comm", comm_rank=int(m.group(1)), size=int(m.group(2)), local_rank=local)
        if nccl.group(5) in ("WARN", "ERROR"):
            return replace(e, kind="nccl_warn", text=nccl.group(6).strip())
        return None
    if _ERROR.search(text):
        return replace(e, kind="error")
    if m := _ELASTIC_RANK.match(text):
        return replace(e, kind="elastic_rank", global_rank=int(m.group(1)), local_rank=int(m.group(2)))
    if m := _ELASTIC_HOST.match(text):
        return replace(e, kind="elastic_host", host=m.group(1))
    if m := _WORLD.search(text):
        return replace(e, kind="world", size=int(m.group(1)))
    return None
