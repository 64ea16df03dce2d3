"""PyTorch NCCL flight-recorder dumps (``TORCH_NCCL_TRACE_BUFFER_SIZE``, files ``nccl_trace_rank_<N>``).

A dump is a pickled (or JSON) dict with ``entries`` (one per collective: ``pg_id`` /
``process_group``, ``collective_seq_id``, ``profiling_name`` like ``nccl:all_reduce``, ``state``
scheduled/started/completed, ``timeout_ms``), and in newer releases ``pg_status`` (last enqueued,
started and completed collective per group) and ``pg_config`` (the ranks of each group).
Each dump becomes one "progress" event per process group, the same event the log lines
"last enqueued NCCL work: N, last completed NCCL work: M" give, so both feed one analysis.
Pickles are loaded with a class-free unpickler: a dump holds only dicts, lists and scalars,
and anything else is refused rather than executed.
"""

from __future__ import annotations

import io
import json
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from peerwatch.training.nccl_lines import LineEvent

_RANK_IN_NAME = re.compile(r"(\d+)(?:\.\w+)?$")


class DumpError(ValueError):
    """Not a readable flight-recorder dump."""


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: a flight-recorder dump holds plain data only")


@dataclass(frozen=True)
class FlightDump:
    """What one rank's dump says."""

    rank: int | None
    host: str | None
    events: tuple[LineEvent, ...]
    members: dict[str, frozenset[int]] = field(default_factory=dict)  # process group -> global ranks


def is_dump(head: bytes) -> bool:
    """A pickle (protocol 2+) or a JSON object that mentions flight-recorder entries."""
    return head[:1] == b"\x80" or (head.lstrip()[:1] == b"{" and b'"entries"' in head)


def read_dump(path: Path, data: bytes) -> FlightDump:
    """Parse a dump's bytes; the rank comes from the dump or the file name (``..._rank_3``)."""
    try:
        obj = _PlainUnpickler(io.BytesIO(data)).load() if data[:1] == b"\x80" else json.loads(data)
    except (pickle.UnpicklingError, EOFError, ValueError, UnicodeDecodeError) as exc:
        raise DumpError(f"not a flight-recorder dump: {exc}") from exc
    if not isinstance(obj, dict) or not isinstance(obj.get("entries"), list):
        raise DumpError("no 'entries' list: not a flight-recorder dump")
    rank = obj.get("rank")
    if not isinstance(rank, int):
        m = _RANK_IN_NAME.search(path.name)
        rank = int(m.group(1)) if m else None
    host = next((obj[k] for k in ("hostname", "host_name", "host") if isinstance(obj.get(k), str)), None)
    groups: dict[str, list[dict[str, Any]]] = {}
    descs: dict[str, str | None] = {}
    for entry in obj["entries"]:
        if not isinstance(entry, dict) or entry.get("is_p2p") or entry.get("collective_seq_id") is None:
            continue
        pg, desc = _group(entry)
        groups.setdefault(pg, []).append(entry)
        descs[pg] = desc
    raw_status = obj.get("pg_status")
    status: dict[str, Any] = raw_status if isinstance(raw_status, dict) else {}
    events = tuple(
        _event(path, rank, pg, descs.get(pg), entries, status.get(pg)) for pg, entries in sorted(groups.items())
    )
    return FlightDump(rank, host, events, _members(obj.get("pg_config")))


def _group(entry: dict[str, Any]) -> tuple[str, str | None]:
    pg = entry.get("process_group")
    if isinstance(pg, list | tuple) and pg:
        return str(pg[0]), (str(pg[1]) if len(pg) > 1 else None)
    return str(entry.get("pg_id", 0)), None


def _event(
    path: Path, rank: int | None, pg: str, desc: str | None, entries: list[dict[str, Any]], status: Any
) -> LineEvent:
    seqs = [int(e["collective_seq_id"]) for e in entries]
    done = [int(e["collective_seq_id"]) for e in entries if e.get("state") == "completed"]
    pending = sorted((e for e in entries if e.get("state") != "completed"), key=lambda e: int(e["collective_seq_id"]))
    enqueued, completed = max(seqs), max(done, default=min(seqs) - 1)
    if isinstance(status, dict):
        enqueued = int(status.get("last_enqueued_collective", enqueued))
        completed = int(status.get("last_completed_collective", completed))
    first = pending[0] if pending else None
    op = str(first.get("profiling_name", "")).removeprefix("nccl:") if first else None
    note = f", waiting in {op} #{first['collective_seq_id']} ({first.get('state')})" if first else ", nothing pending"
    text = f"flight recorder {path.name}: PG {pg} last enqueued {enqueued}, last completed {completed}{note}"
    return LineEvent(
        "progress",
        0,
        text,
        global_rank=rank,
        pg=pg,
        pg_desc=desc,
        seq=int(first["collective_seq_id"]) if first else None,
        op=op or None,
        timeout_ms=int(first["timeout_ms"]) if first and first.get("timeout_ms") else None,
        enqueued=enqueued,
        completed=completed,
    )


def _members(config: Any) -> dict[str, frozenset[int]]:
    """Global ranks of each group from ``pg_config`` (its 'ranks' is a list or its string form)."""
    out: dict[str, frozenset[int]] = {}
    if not isinstance(config, dict):
        return out
    for pg, cfg in config.items():
        ranks = cfg.get("ranks") if isinstance(cfg, dict) else None
        if isinstance(ranks, str):
            ranks = [int(x) for x in re.findall(r"\d+", ranks)]
        if isinstance(ranks, list) and ranks:
            out[str(pg)] = frozenset(int(r) for r in ranks)
    return out
