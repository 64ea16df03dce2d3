"""What comes before a log record: who logged it and on which host.

Real logs carry any mix of prefixes before PyTorch's ``[rankN]:``: a paste's line number or PID
(``[80746] ``), a date (``2025-02-18 12:54 ``, ``18:11:06.680 ``), a terminal colour code whose ESC
was lost (``[36m``), a launcher's tag (torchrun ``[default3]:``, srun ``0: ``, mpirun ``[1,3]<stderr>:``,
Ray ``(RayWorkerWrapper pid=4009, ip=10.0.0.5)``, pdsh ``gpu068: ``, a harness's ``host [stderr]``).
``[rankN]:`` is found wherever it sits near the start; the text before it is searched for a host.
Without it, launcher tags are peeled off one by one, and mpirun's tag gives the rank.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_RANK_TAG = re.compile(r"\[rank(\d+)\]:")
_ROLE = re.compile(r"^\s*\[([A-Za-z_]+?)(\d+)\]:\s?")
_ROLE_ANYWHERE = re.compile(r"\[[A-Za-z_]+?\d+\]:")
_MPI = re.compile(r"^\s*\[\d+,(\d+)\]<(?:stdout|stderr)>:\s?")
_STREAM_HOST = re.compile(r"([A-Za-z0-9][\w.-]*)\s+\[(?:stderr|stdout)\]")
_STREAM_HOST_AT = re.compile(r"^\s*([A-Za-z0-9][\w.-]*)\s+\[(?:stderr|stdout)\]\s*")
_RAY = re.compile(r"^\s*\(\w+ pid=\d+(?:, ip=([\w.:-]+))?\)\s*")
# Peeled from the start of a line that has no [rankN]: (a date needs a time; a number needs a "[" after it).
_PEEL = (
    re.compile(r"^\s*(?:\x1b)?\[\d+(?:;\d+)*m"),  # colour code, ESC kept or lost
    re.compile(r"^\s*\[?\d{4}-\d\d-\d\d[ T_]\d\d:\d\d(?::\d\d(?:[.,]\d+)?)?(?:Z|[+-]\d\d:?\d\d)?\]?\s+"),
    re.compile(r"^\s*\d\d:\d\d:\d\d(?:[.,]\d+)?\s+"),
    re.compile(r"^\s*\d+: (?=\S)"),  # srun --label task id (a task runs several ranks: not a rank)
    re.compile(r"^\s*\[\d+\]\s+(?=[\[(])"),  # a paste's line number or PID
)
_HOST_HEAD = re.compile(r"^\s*([A-Za-z][\w-]*(?:\.[\w-]+)*)\s*:\s*$")  # pdsh / clush "host: "
_HOSTY = re.compile(r"\d|-")  # a host name has a digit or a dash; "Epoch" or "INFO" is not one


@dataclass(frozen=True, slots=True)
class Prefix:
    """Who a line says logged it, and the record after the prefixes."""

    global_rank: int | None
    local_rank: int | None
    host: str | None
    rest: str


def _roles(text: str) -> tuple[int | None, int | None, str]:
    """Consume torchrun role tags (``[default3]:``, ``[rank11]:``) at the start of ``text``."""
    global_rank = local_rank = None
    while m := _ROLE.match(text):
        if m.group(1).lower() == "rank":
            global_rank = int(m.group(2))
        else:
            local_rank = int(m.group(2))
        text = text[m.end() :]
    return global_rank, local_rank, text


def _host_in(head: str) -> str | None:
    head = _ROLE_ANYWHERE.sub("", head)
    if m := _STREAM_HOST.search(head):
        return m.group(1)
    if m := _RAY.search(head):
        return m.group(1)
    if (m := _HOST_HEAD.match(head)) and _HOSTY.search(m.group(1)):
        return m.group(1)
    return None


def split_prefix(line: str) -> Prefix:
    """The rank, torchrun local rank and host a line's prefixes give, and the rest of the line."""
    if (m := _RANK_TAG.search(line, 0, 400)) is not None:
        head = line[: m.start()]
        _, local_rank, _ = _roles(head[head.rfind("[default") :] if "[default" in head else "")
        g, loc, rest = _roles(line[m.start() :])
        return Prefix(g, loc if loc is not None else local_rank, _host_in(head), rest)
    host = None
    mpi_rank = None
    rest = line
    for _ in range(8):  # a line has a handful of prefixes at most
        if m := _MPI.match(rest):
            mpi_rank = int(m.group(1))
        elif m := _RAY.match(rest):
            host = m.group(1) or host
        elif m := _STREAM_HOST_AT.match(rest):
            host = m.group(1)
        else:
            m = next((p.match(rest) for p in _PEEL if p.match(rest)), None)
        if m is None or m.end() == 0:
            break
        rest = rest[m.end() :]
    g, loc, rest = _roles(rest)
    return Prefix(g if g is not None else mpi_rank, loc, host, rest)
