"""The host health agent's verdicts (``peerwatch_agent_check_status``) as findings.

A check's status is its current truth: a GPU the agent has called CRITICAL since before the data
began is still CRITICAL, so unlike an XID a status is reported whether or not it changed. OK and
UNKNOWN (the check could not look) are never findings. The diagnosis comes from a table by check
name (``decide/agent_checks.csv``), refined by the check's hint text (nvidia-smi, DCGM) and, for
Xids, by the XID meaning table.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

import numpy as np

from peerwatch.catalog.roles import Roles
from peerwatch.detect.context import Context, IntArray, Series
from peerwatch.detect.grouped import fold_into
from peerwatch.detect.stream import grow
from peerwatch.model import DIAGNOSES, BoolArray, Evidence, Finding, FloatArray
from peerwatch.xid_catalog import xid_meaning

STATUS = "peerwatch_agent_check_status"
INFO = "peerwatch_agent_check_info"
XID_LAST = "peerwatch_agent_xid_last"
STATUS_NAMES = {1: "UNHEALTHY", 2: "CRITICAL"}
FROM_XID = "xid"  # table value: the XID meaning table decides

_PCI = re.compile(r"^([0-9a-fA-F]{1,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")
_XID_IN_HINT = re.compile(r"\bxid\D{0,12}?(\d+)", re.IGNORECASE)
# agent component -> alarm component (GUIDE 3.1); PCI addresses are looked up first, then these
COMPONENTS = (
    (re.compile(r"^gpu/(\d+)$"), "gpu/{0}"),
    (re.compile(r"^nvswitch(/.*)?$"), "nvswitch"),
    (re.compile(r"^(nvme\d+)$"), "disk/{0}"),
    (re.compile(r"^([A-Za-z][\w.-]*:\d+)$"), "ib/{0}"),  # mlx5_0:1
)


@dataclass(frozen=True)
class AgentSettings:
    unhealthy: float = 8.0  # holds for a few steps before an incident opens
    critical: float = 16.0  # a sure finding: opens at once
    shared: float = 0.5  # UNHEALTHY on this share of the nodes reporting a check is their set-up, not a fault
    shared_min: int = 4  # ...judged only when this many nodes report the check


@dataclass(frozen=True, slots=True)
class CheckRule:
    check: str  # a check name, or "*"
    pattern: re.Pattern[str] | None  # searched in the hint text; None: any hint
    diagnosis: str  # a DIAGNOSES word, or FROM_XID


def parse_check_rules(text: str, where: str = "agent_checks.csv") -> tuple[CheckRule, ...]:
    """Rows of a check table (``check,hint_pattern,diagnosis,why``); a bad diagnosis or pattern is an error."""
    out = []
    for line, row in enumerate(csv.DictReader(io.StringIO(text)), 2):
        if row.get("diagnosis") not in DIAGNOSES and row.get("diagnosis") != FROM_XID:
            raise ValueError(f"{where}:{line}: unknown diagnosis {row.get('diagnosis')!r}")
        try:
            pattern = re.compile(row["hint_pattern"], re.IGNORECASE) if row["hint_pattern"] else None
        except re.error as exc:
            raise ValueError(f"{where}:{line}: bad hint_pattern {row['hint_pattern']!r}: {exc}") from None
        out.append(CheckRule(row["check"], pattern, str(row["diagnosis"])))
    return tuple(out)


@cache
def check_rules() -> tuple[CheckRule, ...]:
    """The rows of ``decide/agent_checks.csv`` in order (first match wins)."""
    return parse_check_rules(resources.files("peerwatch.decide").joinpath("agent_checks.csv").read_text("utf-8"))


def diagnosis_of(check: str, hint: str, last_xid: float | None = None) -> tuple[str, str]:
    """(diagnosis, note) of a non-OK verdict: the table's row for the check and hint text.

    A row that defers to the XID table takes the Xid the hint names (the agent quotes the worst
    first), else ``last_xid``; without either the next row decides.
    """
    for rule in check_rules():
        if rule.check not in (check, "*") or (rule.pattern is not None and not rule.pattern.search(hint)):
            continue
        if rule.diagnosis != FROM_XID:
            return rule.diagnosis, ""
        quoted = _XID_IN_HINT.search(hint)
        code = int(quoted.group(1)) if quoted else (int(last_xid) if last_xid is not None and last_xid > 0 else None)
        if code is None:
            continue
        meaning = xid_meaning(code)
        return meaning.diagnosis or "unknown", f"XID {code}: {meaning.text}"
    return "unknown", ""


def pci_address(text: str) -> str | None:
    """``dddd:bb:dd.f`` in lower case (dcgm-exporter writes ``00000000:3B:00.0``), or None."""
    m = _PCI.match(text)
    if m is None:
        return None
    return f"{int(m.group(1), 16):04x}:{m.group(2).lower()}:{m.group(3).lower()}.{m.group(4)}"


def alarm_component(component: str, node: str, gpus: Mapping[tuple[str, str], str]) -> str:
    """The agent's component label in the alarm vocabulary: ``gpu/3``, ``ib/mlx5_0:1``, ``disk/nvme0``, ``node``."""
    bus = pci_address(component)
    if bus is not None:
        index = gpus.get((node, bus))
        return f"gpu/{index}" if index else "node"  # a NIC or NVMe behind a PCI address: the node
    for pattern, template in COMPONENTS:
        m = pattern.match(component)
        if m:
            return template.format(m.group(1))
    return "node"


