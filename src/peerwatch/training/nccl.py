"""Naming the rank(s) and host(s) an NCCL watchdog hang waited on.

When one rank never reaches a collective, every other rank's watchdog times out on that
collective's sequence number, while the culprit logs an older one, reports an older "last
enqueued" work, or logs nothing at all. So, per process group: find the collective everyone waits
on (the highest SeqNum reported as timed out or pending), then sort ranks into waiters and
culprits by what they reported. Gathering the evidence (:func:`rank_states`) is kept apart from
the verdict (:func:`decide`), whose confidence grows with the kind of evidence.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

from peerwatch.training.nccl_lines import LineEvent
from peerwatch.training.nccl_logs import JobLogs, RankLog

Reason = Literal["timed_out", "waiting", "behind", "mismatch", "stuck", "no_timeout", "silent", "done"]

# Strength of each culprit reason: the verdict takes the strongest class present.
STRONG: frozenset[Reason] = frozenset({"behind", "mismatch"})
MEDIUM: frozenset[Reason] = frozenset({"stuck", "no_timeout"})
WEAK: frozenset[Reason] = frozenset({"silent"})
CONFIDENCE = {"strong": 0.9, "medium": 0.75, "weak": 0.6, "weak_inferred_world": 0.5, "none": 0.2}
MINORITY_PENALTY = 0.6  # culprits outnumber waiters: the logs are probably incomplete


@dataclass(frozen=True, slots=True)
class RankState:
    """What one rank reported about the hung process group."""

    rank: int
    host: str | None
    reason: Reason
    detail: str


@dataclass(frozen=True, slots=True)
class Hang:
    """The collective a process group waits on."""

    pg: str
    desc: str | None
    seq: int
    op: str | None
    timeout_ms: int | None
    reporters: int  # ranks that reported a timeout or pending work in this group
    first_ts: float | None


@dataclass(frozen=True)
class HangVerdict:
    """Culprits of a hang with the evidence; ``ranks`` lists every rank's state."""

    culprit_ranks: tuple[int, ...]
    culprit_hosts: tuple[str, ...]
    hang: Hang | None
    confidence: float
    evidence: tuple[str, ...]
    ranks: tuple[RankState, ...]
    world_size: int | None
    world_source: str

    def to_dict(self) -> dict[str, Any]:
        h = self.hang
        return {
            "culprit_ranks": list(self.culprit_ranks),
            "culprit_hosts": list(self.culprit_hosts),
            "process_group": None if h is None else {"id": h.pg, "desc": h.desc},
            "seq": None if h is None else h.seq,
            "op_type": None if h is None else h.op,
            "timeout_ms": None if h is None else h.timeout_ms,
            "confidence": round(self.confidence, 3),
            "world_size": self.world_size,
            "world_size_source": self.world_source,
            "evidence": list(self.evidence),
            "ranks": [{"rank": s.rank, "host": s.host, "state": s.reason, "detail": s.detail} for s in self.ranks],
        }


def _pg(e: LineEvent) -> str:
    return e.pg if e.pg is not None else "0"  # releases before 2.3 only tagged the default group


def _op(op: str | None) -> str:
    return "".join(ch for ch in (op or "").lower() if ch.isalpha()).removeprefix("nccl")


def world_size(job: JobLogs, given: int | None) -> tuple[int | None, str]:
    """World size and where it came from: option, log lines, or rank-named files."""
    if given:
        return given, "--world-size"
    if job.world:
        best = max(job.world, key=lambda k: int(k.split("|")[0]))
        return int(best.split("|")[0]), best.split("|")[1]
    if job.files and job.rank_named_files == job.files and job.ranks:
        return max(job.ranks) + 1, "rank-named files (highest rank + 1)"
    return None, "unknown"


def find_hangs(job: JobLogs) -> list[Hang]:
    """Process groups with a reported timeout or pending work, earliest first."""
    by_pg: dict[str, list[tuple[int, LineEvent]]] = {}
    for rank, log in job.ranks.items():
        for e in log.events:
            if e.kind == "timeout" or (e.kind == "progress" and _waiting_seq(e) is not None):
                by_pg.setdefault(_pg(e), []).append((rank, e))
    hangs = []
    for pg, pairs in by_pg.items():
        events = [e for _, e in pairs]
        seq = max(s for e in events if (s := _waiting_seq(e)) is not None)
        at = [e for e in events if _waiting_seq(e) == seq]
        ops = Counter(e.op for e in at if e.op)
        times = [e.ts for e in events if e.ts is not None]
        hangs.append(
            Hang(
                pg=pg,
                desc=next((e.pg_desc for e in events if e.pg_desc), None),
                seq=seq,
                op=ops.most_common(1)[0][0] if ops else None,
                timeout_ms=next((e.timeout_ms for e in at if e.timeout_ms), None),
                reporters=len({rank for rank, _ in pairs}),
                first_ts=min(times) if times else None,
            )
        )
    return sorted(hangs, key=lambda h: (h.first_ts is None, h.first_ts or 0.0, -h.reporters, h.pg))


