"""DCGM background health watches: ``dcgmi health -c`` (the watches must have been set with ``dcgmi health -s``).

The report is a text table::

    | Group 1          | Overall Health: Warning                                 |
    | GPU ID: 0        | Warning                                                 |
    |                  | PCIe system: Warning - Detected more than 8 PCIe        |
    |                  | replays per minute for GPU 0: 13                        |

Overall health becomes the ``node`` result, each entity row (``GPU ID: 0`` → ``gpu/0``,
``NvSwitch ID: 1`` → ``nvswitch/1``) its own result with the incident text as hint.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from peerwatch.agent.checks import CheckResult, Status, unknown
from peerwatch.agent.runner import CommandError, CommandRunner

HEALTH_WORDS: Mapping[str, Status] = {"healthy": Status.OK, "warning": Status.UNHEALTHY, "failure": Status.CRITICAL}
_ENTITY = re.compile(r"^([A-Za-z][A-Za-z ]*?)\s+ID:\s*(\d+)$")
_OVERALL = re.compile(r"Overall Health\s*:?\s*(\w+)?", re.IGNORECASE)


def _status(text: str) -> Status | None:
    word = text.strip().split(" ", 1)[0].lower() if text.strip() else ""
    return HEALTH_WORDS.get(word)


def parse_health(text: str) -> tuple[Status | None, dict[str, tuple[Status, str]]]:
    """Overall status (``None`` when the report has none) and ``{entity: (status, incidents)}``."""
    overall: Status | None = None
    entities: dict[str, tuple[Status, list[str]]] = {}
    current: str | None = None
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        left, right = cells[0], (cells[1] if len(cells) > 1 else "")
        whole = " ".join(cells)
        if match := _OVERALL.search(whole):  # "| Group 1 | Overall Health: Warning |" or "| Overall Health | Healthy |"
            overall = _status(match.group(1) or "")
            current = None
            continue
        if match := _ENTITY.match(left):
            current = f"{match.group(1).replace(' ', '').lower()}/{match.group(2)}"
            status = _status(right)  # Status.OK is 0, so no `or` here
            entities[current] = (Status.UNKNOWN if status is None else status, [])
        elif current is not None and not left and right:
            entities[current][1].append(right)
    out = {}
    for name, (status, parts) in entities.items():
        # The table wraps incident text at the column edge: rejoin it.
        out[name] = (status, " ".join(parts))
    return overall, out


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
        overall, entities = parse_health(done.stdout)
        if overall is None:
            said = next((ln.strip() for ln in (done.stdout + done.stderr).splitlines() if ln.strip()), "no output")
            yield unknown(self.name, f"dcgmi health -c gave no verdict: {said} (are watches set? dcgmi health -s a)")
            return
        summary = "; ".join(f"{e}: {t}" for e, (s, t) in entities.items() if s is not Status.OK and t)
        yield CheckResult(self.name, "node", overall, summary or f"overall health {overall.name}")
        for entity, (status, incidents) in entities.items():
            yield CheckResult(self.name, entity, status, incidents or status.name.lower())
