"""The hang verdict with its evidence: culprits, hosts, NCCL warnings, errors, other groups."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

from peerwatch.model import ProblemLog
from peerwatch.training.nccl import (
    CONFIDENCE,
    Hang,
    HangVerdict,
    Level,
    RankState,
    decide,
    find_hangs,
    group_label,
    rank_states,
    world_size,
)
from peerwatch.training.nccl_logs import JobLogs, read_logs

MAX_LISTED = 16  # culprit sentences before "... and N more"
# The remote end NCCL names: "peer 10.0.2.17<50123>", "peer gpu071", "remoteGid ::ffff:10.0.2.17".
_PEER = re.compile(r"\b(?:peer|remoteGids?)\s*:*(?:ffff:)?([A-Za-z0-9][\w.-]*?)(?:<\d+>)?(?=[\s,;)]|$)")


REPORT_ORDER = ("desync", "flight_recorder", "ras_missing", "ras_mismatch")  # most direct first


def find_culprits(paths: Path | list[Path], problems: ProblemLog, world: int | None = None) -> HangVerdict:
    """Read log files or folders and name the ranks and hosts the hang waited on (LogDirError if unusable)."""
    return analyze(read_logs([paths] if isinstance(paths, Path) else list(paths), problems), world)


def analyze(job: JobLogs, world: int | None = None) -> HangVerdict:
    """Verdict for already-read logs; ``world`` overrides the world size found in them."""
    size, source = world_size(job, world)
    hangs = find_hangs(job)
    world_note = (
        f"world size {size} (from {source})"
        if size
        else "world size unknown: ranks that logged nothing cannot be named (give --world-size)"
    )
    context = _context(job)
    named, ahead, quotes = _named(job)
    ahead_notes = [
        f"NCCL RAS: rank(s) {', '.join(map(str, r.ahead))} launched more {r.op or ''} operations than the other "
        f"{r.behind_unnamed} rank(s), which are behind but not listed: the listed ranks are no culprits"
        for r in job.reports
        if r.ahead
    ]
    if not hangs and not named:
        stuck = context["watchdog"]
        unmatched = sorted(r for r, log in job.ranks.items() if any(e.kind == "timeout" for e in log.events))
        if unmatched:
            reason = (
                f"rank(s) {', '.join(map(str, unmatched))} reported a timeout without a SeqNum (PyTorch 1.x), "
                "which cannot be matched across ranks: no culprit can be named"
            )
        elif stuck:
            reason = (
                f"no timeout or pending work reported; the watchdog got stuck or the heartbeat monitor fired on "
                f"rank(s) {', '.join(str(r) for r, _, _ in stuck)}: a CUDA/NCCL call blocked the watchdog itself, "
                "which names no culprit"
            )
        else:
            reason = "no NCCL watchdog timeout, pending work or culprit report found"
        evidence = [f"{reason} in {job.files} file(s)", *ahead_notes, *_flags(job, ()), world_note]
        return HangVerdict((), (), None, 0.0, tuple(evidence), (), size, source, "none", reason, **context)
    kind: Level
    hang = hangs[0] if hangs else None
    states = rank_states(job, hang, size) if hang else []
    if named:
        culprits, confidence, kind = named, CONFIDENCE["certain"], "certain"
        reason = "the log names them: " + " | ".join(quotes)[:400]
    elif hang:
        culprits, confidence, kind, reason = decide(states, hang, source)
    else:
        culprits, confidence, kind, reason = (), 0.0, "none", "; ".join(ahead_notes)
    culprits = tuple(r for r in culprits if r not in ahead)
    by_rank = {s.rank: s for s in states}
    hosts = tuple(sorted({h for r in culprits if (h := _host(job, by_rank, r))}))
    evidence = [_summary(hang, states)] if hang else []
    evidence += [f"named by the log: {q}" for q in quotes]
    listed = [by_rank[r] for r in culprits if r in by_rank]
    evidence += [f"rank {s.rank} ({s.host or 'host unknown'}): {s.detail}" for s in listed[:MAX_LISTED]]
    if len(listed) > MAX_LISTED:
        evidence.append(f"... and {len(listed) - MAX_LISTED} more culprit rank(s)")
    if kind == "none" and hang and all(s.reason in ("timed_out", "waiting") for s in states):
        evidence.append(
            "every rank in these logs reached the collective: none is behind; suspect the network or NCCL itself "
            "(see the NCCL warnings) or a collective that differs between ranks"
        )
    elif kind in ("medium", "low"):
        evidence.append(
            "culprits inferred from missing reports (a rank that hangs outside NCCL logs no timeout); "
            "a log that was not collected looks the same"
        )
    if hang and len(hang.ops) > 1 and hang.op is None:
        evidence.append(f"the ranks disagree on the collective at SeqNum {hang.seq}: {', '.join(hang.ops)}")
    evidence += ahead_notes
    evidence += _host_notes(states, culprits)
    evidence += _flags(job, culprits)
    evidence += _warnings(job)
    evidence.append(world_note)
    evidence += [
        f"also {group_label(h)}{_desc(h)}: {h.reporters} rank(s) wait on SeqNum {h.seq} ({h.op or 'op unknown'})"
        for h in hangs[1:]
    ]
    if job.unattributed:
        evidence.append(f"{len(job.unattributed)} event line(s) could not be tied to a rank")
    context["named_by_log"] = tuple(quotes)
    return HangVerdict(
        culprits, hosts, hang, confidence, tuple(evidence), tuple(states), size, source, kind, reason, **context
    )


def _host(job: JobLogs, by_rank: dict[int, RankState], rank: int) -> str | None:
    if rank in by_rank and by_rank[rank].host:
        return by_rank[rank].host
    log = job.ranks.get(rank)
    return log.host if log else None


def _named(job: JobLogs) -> tuple[tuple[int, ...], frozenset[int], list[str]]:
    """Culprits that the most direct kind of report present names, ranks named as ahead, and the quotes."""
    ahead = frozenset(r for rep in job.reports for r in rep.ahead)
    for kind in REPORT_ORDER:
        reports = [r for r in job.reports if r.kind == kind and r.culprits]
        if reports:
            ranks = tuple(sorted({c for r in reports for c in r.culprits}))
            return ranks, ahead, [f"{r.kind.replace('_', ' ')} (line {r.lineno}): {r.text}" for r in reports[:4]]
    return (), ahead, []


def _context(job: JobLogs) -> dict[str, Any]:
    """Ranks that reported, stuck watchdogs, and every rank's host."""
    said = ("timeout", "progress", "watchdog_stuck")
    reporting = sorted(r for r, log in job.ranks.items() if any(e.kind in said for e in log.events))
    watchdog = []
    for r in sorted(job.ranks):
        first = next((e for e in job.ranks[r].events if e.kind == "watchdog_stuck"), None)
        if first is not None:
            watchdog.append((r, job.ranks[r].host, first.text[:200]))
    hosts = tuple((r, h) for r in sorted(job.ranks) if (h := job.ranks[r].host))
    return {"reporting": tuple(reporting), "watchdog": tuple(watchdog), "hosts": hosts}


