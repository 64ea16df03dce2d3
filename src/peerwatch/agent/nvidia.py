"""nvidia-smi: the GPU inventory other checks share, and the per-GPU memory/throttle check.

One :class:`NvidiaSmi` is shared by the Xid check (PCI address → GPU index), the PCIe check
(is the GPU busy?) and :class:`NvidiaSmiCheck`; it caches its answer for ``ttl`` seconds so
a run calls nvidia-smi once. nvidia-smi hangs on a sick GPU, so every call has a timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from peerwatch.agent.checks import CheckResult, unknown
from peerwatch.agent.gpu_facts import CLOCK_EVENT_REASONS, GpuQuery, GpuRow, RemapRow, judge_query
from peerwatch.agent.readers.nvidia_smi_csv import (
    MINIMAL_FIELDS,
    QUERY_FIELDS,
    RECOVERY_FIELDS,
    REMAP_FIELDS,
    parse_csv,
    parse_remap,
)
from peerwatch.agent.runner import CommandError, CommandRunner

__all__ = [
    "CLOCK_EVENT_REASONS",
    "MINIMAL_FIELDS",
    "QUERY_FIELDS",
    "RECOVERY_FIELDS",
    "REMAP_FIELDS",
    "GpuQuery",
    "GpuRow",
    "NvidiaSmi",
    "NvidiaSmiCheck",
    "RemapRow",
    "parse_query",
    "parse_remap",
]


def parse_query(stdout: str, fields: str | None = None) -> GpuQuery:
    """Parse ``nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits`` (fields: see :func:`parse_csv`)."""
    return parse_csv(stdout, fields)


@dataclass
class NvidiaSmi:
    """Runs nvidia-smi through ``runner`` and caches each answer for ``ttl`` seconds."""

    runner: CommandRunner
    timeout: float = 20.0
    ttl: float = 5.0
    clock: Callable[[], float] = time.monotonic
    _cache: dict[str, tuple[float, object]] = field(default_factory=dict, repr=False)

    def _cached(self, key: str, compute: Callable[[], object]) -> object:
        hit = self._cache.get(key)
        if hit is not None and self.clock() - hit[0] < self.ttl:
            return hit[1]
        value = compute()
        self._cache[key] = (self.clock(), value)
        return value

    def _run(self, *args: str) -> tuple[int, str]:
        done = self.runner.run(("nvidia-smi", *args), self.timeout)
        return done.returncode, done.stdout + ("\n" + done.stderr if done.stderr else "")

    def query(self) -> GpuQuery:
        """The GPUs nvidia-smi sees now (``error`` set when it could not be asked or answered nothing)."""
        result = self._cached("query", self._query)
        assert isinstance(result, GpuQuery)
        return result

    def _query(self) -> GpuQuery:
        if self.runner.which("nvidia-smi") is None:
            return GpuQuery(error="nvidia-smi not found")
        try:
            for fields in (QUERY_FIELDS, MINIMAL_FIELDS):
                code, out = self._run(f"--query-gpu={fields}", "--format=csv,noheader,nounits")
                if "is not a valid field" not in out:
                    break
        except CommandError as exc:
            return GpuQuery(error=f"{exc} (a hung driver or GPU is a common cause: check dmesg for Xid 79/119)")
        parsed = parse_query(out, fields)
        if parsed.gpus or parsed.lost:
            return parsed
        first = next((line.strip() for line in out.splitlines() if line.strip()), f"exit {code}")
        return GpuQuery(error=f"nvidia-smi: {first}")

    def remapped_rows(self) -> Mapping[str, RemapRow] | None:
        """Row-remapper state per PCI address, or ``None`` where the GPUs or driver do not report it."""
        result = self._cached("remap", self._remap)
        return result if isinstance(result, dict) else None

    def _remap(self) -> dict[str, RemapRow] | None:
        try:
            code, out = self._run(f"--query-remapped-rows={REMAP_FIELDS}", "--format=csv,noheader,nounits")
        except CommandError:
            return None
        return parse_remap(out) if code == 0 else None

    def recovery_actions(self) -> Mapping[str, str] | None:
        """The driver's recovery action per PCI address, or ``None`` where the driver (< 550) has none.

        A call of its own: a field the driver rejects would fail the whole main query.
        """
        result = self._cached("recovery", self._recovery)
        return result if isinstance(result, dict) else None

    def _recovery(self) -> dict[str, str] | None:
        try:
            code, out = self._run(f"--query-gpu={RECOVERY_FIELDS}", "--format=csv,noheader,nounits")
        except CommandError:
            return None
        if code != 0:
            return None
        rows = parse_query(out, RECOVERY_FIELDS).gpus
        return {g.bus_id: g.recovery_action for g in rows if g.recovery_action is not None}


@dataclass(frozen=True)
class NvidiaSmiCheck:
    """Per GPU: the driver's recovery action, uncorrected ECC errors, row-remap and page-retirement state,
    hardware throttling, lost GPUs."""

    smi: NvidiaSmi
    name: str = "nvidia_smi"

    def run(self) -> Iterator[CheckResult]:
        query = self.smi.query()
        if query.error is not None:
            yield unknown(self.name, query.error)
            return
        actions = self.smi.recovery_actions() or {}
        gpus = tuple(replace(g, recovery_action=actions.get(g.bus_id, g.recovery_action)) for g in query.gpus)
        yield from judge_query(replace(query, gpus=gpus), self.smi.remapped_rows(), self.name)
