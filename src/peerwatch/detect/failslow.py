"""Fail-slow: a node whose every GPU runs a few per cent below its peers, steadily, with no error.

Each GPU's shift alone is within the peer detector's floors, and the peer detector learns a
persistent shift into its usual offset within the hour. Here the shift is pooled and accumulated:

- per family (utilisation, SM/GR engine activity, power, SM clock, IB port throughput) a node's
  pooled offset is the median of its series' relative offsets from their peers on the other main-job
  nodes (node_offsets.py);
- each node's usual pooled offset is learnt from its own past, slowly (an EWMA of two hours), and
  not at all while its CUSUM is raised, so a fault is not learnt away; a node is judged once
  20 minutes of its offsets are known (a spare that joined the job);
- the node's shift from its usual offset, less the group's typical shift, over the spread of the
  other nodes' shifts (robust, with a floor), clipped per family and averaged over the families
  known: in the bad direction (less work) it feeds a one-sided CUSUM with an allowance;
- held (nothing learnt, nothing added) while the main job is in a shared move (a family's group
  level off its working level: checkpoints, evaluations, restarts, stalls) and for 5 minutes after
  (rank 0 lingers in a checkpoint, nodes return from a restart one by one); a node off by a quarter
  or more on any family is in another phase or failed outright (others' business) and skipped;
  only settled main-job nodes in a group of 4 or more are judged.

Score 6 at the alarm level of the CUSUM, capped at 12 (a suspicion, never sure). The hint names the
cause: ``thermal_throttle`` when the node's SM clocks are down and thermal throttle reasons,
thermal violation time or a hotter node say so, ``power_throttle`` for power-brake reasons or
power violation time with clocks down, else ``performance_degradation``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from peerwatch.detect.context import Context, IntArray
from peerwatch.detect.groups import MAIN, rolling_median, settled
from peerwatch.detect.node_offsets import group_level, node_share, pooled
from peerwatch.detect.peer import column_quantile
from peerwatch.detect.states import POWER_BITS, THERMAL_BITS
from peerwatch.detect.stream import grow, keep_tail, with_tail
from peerwatch.model import BoolArray, Evidence, Finding, FloatArray

# (name in evidence, catalogue role (catalog/roles.toml)); the CUSUM reads every family of these
# roles the data has, in this order.
ROLES: tuple[tuple[str, str], ...] = (
    ("utilisation", "gpu_utilization"),
    ("SM activity", "sm_activity"),
    ("power", "gpu_power"),
    ("SM clock", "sm_clock"),
    ("IB throughput", "ib_throughput"),
)
CLOCK = 3  # index of the SM clock in ROLES
TEMPERATURE = "gpu_temperature"  # role: evidence only, in degrees
VIOLATIONS = ("thermal_violation", "power_violation")  # roles: time throttled, in REASON_BITS' order
REASON_BITS = (THERMAL_BITS, POWER_BITS)


@dataclass(frozen=True)
class FailSlowSettings:
    min_nodes: int = 4  # main-job nodes known at a step for a comparison (8 GPUs of one node are not peers)
    min_roles: int = 2  # families known for a node at a step before it is judged
    # Least spread of the nodes' offsets per role, as a share: a clock is steadier than utilisation.
    spread_floors: Mapping[str, float] = field(default_factory=lambda: {"sm_clock": 0.01})
    spread_floor: float = 0.02  # the same for roles `spread_floors` does not list
    far: float = 0.25  # off by this share on any family: another phase or an outright failure, not fail-slow
    smooth_s: float = 120.0  # time constant of the EWMA of a node's shifts before they are compared
    z_clip: float = 4.0  # per family, in spreads: no one family carries a node alone
    allowance: float = 1.0  # CUSUM k (spreads per 30 s): what healthy noise and slow drifts stay under
    alarm: float = 24.0  # CUSUM at which the score reaches the policy's 6
    cusum_cap: float = 48.0  # so that it falls back within about half an hour once the shift ends
    freeze: float = 8.0  # CUSUM above which a node's usual offset is not learnt
    learn_s: float = 7200.0  # time constant of a node's usual offset
    learn_min_s: float = 1200.0  # known offsets needed before a node is judged
    settle_s: float = 300.0  # after a node changed workload group, before it is compared
    move: float = 0.1  # a family's group level this far off its working level: a shared move
    level_s: float = 1800.0  # the working level: median of the group level over this long
    after_s: float = 180.0  # held this long after a shared move
    reason_s: float = 600.0  # throttle reasons counted over this long
    reason_share: float = 0.1  # of the node's GPU-steps with a reason, beyond the group's usual share
    clock_drop: float = 0.02  # the node's SM clocks this far under their usual offset
    hot: float = 3.0  # [°C] above the node's usual offset
    report: float = 4.0  # scores below are not findings
    cap: float = 12.0  # a suspicion, never the policy's sure 15


def _steps(seconds: float, step: float) -> int:
    return max(1, round(seconds / step))


@dataclass
class FailSlowState:
    """The run so far: groups over the settle look-back, per node its usual offset per family (the
    CUSUM's, then temperature) and how many steps taught it, its CUSUM and last judged shifts; steps
    since the last shared move; each family's group level and the throttle-reason excesses over their look-backs."""

    steps: int = 0
    groups: IntArray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))
    usual: FloatArray = field(default_factory=lambda: np.zeros((0, len(ROLES) + 1)))
    taught: FloatArray = field(default_factory=lambda: np.zeros((0, len(ROLES) + 1)))
    cusum: FloatArray = field(default_factory=lambda: np.zeros(0))
    last: FloatArray = field(default_factory=lambda: np.zeros((0, len(ROLES) + 2)))  # last judged shifts and z
    smooth: FloatArray = field(default_factory=lambda: np.zeros((0, len(ROLES))))  # EWMA of the shifts
    since_move: int = 10**9
    levels: dict[str, FloatArray] = field(default_factory=dict)
    reasons: FloatArray = field(default_factory=lambda: np.zeros((2, 0, 0)))