def _desc(h: Hang) -> str:
    return f" ({h.desc})" if h.desc else ""


def _summary(h: Hang, states: list[RankState]) -> str:
    waiting = sum(s.reason in ("timed_out", "waiting") for s in states)
    timeout = f", timeout {h.timeout_ms} ms" if h.timeout_ms else ""
    op = h.op or "op unknown"
    return f"{group_label(h)}{_desc(h)}: {waiting} of {len(states)} rank(s) wait on SeqNum {h.seq} ({op}{timeout})"


def _host_notes(states: list[RankState], culprits: tuple[int, ...]) -> list[str]:
    """Hosts whose every rank is a culprit; and where culprits without a host would sit."""
    ranks_of: dict[str, list[int]] = {}
    for s in states:
        if s.host:
            ranks_of.setdefault(s.host, []).append(s.rank)
    notes = [
        f"all {len(ranks)} rank(s) on {host} are culprits: suspect the host itself"
        for host, ranks in sorted(ranks_of.items())
        if len(ranks) > 1 and set(ranks) <= set(culprits)
    ]
    homeless = [r for r in culprits if not any(r in ranks for ranks in ranks_of.values())]
    sizes = Counter(len(r) for r in ranks_of.values())
    if homeless and sizes:
        per_host = sizes.most_common(1)[0][0]
        # Launchers give each host a contiguous block of ranks; if every known host does, say which block.
        blocks = all(
            min(r) % per_host == 0 and sorted(r) == list(range(min(r), min(r) + per_host)) for r in ranks_of.values()
        )
        if blocks and per_host > 1:
            for first in sorted({r - r % per_host for r in homeless}):
                notes.append(
                    f"ranks {first}-{first + per_host - 1} would be one host ({per_host} ranks per host) "
                    "that left no log: find it in the job's host list"
                )
    return notes


def _flags(job: JobLogs, culprits: tuple[int, ...]) -> list[str]:
    """Errors, stuck watchdogs and GIL warnings, culprits first, a few lines only."""
    out: list[str] = []
    for rank in sorted(job.ranks, key=lambda r: (r not in culprits, r)):
        for e in job.ranks[rank].events:
            if e.kind in ("error", "watchdog_stuck", "gil"):
                out.append(f"rank {rank} logged ({e.kind}): {e.text[:200]}")
                break
        if len(out) >= 5:
            break
    return out


def _warnings(job: JobLogs) -> list[str]:
    warns = [(r, e) for r, log in job.ranks.items() for e in log.events if e.kind == "nccl_warn"]
    warns += [(-1, e) for _, e in job.unattributed if e.kind == "nccl_warn"]
    if not warns:
        return []
    peers: Counter[str] = Counter()
    for _, e in warns:
        peers.update(set(_PEER.findall(e.text)))  # once per line
    ranks = {r for r, _ in warns if r >= 0}
    text = f"{len(warns)} NCCL WARN line(s) from {len(ranks)} rank(s), first: {warns[0][1].text[:160]!r}"
    if peers:
        text += "; peers named: " + ", ".join(f"{p} ({n}x)" for p, n in peers.most_common(3))
    return [text]
