"""Cluster-wide problems: when the whole group moves, peers cannot see it, the group's own past can.

Only where a shared move is a real fault, not the workload: NFS latency on every client at once
is the storage server (or its network), while checkpoints and restarts move utilisation and
traffic, which are left to the policy to set aside. The group median of each NFS latency family is
compared with its own median over the previous hours; a benign storage slowdown (a few times
slower) scores nothing, an order of magnitude does.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import numpy as np

from peerwatch.catalog.schema import Unit
from peerwatch.detect.context import IDENTITY_LABELS, Context, IntArray, Series
from peerwatch.detect.groups import MAIN
from peerwatch.model import Evidence, Finding, FloatArray

# Round-trip time only: queue time is the client's own (checkpoints queue heavily on every client
# at once, GUIDE 7), and request time includes it.


@dataclass(frozen=True)
class ClusterSettings:
    baseline: int = 240  # steps of the group's own past that define normal
    delay: int = 20  # [steps] recent steps left out of it
    min_baseline: int = 20  # [steps] fewer past steps: no judgement
    free_ratio: float = 4.0  # slower than usual by up to this factor scores nothing


@dataclass(frozen=True)
class RowMatch:
    """The row of another series with the same key as each row of a series (-1: none). Rows are only
    ever appended, so it holds while both series keep their number of rows (``against``)."""

    against: tuple[int, str, int]  # our rows, their frame, their rows
    rows: IntArray


def match_rows(
    ours: Series, theirs: Series, key: Callable[[Series, int], Hashable], known: RowMatch | None
) -> RowMatch:
    """``known`` if it still holds, else the rows matched anew (a loop over rows: only when rows appear)."""
    against = (ours.values.shape[0], theirs.frame.name, theirs.values.shape[0])
    if known is not None and known.against == against:
        return known
    index = {key(theirs, r): r for r in range(against[2])}
    return RowMatch(against, np.array([index.get(key(ours, r), -1) for r in range(against[0])], dtype=np.int64))


@dataclass
class ClusterState:
    """Each NFS round-trip group's median over the last ``baseline + delay`` steps (NaN before the run),
    by (frame, peer key); each round-trip frame's rows in the request frame, by frame."""

    medians: dict[tuple[str, int], FloatArray] = field(default_factory=dict)
    requests: dict[str, RowMatch] = field(default_factory=dict)


def _lagged_median(m: FloatArray, window: int, delay: int, minimum: int, first: int) -> FloatArray:
    """At each step of ``m`` from ``first`` on, the median of its ``window`` steps ending ``delay`` before it."""
    out = np.full(m.size - first, np.nan)
    for t in range(first, m.size):
        hi = t - delay
        past = m[max(0, hi - window) : max(0, hi)]
        past = past[~np.isnan(past)]
        if past.size >= minimum:
            out[t - first] = np.median(past)
    return out


def _labels(s: Series, r: int) -> Hashable:
    return s.frame.keys[r].labels


def per_request(time_rate: Series, requests: Series, rows: IntArray) -> FloatArray:
    """Seconds per operation: a time counter's rate over the request counter's rate of the same series
    (``rows``: each time series' row in ``requests``).

    Rates of time counters grow with the load (a checkpoint's burst of WRITEs) even when every
    operation is as fast as ever; the time per request does not.
    """
    req = np.where(rows[:, None] >= 0, requests.values[np.maximum(rows, 0)], np.nan)
    with np.errstate(all="ignore"):
        out: FloatArray = np.where(req > 0, time_rate.values / req, np.nan)
    return out


class ClusterDetector:
    name = "cluster"

    def __init__(self, settings: ClusterSettings | None = None) -> None:
        self.settings = settings or ClusterSettings()

    def scan(self, ctx: Context, state: ClusterState | None) -> tuple[list[Finding], ClusterState]:
        state = state or ClusterState()
        new = ClusterState(dict(state.medians), dict(state.requests))
        out: list[Finding] = []
        by_name = ctx.by_name()
        requests = ctx.roles.first("nfs_requests", by_name)
        for s in ctx.roles.present("nfs_response_time", by_name):
            # No request counts, no latency: only before they first appear (frames never vanish), which
            # the NaN medians a group starts with stand for.
            if s.family.unit is Unit.nfs_mount and requests is not None:
                match = new.requests[s.frame.name] = match_rows(s, requests, _labels, state.requests.get(s.frame.name))
                out.extend(self._series(ctx, s, per_request(s, requests, match.rows), new.medians))
        return out, new

    def _series(
        self, ctx: Context, s: Series, latency: FloatArray, medians: dict[tuple[str, int], FloatArray]
    ) -> list[Finding]:
        """Findings of one round-trip frame; ``medians`` (each group's recent medians) is brought up to date."""
        st = self.settings
        span = st.baseline + st.delay
        main = np.where(s.node_index[:, None] >= 0, ctx.groups[np.maximum(s.node_index, 0)] == MAIN, False)
        out = []
        for key in np.unique(s.peer_key[s.peer_key >= 0]):
            rows = np.flatnonzero(s.peer_key == key)
            x = np.where(main[rows], latency[rows], np.nan)
            if x.shape[0] < 4:
                continue
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # steps where no client is in the group
                m = np.nanmedian(x, axis=0)
            past = np.concatenate([medians.get((s.frame.name, int(key)), np.full(span, np.nan)), m])
            medians[(s.frame.name, int(key))] = past[past.size - span :].copy()
            base = _lagged_median(past, st.baseline, st.delay, st.min_baseline, span)
            ratio = m / np.where(base > 0, base, np.nan)
            score = 3.0 * (np.log2(np.fmax(ratio, 1e-9)) - np.log2(st.free_ratio))
            labels = tuple((k, v) for k, v in s.frame.keys[rows[0]].labels if k not in IDENTITY_LABELS)
            component = s.components[rows[0]]
            for c in np.flatnonzero(np.nan_to_num(score) >= 4.0):
                note = f"every client's NFS round trip {m[c]:.3g} s per op, {ratio[c]:.0f}x its usual {base[c]:.3g} s"
                out.append(
                    Finding(
                        ts=float(ctx.timestamps[c]),
                        node="cluster",
                        component=component,
                        detector=self.name,
                        signal=s.frame.name,
                        score=float(score[c]),
                        evidence=Evidence(s.frame.name, labels, float(m[c]), float(base[c]), None, note),
                        hint="nfs_storage",
                    )
                )
        return out
