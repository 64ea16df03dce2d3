"""DCGM background health watches: runs ``dcgmi health -c`` and reads it with the saved-output reader.

The watches must have been set once with ``dcgmi health -s a``. The report's shapes and verdicts
are :mod:`peerwatch.agent.readers.dcgmi_health`'s: one implementation for live and saved output.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from peerwatch.agent.checks import CheckResult, unknown
from peerwatch.agent.readers import dcgmi_health
from peerwatch.agent.readers.errors import ReadError
from peerwatch.agent.runner import CommandError, CommandRunner


@dataclass(frozen=True)
class DcgmHealthCheck:
    """Reports DCGM's health verdicts; UNKNOWN when dcgmi is absent or the host engine does not answer."""

    runner: CommandRunner
    timeout: float = 20.0
    name: str = "dcgm_health"

    def run(self) -> Iterator[CheckResult]:
        if self.runner.which("dcgmi") is None:
            yield unknown(self.name, "dcgmi not found (DCGM not installed)")
            return
        try:
            done = self.runner.run(("dcgmi", "health", "-c"), self.timeout)
        except CommandError as exc:
            yield unknown(self.name, str(exc))
            return
        try:
            results = dcgmi_health.read(done.stdout)
        except ReadError:
            said = next((ln.strip() for ln in (done.stdout + done.stderr).splitlines() if ln.strip()), "no output")
            yield unknown(self.name, f"dcgmi health -c gave no verdict: {said} (are watches set? dcgmi health -s a)")
            return
        for result in results:
            yield CheckResult(self.name, result.component, result.status, result.hint)
