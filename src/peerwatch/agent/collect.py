"""Running every check once and gathering what they found into one report."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from peerwatch import __version__
from peerwatch.agent.checks import Check, CheckResult, Measurement, Status, unknown
from peerwatch.agent.exposition import render, status_measurements

log = logging.getLogger("peerwatch.agent")


@dataclass(frozen=True, slots=True)
class RunReport:
    """The results of one run of all checks, each check's wall time, and when the run finished."""

    results: tuple[CheckResult, ...]
    durations: Mapping[str, float]
    finished: float  # epoch seconds

    def measurements(self) -> list[Measurement]:
        """Everything the run exports: verdicts, the checks' own values and the agent's bookkeeping."""
        out = status_measurements(self.results)
        for result in self.results:
            out.extend(result.measurements)
        out.extend(
            Measurement.of("peerwatch_agent_check_duration_seconds", d, check=c) for c, d in self.durations.items()
        )
        out.append(Measurement.of("peerwatch_agent_last_run_timestamp_seconds", self.finished))
        out.append(Measurement.of("peerwatch_agent_build_info", 1, version=__version__))
        return out

    def exposition(self) -> str:
        """The report as Prometheus text exposition."""
        return render(self.measurements())


@dataclass
class Agent:
    """Runs ``checks`` in order. A check that raises or yields nothing says UNKNOWN; the others still run."""

    checks: Sequence[Check]
    clock: Callable[[], float] = time.time
    timer: Callable[[], float] = field(default=time.perf_counter, repr=False)

    def run_once(self) -> RunReport:
        """Run every check once."""
        results: list[CheckResult] = []
        durations: dict[str, float] = {}
        for check in self.checks:
            start = self.timer()
            try:
                found = list(check.run())
            except Exception as exc:  # one broken check must not silence the rest; it reports UNKNOWN instead
                log.exception("check %s failed", check.name)
                found = [unknown(check.name, f"check failed: {type(exc).__name__}: {exc}")]
            durations[check.name] = self.timer() - start
            for r in found:
                if r.status is not Status.OK:
                    log.info("%s %s %s: %s", r.check, r.component, r.status.name, r.hint)
            results.extend(found or [unknown(check.name, "check found nothing to report")])
        return RunReport(tuple(results), durations, self.clock())
