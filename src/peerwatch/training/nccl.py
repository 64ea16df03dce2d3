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
Level = Literal["certain", "high", "medium", "low", "none"]

# Strength of each culprit reason: the verdict takes the strongest class present.
STRONG: frozenset[Reason] = frozenset({"behind", "mismatch"})
MEDIUM: frozenset[Reason] = frozenset({"no_timeout"})
WEAK: frozenset[Reason] = frozenset({"silent", "stuck"})
CONFIDENCE: dict[Level, float] = {"certain": 0.99, "high": 0.9, "medium": 0.75, "low": 0.6, "none": 0.2}
INFERRED_WORLD = 0.5  # a guess from silence where even the world size is a guess (rank-named files)
MAX_LAG = 1000  # SeqNums further apart than this cannot be one group's: a rank is never that far behind


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
    named: bool  # the log printed the group; False: grouped by SeqNum (old releases print no group)
    seq: int
    op: str | None
    timeout_ms: int | None
    reporters: int  # ranks that reported a timeout or pending work in this group
    first_ts: float | None
    ops: tuple[str, ...] = ()  # every op type reported at ``seq`` (several: the ranks disagree)
    pg_id: str | None = None  # the id printed beside a GUID (``[PG ID 11 PG GUID 119 ...]``)


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
    level: Level = "none"  # certain: the log names the culprit; high..low: inferred; none: no culprit
    reason: str = ""  # why that level, in one sentence
    reporting: tuple[int, ...] = ()  # ranks that reported a timeout, pending work or a stuck watchdog
    watchdog: tuple[tuple[int, str | None, str], ...] = ()  # (rank, host, message) of stuck watchdogs
    hosts: tuple[tuple[int, str], ...] = ()  # every rank whose host the logs tell
    named_by_log: tuple[str, ...] = ()  # the lines that name culprits outright

    def to_dict(self) -> dict[str, Any]:
        h = self.hang
        return {
            "culprit_ranks": list(self.culprit_ranks),
            "culprit_hosts": list(self.culprit_hosts),
            "process_group": None if h is None else {"id": h.pg, "desc": h.desc, "named": h.named},
            "seq": None if h is None else h.seq,
            "op_type": None if h is None else h.op,
            "timeout_ms": None if h is None else h.timeout_ms,
            "confidence": round(self.confidence, 3),
            "confidence_level": self.level,
            "confidence_reason": self.reason,
            "named_by_log": list(self.named_by_log),
            "reporting_ranks": list(self.reporting),
            "watchdog": [{"rank": r, "host": h, "message": m} for r, h, m in self.watchdog],
            "hosts": {str(r): h for r, h in self.hosts},
            "world_size": self.world_size,
            "world_size_source": self.world_source,
            "evidence": list(self.evidence),
            "ranks": [{"rank": s.rank, "host": s.host, "state": s.reason, "detail": s.detail} for s in self.ranks],
        }


def group_label(h: Hang) -> str:
    """How a group is named to the user: "PG 1", or what was assumed where the log names none."""
    if h.named:
        return f"PG {h.pg}" if h.pg_id in (None, h.pg) else f"PG {h.pg_id} (GUID {h.pg})"
    if h.pg.startswith("?"):
        return f"unnamed group {h.pg[1:]} (the log names no group; grouped by SeqNum)"
    return "PG 0 (assumed: the log names no group)"


def _pg(e: LineEvent) -> str | None:
    """The group's key: its GUID where printed (ids repeat across ranks), else its id, else None."""
    return e.pg_guid if e.pg_guid is not None else e.pg


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


def group_events(job: JobLogs) -> dict[str, list[tuple[int, LineEvent]]]:
    """Waiting reports (timeouts, pending work) per process group.

    A report that does not name its group joins the one named group waiting on the same SeqNum;
    the rest are grouped by SeqNum, a new group wherever two SeqNums lie more than MAX_LAG apart,
    so that counters of different groups are never compared. A single such group with no named
    group beside it is taken for the default group (releases before 2.3 name no group).
    """
    named: dict[str, list[tuple[int, LineEvent]]] = {}
    loose: list[tuple[int, LineEvent]] = []
    for rank, log in job.ranks.items():
        for e in log.events:
            if e.kind in ("timeout", "progress") and _waiting_seq(e) is not None:
                key = _pg(e)
                if key is None:
                    loose.append((rank, e))
                else:
                    named.setdefault(key, []).append((rank, e))
    seqs = {key: {_waiting_seq(e) for _, e in pairs} for key, pairs in named.items()}
    rest: list[tuple[int, LineEvent]] = []
    for rank, e in loose:
        keys = [key for key, waited in seqs.items() if _waiting_seq(e) in waited]
        if len(keys) == 1:
            named[keys[0]].append((rank, e))
        else:
            rest.append((rank, e))
    clusters: list[list[tuple[int, LineEvent]]] = []
    for rank, e in sorted(rest, key=lambda p: _waiting_seq(p[1]) or 0):
        if clusters and (_waiting_seq(e) or 0) - (_waiting_seq(clusters[-1][-1][1]) or 0) <= MAX_LAG:
            clusters[-1].append((rank, e))
        else:
            clusters.append([(rank, e)])
    if len(clusters) == 1 and set(named) <= {"0"}:
        named.setdefault("0", []).extend(clusters[0])
    else:
        named.update({f"?{i}": pairs for i, pairs in enumerate(clusters, 1)})
    return named


