"""Findings of one incident -> one failure type and the component where the cause is.

Rules are data (``rules.toml``): hints of sure detectors first, then hardware's own evidence, then
weighted votes of every signal. Hardware evidence (error counters and states of a GPU, an IB port,
the NVSwitch, a disk) names the cause when it is strong enough, whatever else moved on the node:
TCP retransmits and slow NFS round trips are what a bad IB port looks like from the storage
client, not a second fault. NFS diagnoses need the storage path itself (a mount's figures) among
their evidence. The evidence is ordered cause first: findings that voted for the diagnosis lead,
the rest (symptoms elsewhere on the node) follow.
"""

from __future__ import annotations

import re
import tomllib
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

from peerwatch.model import DIAGNOSES, Finding

# Where a component is more specific than "node", it names the cause better.
_SPECIFIC = ("gpu/", "ib/", "nfs/", "net/", "disk/", "nvswitch")
# Hardware's own word: counters and states of these components. (A node's network interfaces are
# not here: their errors are as often the storage path's symptom as a NIC's cause.)
HARDWARE = ("gpu/", "ib/", "nvswitch", "disk/")
_HARDWARE_DETECTORS = frozenset({"counter", "state"})
_STORAGE_PATH = frozenset({"nfs_client", "nfs_network"})


@dataclass(frozen=True, slots=True)
class Rule:
    diagnosis: str
    signal: re.Pattern[str]
    weight: float


@dataclass(frozen=True, slots=True)
class Diagnosis:
    diagnosis: str
    component: str
    cause: tuple[Finding, ...]  # findings that point to the diagnosis, strongest first
    symptoms: tuple[Finding, ...]  # the others


