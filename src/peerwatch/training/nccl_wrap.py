"""Re-joining PyTorch NCCL messages that a terminal, a pretty-printer or a paste split over lines.

Seen in real pastes: a terminal wrap at a fixed width cuts mid-word (``...OpTy`` / ``pe=BROADCAST``,
``ProcessGroupNCCL'`` / ``s watchdog got stuck``); a log viewer wraps at a space
(``...timeout: `` / ``WorkNCCL(SeqNum=...``, ``detected`` / ``by watchdog at work: 2070``).
A line is continued when it holds a ProcessGroupNCCL message that has not ended (no closing
``.``, ``)``, ``]`` or ``!``, or a trailing space) and the next line does not start a record of its own.
A cut at the file's widest line length is a terminal wrap and is joined without a space.
"""

from __future__ import annotations

import re

from peerwatch.training.nccl_prefix import split_prefix

MAX_CONTINUATION = 24  # lines one message may span (the stuck-watchdog text is ~8 terminal lines)
_MARKER = re.compile(r"ProcessGroupNCCL|WorkNCCL|Watchdog caught|watchdog got|Heartbeat monitor|\[(?:PG|Rank) ")
_STARTS_RECORD = re.compile(
    r"^\s*(?:$|\[|\(|[A-Za-z0-9][\w.-]*:\d+:\d+ \[\d+\]|frame #|#\d+ |Exception raised|terminate called|what\(\)|"
    r"Traceback|File \"|\*\*\*|PC: |[EWIF]\d{4} |NCCL |[A-Za-z_.]*(?:Error|Exception|Warning):)"
)


def _ended(line: str) -> bool:
    stripped = line.rstrip()
    if not stripped or stripped[-1] in ".)]!":
        return True
    return stripped == line and stripped[-1].isdigit()  # "... last completed work: 715"


def _starts_record(line: str) -> bool:
    if _STARTS_RECORD.match(line):
        return True
    p = split_prefix(line)
    return p.rest.strip() != line.strip()  # a launcher or rank prefix opens a new record


def rejoin(lines: list[str]) -> list[tuple[int, str]]:
    """(first line number, text) per record, wrapped ProcessGroupNCCL messages joined."""
    width = max((len(line) for line in lines), default=0)
    out: list[tuple[int, str]] = []
    i = 0
    while i < len(lines):
        text, start = lines[i], i + 1
        i += 1
        if _MARKER.search(text):
            last = text
            for _ in range(MAX_CONTINUATION):
                if i >= len(lines) or _ended(last) or _starts_record(lines[i]):
                    break
                nxt = lines[i]
                glue = "" if last[-1:].isspace() or (len(last) == width and width >= 60) else " "
                text, last = text + glue + nxt, nxt
                i += 1
        out.append((start, text))
    return out
