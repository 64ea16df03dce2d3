"""Cluster-wide problems: when the whole group moves, peers cannot see it, the group's own past can.

Only where a shared move is a real fault, not the workload: NFS latency on every client at once
is the storage server (or its network), while checkpoints and restarts move utilisation and
traffic, which are left to the policy to set aside. The group median of each NFS latency family is
compared with its own median over the previous hours; a benign storage slowdown (a few times
slower) scores nothing, an order of magnitude does.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass

import numpy as np

from peerwatch.catalog.schema import Unit
from peerwatch.detect.context import IDENTITY_LABELS, Context, Series
from peerwatch.detect.groups import MAIN
from peerwatch.model import Evidence, Finding, FloatArray

# Round-trip time only: queue time is the client's own (checkpoints queue heavily on every client
# at once, GUIDE 7), and request time includes it.
NFS_RTT = re.compile(r"^node_mountstats_nfs_operations_response_time_seconds_total$")


@dataclass(frozen=True)
class ClusterSettings:
    baseline: int = 240  # steps of the group's own past that define normal
    delay: int = 20  # recent steps left out of it
    min_baseline: int = 20  # fewer past steps: no judgement
    free_ratio: float = 4.0  # slower than usual by up to this factor scores nothing


def _lagged_median(m: FloatArray, window: int, delay: int, minimum: int) -> FloatArray:
    out = np.full(m.shape, np.nan)
    for t in range(m.size):
        hi = t - delay
        past = m[max(0, hi - window) : max(0, hi)]
        past = past[~np.isnan(past)]
        if past.size >= minimum:
            out[t] = np.median(past)
    return out


NFS_REQUESTS = "node_mountstats_nfs_operations_requests_total"


def per_request(time_rate: Series, requests: Series) -> FloatArray:
    """Seconds per operation: a time counter's rate over the request counter's rate of the same series.

    Rates of time counters grow with the load (a checkpoint's burst of WRITEs) even when every
    operation is as fast as ever; the time per request does not.
    """
    index = {key.labels: r for r, key in enumerate(requests.frame.keys)}
    rows = np.array([index.get(key.labels, -1) for key in time_rate.frame.keys])
    req = np.where(rows[:, None] >= 0, requests.values[np.maximum(rows, 0)], np.nan)
    with np.errstate(all="ignore"):
        out: FloatArray = np.where(req > 0, time_rate.values / req, np.nan)
    return out


class ClusterDetector:
    name = "cluster"

    def __init__(self, settings: ClusterSettings | None = None) -> None:
        self.settings = settings or ClusterSettings()

    def detect(self, ctx: Context) -> list[Finding]:
        out: list[Finding] = []
        by_name = ctx.by_name()
        requests = by_name.get(NFS_REQUESTS)
        for s in ctx.series:
            if s.family.unit is Unit.nfs_mount and NFS_RTT.match(s.frame.name) and requests is not None:
                out.extend(self._series(ctx, s, per_request(s, requests)))
        return out

    def _series(self, ctx: Context, s: Series, latency: FloatArray) -> list[Finding]:
        st = self.settings
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
            base = _lagged_median(m, st.baseline, st.delay, st.min_baseline)
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
