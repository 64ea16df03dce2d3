"""The agent's data shapes: a check's verdict, the values it measured, and the `Check` role.

A check looks at one family of host facts (kernel log, PCIe links, ...) and yields one
:class:`CheckResult` per component it judged. A check that cannot look says UNKNOWN,
never OK: silence must not read as health.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Protocol


class Status(IntEnum):
    """Verdict of one check on one component; the value is what `peerwatch_agent_check_status` exports."""

    OK = 0
    UNHEALTHY = 1  # degraded or suspicious: watch, drain when convenient
    CRITICAL = 2  # the component is failing or has failed: drain / swap now
    UNKNOWN = 3  # the check could not run or could not decide


SEVERITY: Mapping[Status, int] = {Status.OK: 0, Status.UNKNOWN: 1, Status.UNHEALTHY: 2, Status.CRITICAL: 3}
"""Rank for aggregating verdicts (not the exported value): UNKNOWN sits between OK and UNHEALTHY."""


def worst(statuses: Iterable[Status]) -> Status:
    """The most severe of ``statuses``: CRITICAL > UNHEALTHY > UNKNOWN > OK (OK when empty).

    UNKNOWN outranks OK so that one unreadable part keeps an aggregate from claiming health.
    """
    return max(statuses, key=SEVERITY.__getitem__, default=Status.OK)


LabelPairs = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Measurement:
    """One sample a check measured, exported as ``family{labels} value`` (family from `families.FAMILIES`)."""

    family: str
    labels: LabelPairs
    value: float

    @classmethod
    def of(cls, family: str, value: float, **labels: str) -> Measurement:
        return cls(family, tuple(labels.items()), float(value))


@dataclass(frozen=True, slots=True)
class CheckResult:
    """The verdict of check ``check`` on ``component`` with a remediation hint and its evidence.

    ``component`` names the entity: a PCI address (``0000:3b:00.0``), an InfiniBand port
    (``mlx5_0:1``), an NVMe controller (``nvme0``), a DCGM GPU (``gpu/0``) or ``node``.
    """

    check: str
    component: str
    status: Status
    hint: str
    measurements: tuple[Measurement, ...] = ()


class Check(Protocol):
    """One family of host checks. ``run`` may raise; the agent turns that into UNKNOWN."""

    @property
    def name(self) -> str: ...

    def run(self) -> Iterable[CheckResult]: ...


def unknown(check: str, hint: str, component: str = "node") -> CheckResult:
    """An UNKNOWN result: the check could not run or decide (the hint says why)."""
    return CheckResult(check, component, Status.UNKNOWN, hint)


def format_counts(counts: Mapping[str, float]) -> str:
    """``a=1, b=2`` for non-zero counts, in key order; for hints."""
    return ", ".join(f"{k}={v:g}" for k, v in sorted(counts.items()) if v)