@dataclass(frozen=True)
class Diagnoser:
    rules: tuple[Rule, ...]
    hint_priority: tuple[str, ...]
    nvswitch_min_gpus: int = 6
    hint_min: float = 6.0
    # Hardware evidence names the cause from this vote total (two increments of an error counter,
    # any link or PCIe state finding); one isolated PCIe replay or symbol error does not.
    hardware_min: float = 5.0
    # Diagnoses that a hardware fault elsewhere on the node commonly shows as (rules.toml).
    symptoms: frozenset[str] = frozenset()
    # Each signal's votes, found once: a cache keyed by (rules, signal) hashed the whole rule
    # tuple at every look-up (0.9 s of the policy on the 63-node reference).
    _votes_of: dict[str, dict[str, float]] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def default(cls) -> Diagnoser:
        return _default()

    @classmethod
    def from_toml(cls, text: str, where: str = "rules.toml") -> Diagnoser:
        data = tomllib.loads(text)
        rules = []
        for i, row in enumerate(data.get("rule", []), 1):
            unknown = set(row) - {"diagnosis", "signal", "weight"}
            if unknown or row.get("diagnosis") not in DIAGNOSES:
                raise ValueError(
                    f"{where}: rule {i}: unknown keys {sorted(unknown)} or diagnosis {row.get('diagnosis')!r}"
                )
            rules.append(Rule(row["diagnosis"], re.compile(row["signal"]), float(row["weight"])))
        priority = tuple(data.get("hint_priority", ()))
        bad = [d for d in priority if d not in DIAGNOSES]
        if bad:
            raise ValueError(f"{where}: hint_priority names unknown diagnoses {bad}")
        symptoms = frozenset(data.get("symptoms_of_hardware", ()))
        if unknown_symptoms := sorted(symptoms - set(DIAGNOSES)):
            raise ValueError(f"{where}: symptoms_of_hardware names unknown diagnoses {unknown_symptoms}")
        return cls(tuple(rules), priority, int(data.get("nvswitch_min_gpus", 6)), symptoms=symptoms)

    def diagnose(self, findings: Sequence[Finding]) -> Diagnosis:
        """The failure type of one node's incident, from all its findings so far."""
        nvswitch = self._nvswitch(findings)
        if nvswitch is not None:
            return nvswitch
        # A hint counts once its finding is strong: one missed scrape says nothing about an exporter.
        hinted = [f for f in findings if f.hint and f.score >= self.hint_min]
        if hinted:
            rank = {d: i for i, d in enumerate(self.hint_priority)}
            best = min(hinted, key=lambda f: (rank.get(f.hint or "", len(rank)), -f.score))
            diagnosis = best.hint or "unknown"
            cause = [f for f in findings if f.hint == diagnosis or self._votes(f).get(diagnosis)]
            # A hint on the node as a whole (fail-slow) or on half its GPUs or more (throttling on all
            # of them) is the node's.
            alike = [f for f in hinted if f.hint == diagnosis]
            gpus = {f.component for f in alike if f.component.startswith("gpu/")}
            whole = len(gpus) >= 4 or any(f.component == "node" for f in alike)
            return self._result(diagnosis, findings, cause, preferred="node" if whole else best.component)
        hardware = [f for f in findings if f.detector in _HARDWARE_DETECTORS and f.component.startswith(HARDWARE)]
        totals = self._totals(hardware)
        soft = self._totals(findings)
        soft_best = max(soft, key=lambda d: soft[d]) if soft else "unknown"
        # Strong hardware evidence names the cause; weaker hardware evidence still does when what
        # the rest says is what such a fault looks like from elsewhere (slow NFS, a slower node).
        needed = 0.0 if soft_best in self.symptoms else self.hardware_min
        if totals and max(totals.values()) >= max(needed, 1e-9):
            diagnosis = max(totals, key=lambda d: totals[d])
            cause = [f for f in hardware if self._votes(f).get(diagnosis)]
            where = max(cause, key=lambda f: f.score).component
            ids = {id(f) for f in cause}
            others = [f for f in findings if self._votes(f).get(diagnosis) and id(f) not in ids]
            return self._result(diagnosis, findings, cause + others, preferred=where)
        totals = soft
        # A storage-path diagnosis needs the storage path itself among what moved.
        if not any(f.component.startswith("nfs/") for f in findings):
            rest = {d: t for d, t in totals.items() if d not in _STORAGE_PATH}
            totals = rest or totals
        if not totals:
            return self._result("unknown", findings, list(findings))
        diagnosis = max(totals, key=lambda d: totals[d])
        return self._result(diagnosis, findings, [f for f in findings if self._votes(f).get(diagnosis)])

    def _totals(self, findings: Sequence[Finding]) -> dict[str, float]:
        """Each diagnosis' vote: the score of every finding that matches one of its rules, weighted."""
        totals: dict[str, float] = defaultdict(float)
        for f in findings:
            for diagnosis, weight in self._votes(f).items():
                totals[diagnosis] += f.score * weight
        return totals

    def _votes(self, f: Finding) -> Mapping[str, float]:
        votes = self._votes_of.get(f.signal)
        if votes is None:
            votes = self._votes_of[f.signal] = {}
            for rule in self.rules:
                if rule.signal.search(f.signal):
                    votes[rule.diagnosis] = max(votes.get(rule.diagnosis, 0.0), rule.weight)
        return votes

    def _nvswitch(self, findings: Sequence[Finding]) -> Diagnosis | None:
        gpus = {f.component for f in findings if f.component.startswith("gpu/") and self._is_nvlink(f)}
        if len(gpus) < self.nvswitch_min_gpus:
            return None
        cause = [f for f in findings if self._is_nvlink(f)]
        return self._result("nvswitch", findings, cause, preferred="nvswitch")

    def _is_nvlink(self, f: Finding) -> bool:
        # Errors, not low bandwidth: every GPU's NVLink traffic stops when a node leaves the job.
        return f.hint == "nvlink" or ("NVLINK" in f.signal.upper() and "ERROR" in f.signal.upper())

    def _result(
        self, diagnosis: str, findings: Sequence[Finding], cause: list[Finding], preferred: str | None = None
    ) -> Diagnosis:
        cause.sort(key=lambda f: -f.score)
        ids = {id(f) for f in cause}
        symptoms = tuple(sorted((f for f in findings if id(f) not in ids), key=lambda f: -f.score))
        component = preferred or _component(cause or list(findings))
        return Diagnosis(diagnosis, component, tuple(cause), symptoms)


def _component(findings: Sequence[Finding]) -> str:
    """The most specific component among the strongest findings (a GPU over the whole node),
    unless the cause shows on half a node's GPUs or more: then it is the node."""
    if len({f.component for f in findings if f.component.startswith("gpu/")}) >= 4:
        return "node"
    scores: dict[str, float] = defaultdict(float)
    for f in findings:
        scores[f.component] = max(scores[f.component], f.score)
    specific = {c: s for c, s in scores.items() if c.startswith(_SPECIFIC)}
    pool = specific or scores
    return max(pool, key=lambda c: pool[c]) if pool else "node"


@cache
def _default() -> Diagnoser:
    text = resources.files("peerwatch.decide").joinpath("rules.toml").read_text(encoding="utf-8")
    return Diagnoser.from_toml(text)