def find_hangs(job: JobLogs) -> list[Hang]:
    """Process groups with a reported timeout or pending work, earliest first."""
    hangs = []
    for pg, pairs in group_events(job).items():
        events = [e for _, e in pairs]
        seq = max(s for e in events if (s := _waiting_seq(e)) is not None)
        at = [e for e in events if _waiting_seq(e) == seq]
        ops = Counter(e.op for e in at if e.op)
        top = ops.most_common(1)[0] if ops else None
        times = [e.ts for e in events if e.ts is not None]
        hangs.append(
            Hang(
                pg=pg,
                desc=next((e.pg_desc for e in events if e.pg_desc), None),
                named=not pg.startswith("?") and any(_pg(e) is not None for e in events),
                seq=seq,
                # The op everyone runs only if most say so: one of two disagreeing ranks is no culprit.
                op=top[0] if top and top[1] * 2 > sum(ops.values()) else None,
                timeout_ms=next((e.timeout_ms for e in at if e.timeout_ms), None),
                reporters=len({rank for rank, _ in pairs}),
                first_ts=min(times) if times else None,
                ops=tuple(sorted(ops)),
                pg_id=next((e.pg for e in events if e.pg is not None), None),
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
    pairs = group_events(job).get(hang.pg, [])
    mine: dict[int, list[LineEvent]] = {}
    for rank, e in pairs:
        mine.setdefault(rank, []).append(e)
    # Reports that wait on nothing ("last enqueued 5090, last completed 5090") join by group key alone.
    for rank, log in job.ranks.items():
        for e in log.events:
            quiet = e.kind == "progress" and _waiting_seq(e) is None
            if quiet and (_pg(e) == hang.pg or (_pg(e) is None and hang.pg == "0")):
                mine.setdefault(rank, []).append(e)
    members = set(job.members.get(hang.pg, set())) | set(mine)
    if hang.pg == "0" and world:
        members |= set(range(world)) | set(job.ranks)
    return [_state(job.ranks.get(r), r, hang, mine.get(r, [])) for r in sorted(members)]


def _state(log: RankLog | None, rank: int, hang: Hang, mine: list[LineEvent]) -> RankState:
    host = log.host if log else None
    if log is None or (log.lines == 0 and all(e.kind == "elastic_rank" for e in log.events)):
        return RankState(rank, host, "silent", "no log line from this rank")
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
        if last.seq is not None and last.seq < hang.seq and hang.named:
            return RankState(rank, host, "behind", f"timed out on older SeqNum {last.seq} (others wait on {hang.seq})")
        if last.seq is not None and last.seq < hang.seq:
            # Releases that name no group report every pending work and may mix groups: no evidence.
            return RankState(
                rank, host, "timed_out", f"timed out on SeqNum {last.seq} (others on {hang.seq}; group not printed)"
            )
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
        return RankState(
            rank, host, "stuck", "its watchdog got stuck or its heartbeat monitor fired, and it reported no timeout"
        )
    return RankState(rank, host, "no_timeout", f"{log.lines} log line(s) but no timeout for SeqNum {hang.seq}")


def decide(states: list[RankState], hang: Hang, world_source: str) -> tuple[tuple[int, ...], float, Level, str]:
    """Culprit ranks, confidence, its level and why, from the states of one hung group."""
    waiters = sum(s.reason in ("timed_out", "waiting") for s in states)
    strong = tuple(s.rank for s in states if s.reason in STRONG)
    medium = tuple(s.rank for s in states if s.reason in MEDIUM)
    weak = tuple(s.rank for s in states if s.reason in WEAK)
    where = f"SeqNum {hang.seq}" + ("" if hang.named else " (group not printed: grouped by SeqNum)")
    if strong:
        level: Level = "high" if hang.named else "medium"
        first = next(s for s in states if s.reason in STRONG)
        why = f"rank(s) {_list(strong)} reported it themselves (rank {first.rank}: {first.detail})"
        return strong, CONFIDENCE[level], level, why
    if medium and len(medium) < waiters:
        why = f"rank(s) {_list(medium)} logged lines but no timeout on {where} while {waiters} rank(s) wait on it"
        return medium, CONFIDENCE["medium"], "medium", why
    guess = tuple(sorted(medium + (weak if len(weak) < waiters else ())))
    if guess:
        culprits = guess
        why = (
            f"a guess: rank(s) {_list(culprits)} left no timeout in these logs while {waiters} rank(s) wait on "
            f"{where}; a log that was not collected, or was cut from a paste, looks the same"
        )
        confidence = INFERRED_WORLD if world_source.startswith("rank-named") else CONFIDENCE["low"]
        return culprits, confidence, "low", why
    if weak and len(weak) >= waiters:
        why = (
            f"{len(weak)} of {len(states)} rank(s) left no timeout in these logs and only {waiters} wait on "
            f"{where}: too little is known to name a culprit"
        )
    else:
        why = (
            f"only waiting ranks are visible: all {waiters} wait on {where}; the rank that did not arrive left no trace"
        )
    return (), CONFIDENCE["none"], "none", why


def _list(ranks: tuple[int, ...]) -> str:
    return ", ".join(map(str, ranks[:12])) + (f" and {len(ranks) - 12} more" if len(ranks) > 12 else "")