def _held(v: FloatArray, before: FloatArray) -> FloatArray:
    """Each row's last present value up to each step (``before``: its value before the first step)."""
    idx = np.maximum.accumulate(np.where(~np.isnan(v), np.arange(v.shape[1]), -1), axis=1)
    return np.where(idx >= 0, np.take_along_axis(v, np.maximum(idx, 0), axis=1), before[:, None])


def _last_index(present: BoolArray) -> IntArray:
    """Each row's last step where ``present`` holds (-1: none)."""
    last: IntArray = np.where(present.any(axis=1), present.shape[1] - 1 - np.argmax(present[:, ::-1], axis=1), -1)
    return last


def _ints() -> IntArray:
    return np.zeros(0, dtype=np.int64)


@dataclass
class RowIndex:
    """Labels of the rows met so far, read once per row: each status row's check (as a code), the
    check_info and xid_last rows by entity, and GPU indices by PCI address."""

    rows: dict[str, int] = field(default_factory=dict)  # frame -> rows read
    check_of: IntArray = field(default_factory=_ints)  # status row -> its check's code
    code: dict[str, int] = field(default_factory=dict)  # check -> code
    checks: list[str] = field(default_factory=list)  # code -> check
    info: dict[tuple[str, ...], list[int]] = field(default_factory=dict)  # (node, check, component) -> rows
    xids: dict[tuple[str, ...], list[int]] = field(default_factory=dict)  # (node, PCI address) -> rows
    gpus: dict[tuple[str, str], str] = field(default_factory=dict)  # (node, PCI address) -> GPU index

    def update(self, by_name: Mapping[str, Series], roles: Roles) -> None:
        indexed = roles.families("gpu_pci_address")  # join a GPU's PCI address to its index
        for name in dict.fromkeys((STATUS, INFO, *indexed, XID_LAST)):
            s = by_name.get(name)
            if s is None:
                continue
            new = range(self.rows.get(name, 0), len(s.frame.keys))
            self.rows[name] = len(s.frame.keys)
            if name == STATUS:
                codes = [self.code.setdefault(s.frame.keys[r].get("check") or "", len(self.code)) for r in new]
                self.check_of = np.concatenate([self.check_of, np.array(codes, dtype=np.int64)])
                self.checks = list(self.code)
            elif name == INFO:
                _by_entity(self.info, s, new, ("check", "component"))
            if name == XID_LAST:
                _by_entity(self.xids, s, new, ("pci_bus_id",), pci=True)
            if name in indexed:
                _gpu_index(self.gpus, s, new)


@dataclass
class AgentState:
    """Steps scanned, each check_info row's last step seen (-1: never; one int per row), each
    xid_last row's last value (one float per row), and the rows' labels (``RowIndex``)."""

    step: int = 0
    hint_seen: IntArray = field(default_factory=_ints)
    xid_held: FloatArray = field(default_factory=lambda: np.zeros(0))
    index: RowIndex = field(default_factory=RowIndex)