class FailSlowDetector:
    """A node shifted against its peers by a few per cent on all its GPUs, accumulated over time."""

    name = "failslow"

    def __init__(self, settings: FailSlowSettings | None = None) -> None:
        self.settings = settings or FailSlowSettings()

    def scan(self, ctx: Context, state: FailSlowState | None) -> tuple[list[Finding], FailSlowState]:
        st, n = self.settings, len(ctx.nodes)
        state = state or FailSlowState()
        groups = with_tail(state.groups, ctx.groups, MAIN)  # a node not seen before was MAIN, as in peer.py
        lead = groups.shape[1] - ctx.steps
        cand = settled(groups, _steps(st.settle_s, ctx.step))[:, lead:] == MAIN
        cand &= cand.sum(axis=0) >= st.min_nodes
        by_name = ctx.by_name()
        roles = [pooled(by_name, ctx.roles.families(role), cand, st.min_nodes) for _, role in ROLES]
        off = np.stack([np.full((n, ctx.steps), np.nan) if r is None else r for r in roles])  # (R, N, T)
        temp = pooled(by_name, ctx.roles.families(TEMPERATURE), cand, st.min_nodes, relative=False)
        temp = np.full((n, ctx.steps), np.nan) if temp is None else temp
        moving = self._moving(ctx, state, cand)
        far = np.any(np.abs(np.nan_to_num(off)) >= st.far, axis=0)
        excess = self._reasons(ctx, state, cand)
        found, out = self._run(ctx, state, off, temp, cand & ~far, cand, moving)
        findings = self._findings(ctx, found, out, excess)
        state.groups = keep_tail(groups, _steps(st.settle_s, ctx.step))
        state.steps += ctx.steps
        return findings, state

    def _moving(self, ctx: Context, state: FailSlowState, cand: BoolArray) -> BoolArray:
        """(steps,): the main job is in a shared move: a family's group level off its working level, or
        too few nodes to compare."""
        st = self.settings
        window = _steps(st.level_s, ctx.step)
        moving: BoolArray = cand.sum(axis=0) < st.min_nodes
        by_name = ctx.by_name()
        for _, role in ROLES:
            for name in ctx.roles.families(role):
                if name not in by_name:
                    continue
                level = group_level(by_name[name], cand)[None, :]
                full = with_tail(state.levels.get(name), level, np.nan)
                state.levels[name] = keep_tail(full, window - 1)
                working = rolling_median(full, window)[0, full.shape[1] - ctx.steps :]
                with np.errstate(all="ignore"):
                    moving |= np.abs(level[0] / working - 1.0) > st.move
        return moving

    def _reasons(self, ctx: Context, state: FailSlowState, cand: BoolArray) -> FloatArray:
        """(2, nodes, steps): thermal and power throttle evidence per node: the share of its GPUs with
        the reason (bits or violation time), beyond the group's median share, averaged over a window."""
        st, n = self.settings, len(ctx.nodes)
        by_name = ctx.by_name()
        now = np.full((2, n, ctx.steps), np.nan)
        for i in range(2):
            shares = []
            for s in ctx.roles.present("throttle_reasons", by_name):
                bits = np.nan_to_num(s.values, nan=0.0).astype(np.int64)
                shares.append(node_share(s, (bits & REASON_BITS[i]) != 0, n))
            for s in ctx.roles.present(VIOLATIONS[i], by_name):
                shares.append(node_share(s, np.nan_to_num(s.values, nan=0.0) > 0, n))
            if shares:
                share = np.fmax.reduce(np.stack(shares))
                typical = column_quantile(np.where(cand, share, np.nan), 0.5)
                now[i] = np.fmax(share - np.nan_to_num(typical), 0.0)
        window = _steps(st.reason_s, ctx.step)
        past = state.reasons
        full = np.concatenate([grow(past.transpose(1, 0, 2), n, np.nan).transpose(1, 0, 2), now], axis=2)
        state.reasons = full[:, :, max(0, full.shape[2] - window + 1) :].copy()
        known = np.cumsum(np.concatenate([np.zeros((2, n, 1)), ~np.isnan(full)], axis=2), axis=2)
        total = np.cumsum(np.concatenate([np.zeros((2, n, 1)), np.nan_to_num(full)], axis=2), axis=2)
        end = np.arange(full.shape[2] - ctx.steps, full.shape[2]) + 1
        start = np.maximum(end - window, 0)
        cnt = known[:, :, end] - known[:, :, start]
        with np.errstate(all="ignore"):
            mean: FloatArray = np.where(cnt > 0, (total[:, :, end] - total[:, :, start]) / np.maximum(cnt, 1), 0.0)
        return mean

    def _run(
        self,
        ctx: Context,
        state: FailSlowState,
        off: FloatArray,
        temp: FloatArray,
        usable: BoolArray,
        cand: BoolArray,
        moving: BoolArray,
    ) -> tuple[FloatArray, FloatArray]:
        """The CUSUM step by step (it is recursive), vectorised over nodes and families. Returns the
        CUSUM (nodes, steps) and, per step, each node's shift from its usual offset per family then
        temperature, and its combined z (R + 2, nodes, steps), as of its last judged step."""
        st, n, r = self.settings, len(ctx.nodes), len(ROLES)
        w = ctx.step / 30.0
        learn_min = st.learn_min_s / ctx.step
        alpha = min(1.0, ctx.step / st.learn_s)
        after = _steps(st.after_s, ctx.step)
        floors = np.array([st.spread_floors.get(role, st.spread_floor) for _, role in ROLES])
        usual, taught = grow(state.usual, n, 0.0), grow(state.taught, n, 0.0)
        cusum, last = grow(state.cusum, n, 0.0), grow(state.last, n, np.nan)
        smooth = grow(state.smooth, n, np.nan)
        beta = min(1.0, ctx.step / st.smooth_s)
        since = state.since_move
        trace = np.full((ctx.steps, n), np.nan)
        shifts = np.full((r + 2, n, ctx.steps), np.nan)
        for t in range(ctx.steps):
            since = 0 if moving[t] else since + 1
            ok = usable[:, t] & (since > after)
            x = np.concatenate([off[:, :, t], temp[None, :, t]]).T  # (N, R + 1)
            x = np.where(ok[:, None], x, np.nan)
            d = np.where(taught >= learn_min, x - usual, np.nan)
            # Smoothed over a few minutes: a node's scrape phase against the training-step rhythm moves
            # single steps a lot; the spread is then that of the smoothed shifts.
            smooth = np.where(cand[:, None, t], smooth, np.nan)
            smooth = np.where(
                np.isnan(d[:, :r]), smooth, np.where(np.isnan(smooth), d[:, :r], smooth + beta * (d[:, :r] - smooth))
            )
            dr = np.where(np.isnan(d[:, :r]), np.nan, smooth)
            med = column_quantile(dr, 0.5)
            spread = np.fmax(1.4826 * column_quantile(np.abs(dr - med), 0.5), floors)
            z = np.clip((dr - med) / spread, -st.z_clip, st.z_clip)
            z[:, np.sum(~np.isnan(dr), axis=0) < st.min_nodes] = np.nan
            roles = np.sum(~np.isnan(z), axis=1)
            with np.errstate(all="ignore"):
                zn = np.where(roles >= st.min_roles, np.nansum(z, axis=1) / np.maximum(roles, 1), np.nan)
            step = np.clip(cusum + w * (-zn - st.allowance), 0.0, st.cusum_cap)
            cusum = np.where(np.isnan(zn), cusum, step)
            cusum = np.where(cand[:, t], cusum, 0.0)  # a node out of the job is no one's straggler
            learn = ~np.isnan(x) & (cusum < st.freeze)[:, None]
            taught = taught + learn
            rate = np.where(learn, np.fmax(1.0 / np.maximum(taught, 1.0), alpha), 0.0)
            usual = usual + rate * np.nan_to_num(x - usual)
            # Held steps (a checkpoint) keep the evidence of the last judged one.
            last = np.where(np.isnan(zn)[:, None], last, np.concatenate([d, zn[:, None]], axis=1))
            trace[t] = cusum
            shifts[:, :, t] = last.T
        state.usual, state.taught, state.cusum, state.last, state.since_move = usual, taught, cusum, last, since
        state.smooth = smooth
        return trace.T, shifts

    def _findings(self, ctx: Context, cusum: FloatArray, shifts: FloatArray, excess: FloatArray) -> list[Finding]:
        st, r = self.settings, len(ROLES)
        score = np.minimum(st.cap, 6.0 * cusum / st.alarm)
        out = []
        times = ctx.timestamps
        for i, t in zip(*np.nonzero(score >= st.report), strict=True):
            d = shifts[:, i, t]
            clock_down = bool(d[CLOCK] <= -st.clock_drop)
            hot = bool(d[r] >= st.hot)
            if clock_down and (excess[0, i, t] >= st.reason_share or hot):
                hint = "thermal_throttle"
            elif clock_down and excess[1, i, t] >= st.reason_share:
                hint = "power_throttle"
            else:
                hint = "performance_degradation"
            parts = [f"{name} {100 * v:+.1f}%" for (name, _), v in zip(ROLES, d[:r], strict=True) if v == v]
            if d[r] == d[r]:
                parts.append(f"temperature {d[r]:+.1f} C")
            mean = float(np.nanmean(d[:r])) if np.any(~np.isnan(d[:r])) else float("nan")
            note = (
                f"node vs peers, from its usual offset: {', '.join(parts)}; "
                f"thermal reasons {excess[0, i, t]:.0%}, power reasons {excess[1, i, t]:.0%} of GPU-steps; "
                f"CUSUM {cusum[i, t]:.0f} (alarm {st.alarm:g})"
            )
            out.append(
                Finding(
                    ts=float(times[t]),
                    node=ctx.nodes[i],
                    component="node",
                    detector=self.name,
                    signal="failslow",
                    score=float(score[i, t]),
                    evidence=Evidence("failslow", (("node", ctx.nodes[i]),), mean, 0.0, float(d[r + 1]), note),
                    hint=hint,
                )
            )
        return out
