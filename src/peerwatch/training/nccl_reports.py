"""Reports that name the ranks a hang waits on outright: PyTorch's desync report, the flight-recorder
analyser's output and NCCL RAS status.

* desync report (``TORCH_NCCL_DESYNC_DEBUG=1``): ``[1] finished collective #1155873, but didn't join
  collective #1155874``, ``[47] joined but didn't finish collective #41207``, ``ranks [47] are the
  lagging ranks that caused this timeout``;
* ``python -m torch.distributed.flight_recorder.fr_trace`` / ``torchfrtrace``: ``Not all ranks joining
  collective ...`` followed by ``missing ranks: {3, 4}`` (older: ``Missing ranks are {3, 4}``);
* NCCL RAS (``ncclras``): ``Missing communicator data from N ranks`` and ``N ranks have launched up to
  operation X`` blocks, each followed by ``Rank R -- GPU g managed by process P on node H`` lines.
  A MISMATCH block lists the smaller set of ranks, which may be ahead rather than behind: the
  counts say which.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

ReportKind = Literal["desync", "flight_recorder", "ras_missing", "ras_mismatch"]
FR_BLOCK = 14  # lines after "Not all ranks joining collective" that belong to its block

_RANKS = r"\[([\d,\s.]+)\]"
_DESYNC = (
    re.compile(_RANKS + r" joined but didn't finish collective #(\d+)"),
    re.compile(_RANKS + r" finished collective #\d+, but didn't join collective #(\d+)"),
    re.compile(r"ranks " + _RANKS + r" are the lagging ranks that caused this timeout()"),
)
_FR_START = re.compile(r"Not all ranks joining collective(?:[ ,:]+(?:sequence number:?\s*)?(\d+))?")
_FR_MISSING = re.compile(r"[Mm]issing ranks(?: are|:)\s*\{([\d,\s]*)\}")
_FR_GROUP = re.compile(r"group info:\s*([^:\s]+)(?::(\S+))?|for group (\S+?):(\S*)")
_FR_OP = re.compile(r"^\s*collective:\s*(?:nccl:)?(\w+)|collective nccl:(\w+)")
_FR_WORLD = re.compile(r"world size:\s*(\d+)|expected ranks:\s*(\d+)\s*$")
_RAS_RANK = re.compile(r"^\s*Rank (\d+) -- GPU \d+ managed by process \d+ on node (\S+)")
_RAS_MISSING = re.compile(r"Missing communicator data from (\d+) ranks?\b")
_RAS_COUNT = re.compile(r"^\s*(\d+) ranks? ha(?:ve|s) launched up to operation (\d+)")
_RAS_OP = re.compile(r"Communicator ranks have different (\w+) operation counts")
_RAS_TOTAL = re.compile(r"\(total\)")


@dataclass(frozen=True, slots=True)
class NamedReport:
    """Ranks a report names, with the line that names them."""

    kind: ReportKind
    lineno: int
    text: str
    culprits: tuple[int, ...]
    ahead: tuple[int, ...] = ()  # ranks a RAS mismatch lists that are ahead of the rest
    behind_unnamed: int = 0  # ranks behind that the report counts but does not list
    seq: int | None = None
    op: str | None = None
    pg: str | None = None
    world: int | None = None
    hosts: tuple[tuple[int, str], ...] = ()


def _ints(text: str) -> tuple[int, ...]:
    return tuple(sorted({int(x) for x in re.findall(r"\d+", text)}))


def read_reports(records: list[tuple[int, str]]) -> list[NamedReport]:
    """Every desync, flight-recorder and RAS report in one file's records."""
    out: list[NamedReport] = []
    for i, (lineno, text) in enumerate(records):
        for pattern in _DESYNC:
            if m := pattern.search(text):
                seq = int(m.group(2)) if m.group(2) else None
                out.append(NamedReport("desync", lineno, m.group(0), _ints(m.group(1)), seq=seq))
        if m := _FR_START.search(text):
            out.append(_flight_block(records[i : i + FR_BLOCK], m))
        if m := _RAS_MISSING.search(text):
            hosts = _ras_ranks(records[i + 1 :])
            quote = "; ".join(t.strip() for _, t in records[i : i + 1 + min(len(hosts), 4)])
            out.append(NamedReport("ras_missing", lineno, quote, tuple(sorted(hosts)), hosts=_pairs(hosts)))
        if m := _RAS_OP.search(text):
            out.append(_ras_mismatch(records[i:], m.group(1)))
    return [r for r in out if r.culprits or r.ahead]


def ras_world(records: list[tuple[int, str]]) -> int | None:
    """Job size from a RAS "Job summary" table (its "Processes (total)" column)."""
    for i, (_, text) in enumerate(records[:-1]):
        if text.lstrip().startswith("(total)") and _RAS_TOTAL.search(text):
            nums = [int(x) for x in records[i + 1][1].split() if x.isdigit()]
            if len(nums) == 5:
                return nums[3]
            if len(nums) == 3:
                return nums[1]
    return None


def _pairs(hosts: dict[int, str]) -> tuple[tuple[int, str], ...]:
    return tuple(sorted(hosts.items()))


def _ras_ranks(records: list[tuple[int, str]]) -> dict[int, str]:
    hosts: dict[int, str] = {}
    for _, text in records:
        if not (m := _RAS_RANK.match(text)):
            break
        hosts[int(m.group(1))] = m.group(2)
    return hosts


def _ras_mismatch(records: list[tuple[int, str]], op: str) -> NamedReport:
    counts: list[tuple[int, int]] = []  # (number of ranks, operation reached)
    j = 1
    while j < len(records) and (m := _RAS_COUNT.match(records[j][1])):
        counts.append((int(m.group(1)), int(m.group(2))))
        j += 1
    hosts = _ras_ranks(records[j:])
    listed = tuple(sorted(hosts))
    lineno = records[0][0]
    mine = [reached for n, reached in counts if n == len(listed)]
    most = max(counts, default=(0, 0))
    quote = "; ".join(t.strip() for _, t in records[: j + len(listed)])
    if listed and mine and most[0] > len(listed) and mine[0] > most[1]:
        # The listed ranks launched more operations than the majority: they are ahead, the rest behind.
        return NamedReport(
            "ras_mismatch", lineno, quote, (), ahead=listed, behind_unnamed=most[0], op=op, hosts=_pairs(hosts)
        )
    return NamedReport("ras_mismatch", lineno, quote, listed, op=op, hosts=_pairs(hosts))


def _flight_block(block: list[tuple[int, str]], start: re.Match[str]) -> NamedReport:
    lineno = block[0][0]
    seq = int(start.group(1)) if start.group(1) else None
    culprits: tuple[int, ...] = ()
    pg = op = None
    world = None
    quote = [block[0][1].strip()]
    for k, (_, text) in enumerate(block):
        if k and _FR_START.search(text):
            break  # the next collective's block
        if m := _FR_MISSING.search(text):
            culprits = _ints(m.group(1))
            quote.append(m.group(0))
        if m := _FR_GROUP.search(text):
            pg = m.group(1) or m.group(3)
        if m := _FR_OP.search(text):
            op = m.group(1) or m.group(2)
        if m := _FR_WORLD.search(text):
            world = int(m.group(1) or m.group(2))
        if seq is None and (m := re.search(r"sequence number:\s*(\d+)", text)):
            seq = int(m.group(1))
    return NamedReport("flight_recorder", lineno, "; ".join(quote), culprits, seq=seq, op=op, pg=pg, world=world)