class AgentCheckDetector:
    """Scores the agent's UNHEALTHY and CRITICAL verdicts per node and component."""

    name = "agent"

    def __init__(self, settings: AgentSettings | None = None) -> None:
        self.settings = settings or AgentSettings()

    def scan(self, ctx: Context, state: AgentState | None) -> tuple[list[Finding], AgentState]:
        st = state or AgentState()
        by_name = ctx.by_name()
        st.index.update(by_name, ctx.roles)
        info, xid = by_name.get(INFO), by_name.get(XID_LAST)
        # A verdict's hint is the latest one seen so far, an Xid the last one reported: carried over.
        hint_seen = grow(st.hint_seen, len(info.frame.keys) if info else 0, -1)
        xid_held = grow(st.xid_held, len(xid.frame.keys) if xid else 0, np.nan)
        out = self._findings(ctx, by_name, st.index, st.step, hint_seen, xid_held)
        if info is not None:
            last = _last_index(~np.isnan(info.values))
            hint_seen = np.where(last >= 0, st.step + last, hint_seen)
        if xid is not None:
            last = _last_index(~np.isnan(xid.values))
            xid_held = np.where(last >= 0, xid.values[np.arange(last.size), last], xid_held)
        st.step, st.hint_seen, st.xid_held = st.step + ctx.steps, hint_seen, xid_held
        return out, st

    def _findings(
        self,
        ctx: Context,
        by_name: Mapping[str, Series],
        index: RowIndex,
        first: int,
        hint_seen: IntArray,
        xid_held: FloatArray,
    ) -> list[Finding]:
        """Findings of the chunk; ``first``: its first step in the run, ``hint_seen``, ``xid_held``: as before it."""
        s = by_name.get(STATUS)
        if s is None:
            return []
        score = self._scores(ctx, s, index.check_of)
        rows = np.flatnonzero((score > 0).any(axis=1) & (s.node_index >= 0))
        if rows.size == 0:
            return []
        info = by_name.get(INFO)
        times = ctx.timestamps
        out = []
        for r in rows.tolist():
            node = ctx.nodes[int(s.node_index[r])]
            comp = s.frame.keys[r].get("component") or "node"
            check = index.checks[index.check_of[r]]
            info_rows = index.info.get((node, check, comp), [])
            hint_at, texts = _hint_text(info, info_rows, first, hint_seen[info_rows], ctx.steps)
            xid_rows = index.xids.get((node, pci_address(comp) or comp), [])
            last_xid = None
            if xid_rows:
                held = _held(by_name[XID_LAST].values[xid_rows], xid_held[xid_rows])
                last_xid = np.fmax.reduce(held, axis=0)
            component = alarm_component(comp, node, index.gpus)
            judged: dict[tuple[int, float | None], tuple[str, str]] = {}
            for c in np.flatnonzero(score[r] > 0).tolist():
                text = texts[hint_at[c]] if hint_at[c] >= 0 else ""
                xid = float(last_xid[c]) if last_xid is not None and last_xid[c] == last_xid[c] else None
                key = (int(hint_at[c]), xid)
                if key not in judged:
                    judged[key] = diagnosis_of(check, text, key[1])
                diagnosis, why = judged[key]
                value = float(s.values[r, c])
                note = f"{check} {STATUS_NAMES[int(value)]}: {text or 'no hint'}" + (f" ({why})" if why else "")
                out.append(
                    Finding(
                        ts=float(times[c]),
                        node=node,
                        component=component,
                        detector=self.name,
                        signal=f"agent:{check}",
                        score=float(score[r, c]),
                        evidence=Evidence(STATUS, s.frame.keys[r].labels, value, note=note[:300]),
                        hint=diagnosis,
                    )
                )
        return out

    def _scores(self, ctx: Context, s: Series, checks: IntArray) -> FloatArray:
        """Score per cell; UNHEALTHY verdicts most nodes share (a BIOS cap everywhere) score 0."""
        st, v = self.settings, s.values
        unhealthy = v == 1  # NaN compares False: a missed scrape is no verdict
        score: FloatArray = np.where(v == 2, st.critical, np.where(unhealthy, st.unhealthy, 0.0))
        ok = s.node_index >= 0
        for check in np.unique(checks[ok & unhealthy.any(axis=1)]):
            rows = np.flatnonzero(ok & (checks == check))
            nodes = s.node_index[rows]
            reporting = np.zeros((len(ctx.nodes), v.shape[1]), dtype=np.int8)
            sick = np.zeros_like(reporting)
            fold_into(np.maximum, reporting, nodes, ~np.isnan(v[rows]))
            fold_into(np.maximum, sick, nodes, unhealthy[rows])
            n_rep, n_sick = reporting.sum(axis=0), sick.sum(axis=0)
            shared = (n_rep >= st.shared_min) & (n_sick >= st.shared * np.maximum(n_rep, 1))
            score[rows] = np.where(unhealthy[rows] & shared[None, :], 0.0, score[rows])
        return score


def _by_entity(
    out: dict[tuple[str, ...], list[int]], s: Series, rows: range, labels: tuple[str, ...], pci: bool = False
) -> None:
    """Adds ``rows`` of a family to ``out`` by (node, label values...); PCI addresses canonical when ``pci``."""
    for r in rows:
        key = s.frame.keys[r]
        values = [key.get(label) or "" for label in labels]
        if pci:
            values = [pci_address(x) or x for x in values]
        out.setdefault((s.frame.nodes[r], *values), []).append(r)


def _hint_text(
    info: Series | None, rows: list[int], first: int, seen_before: IntArray, steps: int
) -> tuple[IntArray, list[str]]:
    """For each step, the index of the verdict's latest hint text seen so far (-1: none), and the texts.

    ``first``: the chunk's first step in the run; ``seen_before``: each row's last step seen before it."""
    if info is None or not rows:
        return np.full(steps, -1, dtype=np.int64), []
    texts = [info.frame.keys[r].get("hint") or "" for r in rows]
    seen = np.where(~np.isnan(info.values[rows]), first + np.arange(steps)[None, :], seen_before[:, None])
    latest = np.maximum.accumulate(seen, axis=1)  # (rows, steps): the last step each hint was seen
    which: IntArray = np.where(latest.max(axis=0) >= 0, latest.argmax(axis=0), -1)
    return which, texts


def _gpu_index(out: dict[tuple[str, str], str], s: Series, rows: range) -> None:
    """Adds (node, PCI address) -> GPU index from ``rows`` of a family carrying both labels."""
    for r in rows:
        key = s.frame.keys[r]
        bus, gpu = pci_address(key.get("pci_bus_id") or ""), key.get("gpu")
        if bus is not None and gpu:
            out.setdefault((s.frame.nodes[r], bus), gpu)