def _waiting_seq(e: LineEvent) -> int | None:
    """The collective a report says the rank waits on."""
    if e.kind == "timeout":
        return e.seq
    if e.seq is not None:
        return e.seq
    if e.completed is not None and e.enqueued is not None and e.enqueued > e.completed:
        return e.completed + 1
    return None


def rank_states(job: JobLogs, hang: Hang, world: int | None) -> list[RankState]:
    """Sort every rank of the hung group into a reason, with a sentence of evidence."""
    if hang.pg == "0" and world:
        members = set(range(world)) | set(job.ranks)
    else:
        members = set(job.members.get(hang.pg, set())) | {
            r
            for r, log in job.ranks.items()
            if any(_pg(e) == hang.pg and e.kind in ("timeout", "progress") for e in log.events)
        }
    return [_state(job.ranks.get(r), r, hang) for r in sorted(members)]


def _state(log: RankLog | None, rank: int, hang: Hang) -> RankState:
    host = log.host if log else None
    if log is None or (log.lines == 0 and all(e.kind == "elastic_rank" for e in log.events)):
        return RankState(rank, host, "silent", "no log line from this rank")
    mine = [e for e in log.events if _pg(e) == hang.pg]
    timeouts = [e for e in mine if e.kind == "timeout" and e.seq is not None]
    progress = [e for e in mine if e.kind == "progress"]
    if timeouts:
        last = max(timeouts, key=lambda e: e.seq or 0)
        if last.seq == hang.seq:
            if hang.op and last.op and _op(last.op) != _op(hang.op):
                return RankState(
                    rank, host, "mismatch", f"timed out in {last.op} #{last.seq} while the others ran {hang.op}"
                )
            ran = f" after {last.ran_ms} ms" if last.ran_ms else ""
            return RankState(
                rank, host, "timed_out", f"timed out waiting on {last.op or 'collective'} #{last.seq}{ran}"
            )
        if last.seq is not None and last.seq < hang.seq:
            return RankState(rank, host, "behind", f"timed out on older SeqNum {last.seq} (others wait on {hang.seq})")
    enqueued = max((e.enqueued for e in progress if e.enqueued is not None), default=None)
    completed = max((e.completed for e in progress if e.completed is not None), default=None)
    if enqueued is not None:
        said = f"last enqueued work {enqueued}, last completed {completed}"
        if enqueued < hang.seq:
            return RankState(rank, host, "behind", f"{said}: never reached SeqNum {hang.seq}")
        if completed is None or completed < hang.seq:
            return RankState(rank, host, "waiting", f"{said}: waiting on SeqNum {hang.seq}")
        return RankState(rank, host, "done", f"{said}: reports SeqNum {hang.seq} completed")
    if any(e.kind == "watchdog_stuck" for e in log.events):
        return RankState(rank, host, "stuck", "its watchdog got stuck (a CUDA/NCCL call hung) and reported no timeout")
    return RankState(rank, host, "no_timeout", f"{log.lines} log line(s) but no timeout for SeqNum {hang.seq}")


def decide(states: list[RankState], hang: Hang, world_source: str) -> tuple[tuple[int, ...], float, str]:
    """Culprit ranks, confidence and the kind of evidence used."""
    waiters = sum(s.reason in ("timed_out", "waiting") for s in states)
    strong = tuple(s.rank for s in states if s.reason in STRONG)
    medium = tuple(s.rank for s in states if s.reason in MEDIUM)
    weak = tuple(s.rank for s in states if s.reason in WEAK)
    if strong:
        culprits, kind = strong, "strong"  # ranks that said they are behind; silent ones are only unknown
    elif medium:
        culprits, kind = tuple(sorted(medium + weak)), "medium"
    elif weak:
        culprits, kind = weak, "weak_inferred_world" if world_source.startswith("rank-named") else "weak"
    else:
        return (), CONFIDENCE["none"], "none"
    confidence = CONFIDENCE[kind] * (MINORITY_PENALTY if len(culprits) >= waiters else 1.0)
    return culprits, confidence, kind
