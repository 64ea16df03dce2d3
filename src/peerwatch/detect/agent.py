"""The host health agent's verdicts (``peerwatch_agent_check_status``) as findings.

A check's status is its current truth: a GPU the agent has called CRITICAL since before the data
began is still CRITICAL, so unlike an XID a status is reported whether or not it changed. OK and
UNKNOWN (the check could not look) are never findings. The diagnosis comes from a table by check
name (``diagnose/agent_checks.csv``), refined by the check's hint text (nvidia-smi, DCGM) and, for
Xids, by the XID meaning table.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources

import numpy as np

from peerwatch.detect.context import Context, IntArray, Series
from peerwatch.diagnose.xid import xid_meaning
from peerwatch.model import DIAGNOSES, Evidence, Finding, FloatArray

STATUS = "peerwatch_agent_check_status"
INFO = "peerwatch_agent_check_info"
XID_LAST = "peerwatch_agent_xid_last"
# Families that join a GPU's PCI address to its index (the agent's own first, dcgm-exporter's too).
GPU_INDEX_FAMILIES = (
    "peerwatch_agent_gpu_info",
    XID_LAST,
    "peerwatch_agent_gpu_utilization_percent",
    "DCGM_FI_DEV_GPU_UTIL",
)
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
    """The rows of ``diagnose/agent_checks.csv`` in order (first match wins)."""
    return parse_check_rules(resources.files("peerwatch.diagnose").joinpath("agent_checks.csv").read_text("utf-8"))


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


def _held(v: FloatArray) -> FloatArray:
    """Each row's last present value up to each step (NaN before the first)."""
    idx = np.maximum.accumulate(np.where(~np.isnan(v), np.arange(v.shape[1]), -1), axis=1)
    return np.where(idx >= 0, np.take_along_axis(v, np.maximum(idx, 0), axis=1), np.nan)


class AgentCheckDetector:
    """Scores the agent's UNHEALTHY and CRITICAL verdicts per node and component."""

    name = "agent"

    def __init__(self, settings: AgentSettings | None = None) -> None:
        self.settings = settings or AgentSettings()

    def detect(self, ctx: Context) -> list[Finding]:
        by_name = ctx.by_name()
        s = by_name.get(STATUS)
        if s is None:
            return []
        checks = np.array([k.get("check") or "" for k in s.frame.keys])
        score = self._scores(ctx, s, checks)
        rows = np.flatnonzero((score > 0).any(axis=1) & (s.node_index >= 0))
        if rows.size == 0:
            return []
        info = _by_entity(by_name.get(INFO), ("check", "component"))
        xids = _by_entity(by_name.get(XID_LAST), ("pci_bus_id",), pci=True)
        gpus = _gpu_index(ctx, by_name)
        times = ctx.timestamps
        out = []
        for r in rows.tolist():
            node = ctx.nodes[int(s.node_index[r])]
            comp = s.frame.keys[r].get("component") or "node"
            check = str(checks[r])
            hint_at, texts = _hint_text(by_name.get(INFO), info.get((node, check, comp), []), ctx.steps)
            xid_rows = xids.get((node, pci_address(comp) or comp), [])
            last_xid = np.fmax.reduce(_held(by_name[XID_LAST].values[xid_rows]), axis=0) if xid_rows else None
            component = alarm_component(comp, node, gpus)
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

    def _scores(self, ctx: Context, s: Series, checks: np.ndarray) -> FloatArray:
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
            np.maximum.at(reporting, nodes, ~np.isnan(v[rows]))
            np.maximum.at(sick, nodes, unhealthy[rows])
            n_rep, n_sick = reporting.sum(axis=0), sick.sum(axis=0)
            shared = (n_rep >= st.shared_min) & (n_sick >= st.shared * np.maximum(n_rep, 1))
            score[rows] = np.where(unhealthy[rows] & shared[None, :], 0.0, score[rows])
        return score


def _by_entity(s: Series | None, labels: tuple[str, ...], pci: bool = False) -> dict[tuple[str, ...], list[int]]:
    """Rows of a family by (node, label values...); PCI addresses canonical when ``pci``."""
    out: dict[tuple[str, ...], list[int]] = {}
    if s is None:
        return out
    for r, key in enumerate(s.frame.keys):
        values = [key.get(label) or "" for label in labels]
        if pci:
            values = [pci_address(x) or x for x in values]
        out.setdefault((s.frame.nodes[r], *values), []).append(r)
    return out


def _hint_text(info: Series | None, rows: list[int], steps: int) -> tuple[IntArray, list[str]]:
    """For each step, the index of the verdict's latest hint text seen so far (-1: none), and the texts."""
    if info is None or not rows:
        return np.full(steps, -1, dtype=np.int64), []
    texts = [info.frame.keys[r].get("hint") or "" for r in rows]
    seen = np.where(~np.isnan(info.values[rows]), np.arange(steps)[None, :], -1)
    latest = np.maximum.accumulate(seen, axis=1)  # (rows, steps): the last step each hint was seen
    which: IntArray = np.where(latest.max(axis=0) >= 0, latest.argmax(axis=0), -1)
    return which, texts


def _gpu_index(ctx: Context, by_name: Mapping[str, Series]) -> dict[tuple[str, str], str]:
    """(node, PCI address) -> GPU index from families carrying both labels."""
    out: dict[tuple[str, str], str] = {}
    for name in GPU_INDEX_FAMILIES:
        s = by_name.get(name)
        if s is None:
            continue
        for node, key in zip(s.frame.nodes, s.frame.keys, strict=True):
            bus, gpu = pci_address(key.get("pci_bus_id") or ""), key.get("gpu")
            if bus is not None and gpu:
                out.setdefault((node, bus), gpu)
    return out
